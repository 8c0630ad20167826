"""The ``gemini`` judge adapter: one Gemini request per planned query writes the query text and
labels every planned candidate (binary or graded, optional rationale).

Same items as the ``openai`` judge (candidates as table rows under opaque keys, one answer schema for
every query, the key-coverage check, optional thumbnails), same cache, retries, losses and costs;
:func:`benchmaker.judge.finalize` enforces the qrels contract. ``mode: sync``, or ``mode: batch``
through the same ``judge_build`` → ``judge_submit`` → ``judge_collect`` rules as OpenAI.
"""

from __future__ import annotations

from ..logs import get_logger
from ..losses import Losses
from .openai import OpenAIJudge

__all__ = ["GeminiJudge"]

log = get_logger("judge.gemini")


class GeminiJudge(OpenAIJudge):
    """The OpenAI judge's items and answer checks on the Gemini provider, sync or batch."""

    provider = "gemini"

    def answers(self, items: list, losses: Losses) -> dict[str, dict]:
        return self.runner.run(items, losses)

"""The ``gemini`` vision adapter: one Gemini ``generateContent`` request per image.

Same items as the ``openai`` adapter (prompts with ``{metadata.<col>}`` placeholders, the facet JSON
schema, downscaled inline images or URLs, the tag / summary checks), same cache, retries, losses and
cost rows; only the provider differs (:mod:`benchmaker.providers.gemini`). ``mode: sync`` sends with
bounded concurrency; ``mode: batch`` (the schema's default) runs as the same ``vision_build`` →
``vision_submit`` → ``vision_collect`` rules as OpenAI (:mod:`benchmaker.providers.batch` with the
Gemini backend). Used as a library, :meth:`GeminiRunner.run` runs those three steps in one call,
with resumable state under ``<cache_dir>/gemini-batches``.
"""

from __future__ import annotations

from ..logs import get_logger
from ..losses import Losses
from .openai import OpenAIAnnotator

__all__ = ["GeminiAnnotator"]

log = get_logger("vision.gemini")


class GeminiAnnotator(OpenAIAnnotator):
    """The OpenAI annotator's items and answer checks on the Gemini provider, sync or batch."""

    provider = "gemini"

    def answers(self, items: list, losses: Losses) -> dict[str, dict]:
        return self.runner.run(items, losses)

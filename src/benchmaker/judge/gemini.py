"""The ``gemini`` judge adapter: one Gemini request per planned query writes the query text and
labels every planned candidate (binary or graded, optional rationale).

Same items as the ``openai`` judge (candidates as descriptions under opaque keys, a schema that
enumerates exactly the planned keys, the key-coverage check, optional thumbnails), same cache,
retries, losses and costs; :func:`benchmaker.judge.finalize` enforces the qrels contract. ``mode:
sync`` or ``mode: batch`` (inline batch jobs, resumable; see :mod:`benchmaker.providers.gemini`).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ..formats import FacetModel
from ..logs import get_logger
from ..losses import Losses
from ..providers.gemini import GeminiRunner
from .openai import answers_to_frame, judge_items, merged_settings

__all__ = ["GeminiJudge"]

log = get_logger("judge.gemini")


class GeminiJudge:
    def __init__(self, *, facets: FacetModel, settings: dict[str, Any], image_root: str, cache_dir: str | None,
                 threads: int = 1, client: Any = None):
        self.facets, self.image_root = facets, image_root
        self.runner = GeminiRunner(stage="judge", item_type="query", settings=merged_settings(settings),
                                   cache_dir=cache_dir, client=client)
        self.settings = self.runner.settings
        self.name = f"gemini:{self.runner.llm.model}"

    @property
    def costs(self) -> list[dict]:
        return self.runner.cost_rows

    def judge(self, plan: pl.DataFrame, annotations: pl.DataFrame, images: pl.DataFrame,
              losses: Losses) -> pl.DataFrame:
        pairs = list(judge_items(plan, annotations, images, self.facets, self.settings, self.image_root, losses))
        items = [it for it, _ in pairs]
        if self.settings.get("mode", "batch") == "batch":
            answers = self.runner.run_batch(items, losses, wait=bool(self.settings.get("wait", True)),
                                            poll_seconds=float(self.settings.get("poll_seconds", 30)))
        else:
            answers = self.runner.run_sync(items, losses)
        return answers_to_frame(answers, {it.item_id: k for it, k in pairs}, self.name,
                                bool(self.settings.get("rationale")))

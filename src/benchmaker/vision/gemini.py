"""The ``gemini`` vision adapter: one Gemini ``generateContent`` request per image.

Same items as the ``openai`` adapter (prompts with ``{metadata.<col>}`` placeholders, the facet JSON
schema, downscaled inline images or URLs, the tag / summary checks), same cache, retries, losses and
cost rows; only the provider differs (:mod:`benchmaker.providers.gemini`). ``mode: sync`` sends with
bounded concurrency; ``mode: batch`` (the schema's default) submits inline-request batch jobs from
the plain ``vision`` rule, with resumable state under ``<cache_dir>/gemini-batches`` (``wait:
false`` submits and stops; the next run collects).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ..formats import FacetModel
from ..logs import get_logger
from ..losses import Losses
from ..providers.gemini import GeminiRunner
from .openai import answers_to_frame, vision_items

__all__ = ["GeminiAnnotator"]

log = get_logger("vision.gemini")


class GeminiAnnotator:
    def __init__(self, *, facets: FacetModel, settings: dict[str, Any], image_root: str, cache_dir: str | None,
                 threads: int = 1, client: Any = None):
        self.facets, self.image_root = facets, image_root
        self.runner = GeminiRunner(stage="vision", item_type="image", settings=settings, cache_dir=cache_dir,
                                   client=client)
        self.settings = self.runner.settings
        self.name = f"gemini:{self.runner.llm.model}"

    @property
    def costs(self) -> list[dict]:
        return self.runner.cost_rows

    def annotate(self, images: pl.DataFrame, losses: Losses) -> pl.DataFrame:
        items = list(vision_items(images, self.facets, self.settings, self.image_root))
        if self.settings.get("mode", "batch") == "batch":
            answers = self.runner.run_batch(items, losses, wait=bool(self.settings.get("wait", True)),
                                            poll_seconds=float(self.settings.get("poll_seconds", 30)))
        else:
            answers = self.runner.run_sync(items, losses)
        return answers_to_frame(answers, images["image_id"].to_list(), self.facets, self.name)

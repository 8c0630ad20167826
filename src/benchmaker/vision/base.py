"""The vision adapter interface and registry."""

from __future__ import annotations

from typing import Any, Protocol

import polars as pl

from ..adapters import load_adapter
from ..formats import FacetModel
from ..losses import Losses

__all__ = ["VisionAnnotator", "ADAPTERS", "get_annotator"]


class VisionAnnotator(Protocol):
    """Turns image rows (canonical ``images`` columns) into ``annotations`` rows.

    Must return exactly one row per image it could annotate, with ``image_id, summary, tags,
    confidence, annotator`` and one column per facet; every image it could not annotate is added to
    ``losses`` (item_type ``image``) with its reason.
    """

    name: str

    def annotate(self, images: pl.DataFrame, losses: Losses) -> pl.DataFrame: ...


# name -> "module:Class"; classes take (facets=, settings=, image_root=, cache_dir=, threads=)
ADAPTERS: dict[str, str] = {
    "clip": "benchmaker.vision.clip:ClipAnnotator",
    "metadata": "benchmaker.vision.metadata:MetadataAnnotator",
    "openai": "benchmaker.vision.openai:OpenAIAnnotator",
    "gemini": "benchmaker.vision.gemini:GeminiAnnotator",
}


def get_annotator(name: str, *, facets: FacetModel, settings: dict[str, Any], image_root: str,
                  cache_dir: str | None, threads: int = 1) -> VisionAnnotator:
    return load_adapter("vision", ADAPTERS, name, facets=facets, settings=settings, image_root=image_root,
                        cache_dir=cache_dir, threads=threads)

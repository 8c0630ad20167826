"""The query-writer adapter interface and registry."""

from __future__ import annotations

from typing import Any, Protocol

import polars as pl

from ..adapters import load_adapter
from ..formats import FacetModel
from ..losses import Losses

__all__ = ["Writer", "ADAPTERS", "get_writer"]


class Writer(Protocol):
    """Writes one query per planned query from its seed image(s) alone.

    ``write(plan, annotations, images, losses)`` gets the canonical ``query_plan`` (the queries to
    write) and the ``annotations`` and ``images`` rows of their images, and returns one row per
    query it wrote: ``query_id, query_text, narrative, writer``. Queries it could not write go to
    ``losses`` (item_type ``query``) with the reason.
    """

    name: str

    def write(self, plan: pl.DataFrame, annotations: pl.DataFrame, images: pl.DataFrame,
              losses: Losses) -> pl.DataFrame: ...


# the query writer runs on the judge's adapter (judge.adapter: docs/judge-rules.md, "Method")
ADAPTERS: dict[str, str] = {
    "rules": "benchmaker.queries.rules:RulesWriter",
    "openai": "benchmaker.queries.openai:OpenAIWriter",
    "gemini": "benchmaker.queries.gemini:GeminiWriter",
}


def get_writer(name: str, *, facets: FacetModel, settings: dict[str, Any], image_root: str,
               cache_dir: str | None, threads: int = 1) -> Writer:
    return load_adapter("queries", ADAPTERS, name, facets=facets, settings=settings, image_root=image_root,
                        cache_dir=cache_dir, threads=threads)

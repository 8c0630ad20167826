"""The judge adapter interface and registry."""

from __future__ import annotations

from typing import Any, Protocol

import polars as pl

from ..adapters import load_adapter
from ..formats import FacetModel
from ..losses import Losses

__all__ = ["Judge", "ADAPTERS", "get_judge"]


class Judge(Protocol):
    """Labels each candidate of each planned query against the query the ``queries`` stage wrote.

    ``judge(plan, annotations, images, losses)`` gets the canonical ``query_plan`` with each query's
    ``query_text`` and ``narrative`` (``judge.read_planned``), and the ``annotations`` and ``images``
    tables, and returns a frame with one row per (query_id, image_id) it judged:
    ``query_id, image_id, relevance_label`` (+ optional ``rationale``, ``judge``).
    Queries it could not judge go to ``losses`` (item_type ``query``) with the reason.
    """

    name: str

    def judge(self, plan: pl.DataFrame, annotations: pl.DataFrame, images: pl.DataFrame,
              losses: Losses) -> pl.DataFrame: ...


ADAPTERS: dict[str, str] = {
    "rules": "benchmaker.judge.rules:RulesJudge",
    "openai": "benchmaker.judge.openai:OpenAIJudge",
    "gemini": "benchmaker.judge.gemini:GeminiJudge",
}


def get_judge(name: str, *, facets: FacetModel, settings: dict[str, Any], image_root: str,
              cache_dir: str | None, threads: int = 1) -> Judge:
    return load_adapter("judge", ADAPTERS, name, facets=facets, settings=settings, image_root=image_root,
                        cache_dir=cache_dir, threads=threads)

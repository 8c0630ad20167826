"""Seed leakage in the summary report and the dataset card (the figures: :mod:`.leakage`, written by the
evaluate aggregate as ``evaluate/leakage.json``; docs/evaluate.md, "Seed leakage")."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from .leakage import FILE, TARGET_SHARE, load

__all__ = ["NOTE", "table", "headline", "summary_section", "card_markdown"]

NOTE = ("Seed leakage: each query is written from its seed image, so its words may fit the seed better than the "
        "other relevant images. \"Seed first\" is the share of queries whose top result is the seed; \"seed rank\" "
        "is the seed's mean rank among the query's relevant images (1 = above all of them) over the queries with "
        "another relevant image, beside the rank it would have if it were ranked like any other relevant image "
        "(\"if no leak\"). A seed rank well below that, or a high seed-first share, means the queries favour their "
        "seeds (docs/evaluate.md, \"Seed leakage\").")


def table(doc: Mapping[str, Any]) -> pl.DataFrame:
    """The shown table: one row per system and scope."""
    rows = [{"system": r["system"], "scope": r["scope"], "queries": r["queries"], "seed first": r["seed_top_share"],
             "seed rank": r["seed_mean_rank"], "if no leak": r["seed_expected_rank"],
             "queries ranked": r["rank_queries"]} for r in doc.get("systems") or []]
    return pl.DataFrame(rows).with_columns(pl.col(pl.Float64).round(3)) if rows else pl.DataFrame({"system": []})


def headline(doc: Mapping[str, Any]) -> str:
    """The benchmark's sentence: the share of queries whose only relevant image is the seed, against the aim."""
    share, n = doc.get("only_seed_relevant_share"), doc.get("queries_evaluated", 0)
    if share is None:
        return "No evaluated query: no leakage figure."
    aim = float(doc.get("target_share", TARGET_SHARE))
    verdict = (f"within the aim of at most {aim:.0%}" if share <= aim else
               f"ABOVE the aim of at most {aim:.0%}: on those queries only the seed can be found, so the scores "
               "reward finding the seed; raise plan.pos_total (more positives per query) or review the seeds "
               "whose queries have no other relevant image")
    return (f"{doc.get('only_seed_relevant', 0)} of {n} evaluated queries ({share:.1%}) have the seed as their only "
            f"relevant image: {verdict}.")


def _copy(path: str | Path, dest_dir: Path) -> None:
    dest_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, dest_dir / FILE)


def summary_section(path: str | Path, out_dir: Path):
    """The report's section "Seed leakage"; copies leakage.json to ``out_dir/evaluate``."""
    from ..pages.report import Section

    doc = load(path)
    _copy(path, out_dir / "evaluate")
    return Section("Seed leakage", text=NOTE + " " + headline(doc), table=table(doc), files=[f"evaluate/{FILE}"],
                   max_rows=60, empty="No evaluated system.")


def card_markdown(path: str | Path, dest_dir: Path) -> str:
    """The card's section "Seed leakage" (markdown); copies leakage.json to ``dest_dir`` (the dataset's
    evaluate/)."""
    from ..pages.report import md_table

    doc = load(path)
    _copy(path, dest_dir)
    return (f"\n### Seed leakage\n\n{NOTE} {headline(doc)}\n\n" + md_table(table(doc), max_rows=60)
            + f"\nFile: `evaluate/{FILE}`.\n")

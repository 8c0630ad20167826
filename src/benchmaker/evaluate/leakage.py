"""Seed leakage (docs/evaluate.md, "Seed leakage"): how much the queries favour their seed image.

A query is written from its seed(s), so its words may describe the seed better than the other images
that answer it. Three figures show how far that goes, from the runs and the qrels the evaluate
aggregate scores anyway (the seeds are the qrels rows with ``is_seed``):

* per evaluated system and scope, ``seed_top_share``: the share of the evaluated queries whose top
  result (score descending, ties by image id, as ``judged@k`` orders) is a seed;
* per system and scope, ``seed_mean_rank``: over the queries whose seed is relevant and that have at
  least one other relevant image, the seed's rank among the query's relevant images (1 = above all
  of them; an image the view does not rank comes after every ranked one, and an unranked seed shares
  the places of the unranked others: ``1 + ranked others + unranked others / 2``), averaged per
  query over its relevant seeds, then over the queries; beside it ``seed_expected_rank``, the mean of
  ``(others + 2) / 2``: the seed's expected rank if it were ranked like any other relevant image. A
  mean rank well below the expected one is the leak;
* for the benchmark, ``only_seed_relevant_share``: the share of the evaluated queries (those with a
  relevant image) whose only relevant images are seeds: a system can score on them only by finding
  the seed. The project aims at most :data:`TARGET_SHARE`.

Written as ``evaluate/leakage.json`` (:func:`write`); the summary report and the dataset card show it
(:func:`summary_section`, :func:`card_markdown`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ..io import atomic_write_text

__all__ = ["FILE", "TARGET_SHARE", "NOTE", "only_seed_relevant", "system_rows", "document", "write", "load", "table",
           "headline", "summary_section", "card_markdown"]

FILE = "leakage.json"

TARGET_SHARE = 0.10  # the share of queries whose only relevant image is the seed this project aims below
NOTE = ("Seed leakage: each query is written from its seed image, so its words may fit the seed better than the "
        "other relevant images. \"Seed first\" is the share of queries whose top result is the seed; \"seed rank\" "
        "is the seed's mean rank among the query's relevant images (1 = above all of them) over the queries with "
        "another relevant image, beside the rank it would have if it were ranked like any other relevant image "
        "(\"if no leak\"). A seed rank well below that, or a high seed-first share, means the queries favour their "
        "seeds (docs/evaluate.md, \"Seed leakage\").")


def _relevance(qrels: pl.DataFrame, queries: Sequence[str]) -> pl.DataFrame:
    """``query_id, image_id, is_seed, rel`` of the evaluated queries."""
    return (qrels.filter(pl.col("query_id").is_in(list(queries)))
            .select("query_id", "image_id", pl.col("is_seed").fill_null(False),
                    (pl.col("relevance_label") > 0).alias("rel"))
            .unique(["query_id", "image_id"], keep="first", maintain_order=True))


def only_seed_relevant(qrels: pl.DataFrame, queries: Sequence[str]) -> int:
    """How many of ``queries`` have relevant images that are all seeds (at least one)."""
    rel = _relevance(qrels, queries).filter("rel")
    per_q = rel.group_by("query_id").agg(pl.col("is_seed").all().alias("only"))
    return int(per_q["only"].sum() or 0)


def system_rows(view: pl.DataFrame, qrels: pl.DataFrame, queries: Sequence[str], system: str,
                scope: str) -> dict[str, Any]:
    """The leakage row of one system's ``view`` (``query_id, image_id, score``: a scope's ranking)."""
    rel = _relevance(qrels, queries)
    seeds = rel.filter("is_seed")
    q_seeded = seeds["query_id"].unique()
    ranked = (view.filter(pl.col("query_id").is_in(q_seeded.implode()))
              .sort(["query_id", "score", "image_id"], descending=[False, True, False])
              .with_columns((pl.int_range(pl.len()).over("query_id") + 1).alias("rank"))
              .select("query_id", "image_id", "rank"))
    top = ranked.filter(pl.col("rank") == 1).join(seeds, on=["query_id", "image_id"], how="semi")
    r = rel.filter("rel").join(ranked, on=["query_id", "image_id"], how="left")
    s, o = r.filter("is_seed"), r.filter(~pl.col("is_seed"))
    pairs = s.select("query_id", "image_id", pl.col("rank").alias("s_rank")).join(
        o.select("query_id", pl.col("rank").alias("o_rank")), on="query_id", how="inner")
    above = (pl.col("o_rank").is_not_null() & (pl.col("s_rank").is_null() | (pl.col("o_rank") < pl.col("s_rank"))))
    both_unranked = pl.col("o_rank").is_null() & pl.col("s_rank").is_null()
    per_seed = pairs.group_by("query_id", "image_id").agg(
        (1 + above.sum() + both_unranked.sum() / 2).alias("seed_rank"), ((pl.len() + 2) / 2).alias("expected"))
    per_q = per_seed.group_by("query_id").agg(pl.col("seed_rank").mean(), pl.col("expected").mean())
    n = q_seeded.len()
    return {"system": system, "scope": scope, "queries": n, "seed_first": top["query_id"].n_unique(),
            "seed_top_share": (top["query_id"].n_unique() / n) if n else None,
            "rank_queries": per_q.height,
            "seed_mean_rank": float(per_q["seed_rank"].mean()) if per_q.height else None,
            "seed_expected_rank": float(per_q["expected"].mean()) if per_q.height else None}


def document(rows: Sequence[Mapping[str, Any]], qrels: pl.DataFrame, queries: Sequence[str]) -> dict[str, Any]:
    """The leakage.json document: the benchmark's figures and one row per system and scope."""
    n = len(queries)
    only = only_seed_relevant(qrels, queries)
    share = (only / n) if n else None
    return {"queries_evaluated": n, "only_seed_relevant": only, "only_seed_relevant_share": share,
            "target_share": TARGET_SHARE, "meets_target": None if share is None else share <= TARGET_SHARE,
            "systems": [dict(r) for r in rows]}


def write(path: str | Path, rows: Sequence[Mapping[str, Any]], qrels: pl.DataFrame, queries: Sequence[str]) -> dict:
    doc = document(rows, qrels, queries)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(doc, indent=2) + "\n")
    return doc


def load(path: str | Path | None) -> dict[str, Any]:
    """leakage.json, checked (an empty dict when ``path`` is None or missing: no evaluation)."""
    if not path or not Path(path).is_file():
        return {}
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    missing = {"queries_evaluated", "only_seed_relevant_share", "target_share", "systems"} - set(doc)
    if missing:
        raise ValueError(f"{path}: not a leakage file (missing {sorted(missing)}); rerun the evaluate rule")
    return doc


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
    from ..summary.report import Section

    doc = load(path)
    _copy(path, out_dir / "evaluate")
    return Section("Seed leakage", text=NOTE + " " + headline(doc), table=table(doc), files=[f"evaluate/{FILE}"],
                   max_rows=60, empty="No evaluated system.")


def card_markdown(path: str | Path, dest_dir: Path) -> str:
    """The card's section "Seed leakage" (markdown); copies leakage.json to ``dest_dir`` (the dataset's
    evaluate/)."""
    from ..summary.report import md_table

    doc = load(path)
    _copy(path, dest_dir)
    return (f"\n### Seed leakage\n\n{NOTE} {headline(doc)}\n\n" + md_table(table(doc), max_rows=60)
            + f"\nFile: `evaluate/{FILE}`.\n")

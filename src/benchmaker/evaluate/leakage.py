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
(:mod:`.leakage_view`: kept apart, so that the evaluate stage imports nothing of the report's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ..io import atomic_write_text

__all__ = ["FILE", "TARGET_SHARE", "only_seed_relevant", "system_rows", "document", "write", "load"]

FILE = "leakage.json"

TARGET_SHARE = 0.10  # the share of queries whose only relevant image is the seed this project aims below



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

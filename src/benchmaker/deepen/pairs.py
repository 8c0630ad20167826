"""Which (query, image) pairs deepening judges, and which system brought each in.

For every deepen system (config order), its run's top ``k`` per query (the corpus ranking, ordered as
``judged@k`` orders it: score descending, ties by image id) minus the pairs that the judge already
labelled (qrels.jsonl) are its *holes*. A pair in the holes of several systems is judged once: it is
*owned* by the system that ranks it highest (smallest depth; ties: the earlier system in config order)
and keeps the list of every system whose top ``k`` holds it (``systems``, for leave-one-system-out).

A duplicate group counts once per query (docs/deepen.md, "Duplicate groups count once"): a hole whose group
(images.jsonl's ``duplicate_group``) already has a judged member for the query is not judged, and of
several holes of one group only the first in the budget order is.

Budgets cut the pairs in one global order, shallowest first: depth, then the owner's config order,
then query id, then image id (TREC pooling judges depth 1 of every run before depth 2). ``max_pairs``
keeps the first pairs of that order; ``max_usd`` keeps them while the estimated spend of the kept pairs
stays within the budget. Every ``deepen_system`` job computes the same assignment from the same runs,
so the jobs are independent (one per system) and no pair is judged twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from ..evaluate.metrics import top_k
from ..evaluate.runs import read_run
from ..logs import get_logger

__all__ = ["ASSIGNED_SCHEMA", "system_tops", "assign", "one_per_group", "group_extras",
           "read_group_members", "cap_by_cost", "run_paths"]

log = get_logger("deepen")

ASSIGNED_SCHEMA = {"query_id": pl.String, "image_id": pl.String, "system": pl.String, "depth": pl.Int64,
                   "order": pl.Int64, "systems": pl.List(pl.String)}


def run_paths(runs: Sequence[str] | str, systems: Sequence[str]) -> dict[str, str]:
    """``{system: run file}`` in the order of ``systems`` (run files are ``<system>.trec``)."""
    paths = [runs] if isinstance(runs, str) else list(runs)
    by_name = {Path(p).stem: str(p) for p in paths}
    missing = [s for s in systems if s not in by_name]
    if missing:
        raise ValueError(f"deepen: no run file for system(s) {missing} (have {sorted(by_name)})")
    return {s: by_name[s] for s in systems}


def system_tops(runs: Mapping[str, str], k: int, queries: Sequence[str] | None = None) -> pl.DataFrame:
    """``system, order, query_id, image_id, depth`` (depth 1..k) of each run's top ``k`` per query,
    only the given ``queries`` when set. Only the top ``k`` of each run is kept in memory."""
    frames = []
    for order, (name, path) in enumerate(runs.items()):
        run = read_run(path)
        if queries is not None:
            run = run.filter(pl.col("query_id").is_in(list(queries)))
        t = top_k(run, k).select(
            pl.lit(name).alias("system"), pl.lit(order, pl.Int64).alias("order"), "query_id", "image_id",
            (pl.int_range(pl.len()).over("query_id") + 1).cast(pl.Int64).alias("depth"))
        frames.append(t)
    if not frames:
        return pl.DataFrame(schema={"system": pl.String, "order": pl.Int64, "query_id": pl.String,
                                    "image_id": pl.String, "depth": pl.Int64})
    return pl.concat(frames)


def assign(tops: pl.DataFrame, judged: pl.DataFrame, max_pairs: int | None = None,
           groups: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per unjudged pair of any top k: its owner (``system``, ``depth``, ``order``) and every
    system whose top k holds it (``systems``, config order), in the budget order, cut at ``max_pairs``.

    ``groups`` (``image_id, duplicate_group`` of the images whose group has several members:
    :func:`read_group_members`): a duplicate group counts once per query, so a
    hole is dropped when a member of its group is judged for the query (in ``judged``) or comes earlier
    in the budget order (:func:`one_per_group`); before ``max_pairs`` cuts."""
    holes = tops.join(judged.select("query_id", "image_id").unique(), on=["query_id", "image_id"], how="anti")
    out = (
        holes.sort(["query_id", "image_id", "depth", "order"])
        .group_by("query_id", "image_id", maintain_order=True)
        .agg(pl.col("system").first(), pl.col("depth").first(), pl.col("order").first(),
             pl.col("system").sort_by("order").alias("systems"))
        .sort(["depth", "order", "query_id", "image_id"])
        .select(list(ASSIGNED_SCHEMA))
        .cast(ASSIGNED_SCHEMA)
    )
    if groups is not None:
        out = one_per_group(out, judged, groups)
    if max_pairs is not None:
        out = out.head(int(max_pairs))
    return out


def one_per_group(assigned: pl.DataFrame, judged: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """``assigned`` (budget order) without the pairs whose duplicate group already has a member for the
    query: judged (``judged``: qrels, every pool, seeds included) or an earlier pair of the order (the
    shallowest member is judged, for the group). Logs how many were dropped."""
    if not assigned.height or not groups.height:
        return assigned
    g = groups.select("image_id", "duplicate_group").unique("image_id", keep="first")
    taken = (judged.select("query_id", "image_id").join(g, on="image_id", how="inner")
             .select("query_id", "duplicate_group").unique().with_columns(pl.lit(True).alias("_judged")))
    x = (assigned.join(g, on="image_id", how="left", maintain_order="left")
         .join(taken, on=["query_id", "duplicate_group"], how="left", maintain_order="left"))
    grouped = pl.col("duplicate_group").is_not_null()
    keep = ~grouped | (pl.col("_judged").is_null() & pl.struct("query_id", "duplicate_group").is_first_distinct())
    kept = x.filter(keep)
    if kept.height < assigned.height:
        n_judged = x.filter(grouped & pl.col("_judged").is_not_null()).height
        log.info("deepen: %d pair(s) not judged: their duplicate group already has a member for the query "
                 "(%d judged before, %d earlier in the deepening order)", assigned.height - kept.height,
                 n_judged, assigned.height - kept.height - n_judged)
    return kept.select(assigned.columns)


def read_group_members(images: str, *, columns: Mapping[str, str] | None = None,
                       block_bytes: int = 64 << 20) -> pl.DataFrame:
    """``image_id, duplicate_group`` of the images of images.jsonl whose duplicate group has several
    members, read one block at a time (memory holds the groups' members, not the corpus). A group is
    named by its first member (benchmaker.preprocess.duplicates), so the rows whose ``duplicate_group``
    differs from their ``image_id`` are the copies, and the groups they name are the first members."""
    from ..table_blocks import iter_table_blocks

    schema = {"image_id": pl.String, "duplicate_group": pl.String}
    copies = [blk.filter(pl.col("duplicate_group").is_not_null() & (pl.col("duplicate_group") != pl.col("image_id")))
              .select("image_id", "duplicate_group").cast(schema)
              for blk in iter_table_blocks("images", images, columns=columns, block_bytes=block_bytes)
              if "duplicate_group" in blk.columns]
    if not copies:
        return pl.DataFrame(schema=schema)
    c = pl.concat(copies)
    heads = c.select(pl.col("duplicate_group").alias("image_id"), "duplicate_group").unique(maintain_order=True)
    return pl.concat([heads, c]).unique("image_id", keep="first", maintain_order=True)


def group_extras(pairs: pl.DataFrame, groups: pl.DataFrame) -> int:
    """How many rows of ``pairs`` (query_id, image_id) are a second (third, ...) member of a duplicate
    group in their query: 0 when a group counts once everywhere."""
    if not pairs.height or not groups.height:
        return 0
    g = groups.select("image_id", "duplicate_group").unique("image_id", keep="first")
    x = pairs.select("query_id", "image_id").unique().join(g, on="image_id", how="inner")
    return x.height - x.select("query_id", "duplicate_group").unique().height


def cap_by_cost(assigned: pl.DataFrame, pair_usd: pl.DataFrame, max_usd: float | None) -> pl.DataFrame:
    """The first pairs of ``assigned`` (budget order kept) whose cumulated estimated cost
    (``pair_usd``: query_id, image_id, usd) stays within ``max_usd``; all of them when it is None."""
    if max_usd is None or not assigned.height:
        return assigned
    cost = assigned.join(pair_usd, on=["query_id", "image_id"], how="left", maintain_order="left")
    keep = cost["usd"].fill_null(0.0).cum_sum() <= float(max_usd) + 1e-12
    return assigned.filter(keep)

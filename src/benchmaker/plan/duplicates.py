"""One member per duplicate group in a query's pools (``plan.one_per_duplicate_group``, docs/planner.md).

``images.jsonl`` gives every image its ``duplicate_group`` (byte-identical copies and pHash
near-duplicates, decided over the whole corpus by ``merge_images``; benchmaker.preprocess.duplicates).
After the planner has drawn the pools, this step walks each query's candidates in plan order (seeds
first, then positive, neutral, hard, near-miss, easy) and removes every candidate whose group already
has a member earlier in the query: the image, its copy and its resized copy would otherwise each count
as a relevant result, which inflates recall. Seeds are never removed. A removed candidate is not
replaced: its pool's ``shortfall`` records it (got one less, with the reason) and the log counts them.

A separate, vectorised step (one polars pass to find the removals; only the affected queries are
rebuilt), so the planner itself is untouched: when no image of the plan has a duplicate, the plan is
returned as it is, byte for byte.
"""

from __future__ import annotations

from collections import Counter

import polars as pl

from ..logs import get_logger

__all__ = ["group_members", "one_per_group", "REASON"]

log = get_logger("plan")

REASON = "shares a duplicate group with an earlier candidate of the query (plan.one_per_duplicate_group)"


def group_members(images: pl.DataFrame) -> pl.DataFrame:
    """``image_id, duplicate_group`` of the images whose group has another member (empty when the
    images carry no ``duplicate_group`` column, e.g. an images.jsonl written before it existed)."""
    if "duplicate_group" not in images.columns:
        return pl.DataFrame(schema={"image_id": pl.String, "duplicate_group": pl.String})
    g = images.select("image_id", "duplicate_group").unique("image_id", keep="first")
    return g.filter(pl.col("duplicate_group").is_not_null() & pl.col("duplicate_group").is_duplicated())


def one_per_group(plan: pl.DataFrame, groups: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """``plan`` (a ``query_plan`` frame) with at most one member of each duplicate group per query;
    returns it and the number of candidates removed. ``groups``: :func:`group_members`."""
    if plan.height == 0 or groups.height == 0:
        return plan, 0
    cands = (plan.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("_q"), "candidates")
             .explode("candidates").filter(pl.col("candidates").is_not_null())
             .unnest("candidates")
             .join(groups, on="image_id", how="left", maintain_order="left"))
    in_group = pl.col("duplicate_group").is_not_null()
    drop = cands.with_columns(
        (in_group & (pl.col("pool") != "seed") & ~pl.struct("_q", "duplicate_group").is_first_distinct())
        .alias("_drop")).filter("_drop")
    if drop.height == 0:
        return plan, 0
    gone: dict[int, set[str]] = {}
    for q, image_id in drop.select("_q", "image_id").iter_rows():
        gone.setdefault(q, set()).add(image_id)
    fixed = [_without(plan.row(q, named=True), ids) for q, ids in sorted(gone.items())]
    keep = pl.int_range(pl.len(), dtype=pl.Int64).is_in(list(gone)).not_()
    out = (pl.concat([plan.with_row_index("_q").filter(keep),
                      pl.DataFrame(fixed, schema=plan.schema, orient="row")
                      .with_columns(pl.Series("_q", sorted(gone), dtype=pl.UInt32)).select("_q", *plan.columns)])
           .sort("_q").drop("_q"))
    per_pool = Counter(drop["pool"].to_list())
    log.info("one member per duplicate group: removed %d candidate(s) from %d of %d queries (%s); their pools "
             "are one short each (shortfall)", drop.height, len(gone), plan.height,
             ", ".join(f"{p}: {n}" for p, n in sorted(per_pool.items())))
    return out, drop.height


def _without(row: dict, ids: set[str]) -> dict:
    """One plan row without the candidates ``ids``: counts and shortfall follow."""
    removed = Counter(c["pool"] for c in row["candidates"] if c["image_id"] in ids)
    row = dict(row)
    row["candidates"] = [c for c in row["candidates"] if c["image_id"] not in ids]
    row["candidate_image_ids"] = [c["image_id"] for c in row["candidates"]]
    row["difficulty"] = {p: n - removed.get(p, 0) for p, n in row["difficulty"].items()}
    short = [dict(s) for s in row["shortfall"]]
    for pool, n in removed.items():
        note = f"{n} candidate(s) removed: {REASON}"
        hit = next((s for s in short if s["pool"] == pool), None)
        if hit is not None:
            hit["got"] -= n
            hit["reason"] = f"{hit['reason']}; {note}"
        else:
            got = row["difficulty"][pool]
            short.append({"pool": pool, "wanted": got + n, "got": got, "reason": note})
    row["shortfall"] = short
    return row

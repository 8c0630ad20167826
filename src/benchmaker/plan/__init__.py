"""Plan stage: seeds and candidate pools per query -> query_plan.jsonl (docs/planner.md).

``run(...)`` reads annotations and images, picks seeds (stratified over core-facet combinations, or
from a seeds file), and for each query draws positive / neutral / hard / near-miss / easy candidates
(``benchmaker.plan.planner``). Queries that cannot be planned at all go to the losses file; pools that
could not be filled are recorded per query in ``shortfall`` and logged. With ``paths.pools_file`` the
plan is that file's queries and candidates instead (``benchmaker.plan.pools``).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Mapping

import numpy as np
import polars as pl

from ..columnar import read_copy
from ..formats import CANDIDATE, POOLS, SHORTFALL, FacetModel, empty_table, write_table
from ..logs import get_logger, progress
from ..losses import Losses
from ..settings_schema import filled
from ..table_blocks import iter_table_columns
from .candidates import PlannedQuery
from .duplicates import group_members, one_per_group
from .index import Index, build_index
from .planner import DEFAULTS, SAMPLE_CAP, Planner, use_compiled
from .pools import IMPORTED, read_pools_file
from .seeds import query_ids, read_seeds_file, sample_seeds

__all__ = ["run", "plan_frames", "read_plan_inputs", "DEFAULTS", "SAMPLE_CAP"]

log = get_logger("plan")

PLANNER_POOLS = tuple(p for p in POOLS if p != IMPORTED)   # what the planner draws; + imported with a pools file


def _strata(index: Index, s: Mapping[str, Any]) -> list[int]:
    facets = s["core_facets"] or s["diversity_facets"]
    return [index.col(f) for f in facets]


def plan_frames(ann: pl.DataFrame, images: pl.DataFrame, facets: FacetModel, settings: Mapping[str, Any],
                benchmark_name: str, losses: Losses, seeds_file: str | None = None,
                columns: Mapping[str, str] | None = None,
                sample_cap: int = SAMPLE_CAP, pools_file: str | None = None,
                compiled: bool | None = None) -> pl.DataFrame:
    """The query plan as a canonical ``query_plan`` frame (see module doc). ``compiled``: run the
    per-query search compiled with numba (the same plan); None: when there are enough queries to
    repay numba's import (``planner.use_compiled``)."""
    s = filled("plan", settings)
    if s["neg_hard"] + s["neg_nearmiss"] + s["neg_easy"] != s["neg_total"]:
        raise ValueError("plan.neg_total must equal neg_hard + neg_nearmiss + neg_easy")
    rng = np.random.default_rng(int(s["random_seed"]))
    t0 = time.perf_counter()
    index = build_index(ann, images, facets, rng, postings_for=s["core_facets"], postings_min_bucket=sample_cap)
    groups = group_members(images)  # images that have a duplicate (usually few)
    del ann, images  # the index holds what the planner needs
    n_fp = int(index.sha_ok.sum())
    if index.n and n_fp < index.n:
        log.warning("%d annotated images have no sha256 in images.jsonl; duplicate checks skip them",
                    index.n - n_fp)
    log.info("indexed %d annotated images, %d distinct tags (%.1f s)%s", index.n, len(index.tag_vocab),
             time.perf_counter() - t0,
             "".join(f"; inverted index over {len(p.keys)} (core bucket, tag) lists, {p.members.size} entries"
                     for p in index._postings.values()))
    if pools_file:
        if seeds_file:
            log.warning("paths.seeds_file %s is not used: paths.pools_file fixes the queries and their seeds",
                        seeds_file)
        planned = read_pools_file(pools_file, index, s, benchmark_name, losses, columns)
        log.info("pools file %s: %d queries with fixed pools (the planner draws nothing; seeds_file and the "
                 "pool quotas are not used)", pools_file, len(planned))
        _report(planned)
        return _to_frame(planned, index.ids, index.facet_names, index.typed, [index.col(f) for f in s["core_facets"]],
                         POOLS)
    if seeds_file:
        queries = read_seeds_file(seeds_file, index, benchmark_name, losses, columns)
        log.info("seeds file %s: %d queries", seeds_file, len(queries))
    else:
        queries, missing = sample_seeds(index, _strata(index, s), int(s["num_seeds"]),
                                        int(s["seeds_per_query"]), benchmark_name, rng)
        if missing:
            ids = query_ids(benchmark_name, int(s["num_seeds"]))[len(queries):]
            for qid in ids:
                losses.add("query", qid, "no_seed_available",
                           f"only {len(queries)} queries of {s['seeds_per_query']} unused seed image(s) "
                           f"each could be drawn from {index.n} annotated images")
            log.warning("asked for %d queries, only %d could get seeds", s["num_seeds"], len(queries))
        strata = Counter(q.stratum for q in queries)
        log.info("sampled %d queries over %d strata (%s)", len(queries), len(strata),
                 ", ".join(f"{k}: {v}" for k, v in sorted(strata.items())[:10]) + (" ..." if len(strata) > 10 else ""))
    if compiled is None:
        compiled = use_compiled(len(queries))
    planner = Planner(index, s, rng, sample_cap=sample_cap, compiled=compiled)
    planner.reserve_seeds(queries)
    planned: list[PlannedQuery] = []
    with progress(total=len(queries), desc="plan", unit="query", logger=log) as bar:
        for sq in queries:
            planned.append(planner.plan(sq))
            bar.update(1)
    _report(planned)
    cov = planner.coverage
    log.info("core-bucket lookups: %d scored the whole bucket, %d a window plus every image sharing a seed tag "
             "(exact ranking), %d a window plus the images carrying the seeds' rarest tags (window %d, "
             "inverted-index budget %d); %d neutral pools also searched facet by facet", cov["whole bucket"],
             cov["every image sharing a seed tag"], cov["sampled"], planner.cap, planner.post_budget,
             cov["neutral per-facet search"])
    core = [index.col(f) for f in s["core_facets"]]
    ids, names, typed = index.ids, index.facet_names, index.typed
    del planner, index  # the search's arrays (~0.5 GB at 1M images) go before the plan frame is built
    frame = _to_frame(planned, ids, names, typed, core, PLANNER_POOLS)
    return one_per_group(frame, groups)[0] if s["one_per_duplicate_group"] else frame


def _report(planned: list[PlannedQuery]) -> None:
    short = [(q.query_id, sf) for q in planned for sf in q.shortfall]
    for i, (qid, sf) in enumerate(short):
        line = "query %s: pool %s got %d of %d (%s)"
        args = (qid, sf["pool"], sf["got"], sf["wanted"], sf["reason"])
        (log.warning if i < 20 else log.debug)(line, *args)
    if short:
        per_pool = Counter(sf["pool"] for _, sf in short)
        missing = Counter()
        for _, sf in short:
            missing[sf["pool"]] += sf["wanted"] - sf["got"]
        log.warning("shortfall in %d of %d queries: %s", len({q for q, _ in short}), len(planned),
                    ", ".join(f"{p}: {per_pool[p]} queries / {missing[p]} candidates" for p in POOLS if p in per_pool))
    totals = Counter(p[1] for q in planned for p in q.picks)
    log.info("planned %d queries; candidates per pool: %s", len(planned),
             ", ".join(f"{p}={totals.get(p, 0)}" for p in POOLS[1:] if p != IMPORTED or totals.get(p)))


def _to_frame(planned: list[PlannedQuery], image_ids: list[str], facet_names: list[str], typed: list[dict[str, Any]],
              core: list[int], pools: tuple[str, ...]) -> pl.DataFrame:
    """The planned queries as a ``query_plan`` frame, built column by column: one (image position,
    pool, reason) row per candidate, image ids gathered in one pass (no Python dict per candidate)."""
    import pyarrow as pa  # only here: the stage's imports stay light until the plan is written

    pos: list[int] = []
    pool_of: list[str] = []
    reason: list[str] = []
    cand_off, seed_off = [0], [0]
    seed_pos: list[int] = []
    difficulty = []
    for q in planned:
        pos += q.seeds
        seed_pos += q.seeds
        pool_of += ["seed"] * len(q.seeds)
        reason += ["seed"] * len(q.seeds)
        for i, pool, why in q.picks:
            pos.append(i)
            pool_of.append(pool)
            reason.append(why)
        cand_off.append(len(pos))
        seed_off.append(len(seed_pos))
        counts = Counter(p[1] for p in q.picks)
        counts["seed"] = len(q.seeds)
        difficulty.append({p: counts.get(p, 0) for p in pools})
    schema: dict[str, Any] = {
        "query_id": pl.String, "seed_image_ids": pl.List(pl.String), "candidate_image_ids": pl.List(pl.String),
        "candidates": pl.List(CANDIDATE), "difficulty": pl.Struct({p: pl.Int64 for p in pools}),
        "shortfall": pl.List(SHORTFALL),
    }
    if core:
        schema["profile"] = pl.Struct({
            facet_names[f]: (pl.Boolean if set(typed[f].values()) <= {True, False, None}
                             and any(isinstance(v, bool) for v in typed[f].values()) else pl.String)
            for f in core
        })
    if not planned:
        return pl.DataFrame(schema=schema)
    # arrow arrays from polars series, never from Python lists (pa.array imports pandas: ~0.3 s)
    def arrow(values: list, dtype: Any) -> Any:
        return pl.Series(values, dtype=dtype).to_arrow()

    ids = pl.Series(image_ids, dtype=pl.String)
    cand_ids = ids.gather(np.asarray(pos, dtype=np.int64)).to_arrow()
    seed_ids = ids.gather(np.asarray(seed_pos, dtype=np.int64)).to_arrow()
    del ids
    cand_struct = pa.StructArray.from_arrays([cand_ids, arrow(pool_of, pl.String), arrow(reason, pl.String)],
                                             names=["image_id", "pool", "reason"])
    offs = arrow(cand_off, pl.Int64)
    # shortfall column by column (a Series of lists of dicts is built dict by dict: ~1 s at 10k queries)
    short = [sf for q in planned for sf in q.shortfall]
    short_off = np.cumsum([0] + [len(q.shortfall) for q in planned], dtype=np.int64)
    short_struct = pa.StructArray.from_arrays(
        [arrow([sf[f] for sf in short], t) for f, t in SHORTFALL.to_schema().items()],
        names=list(SHORTFALL.to_schema()))
    cols = {
        "query_id": pl.Series([q.query_id for q in planned], dtype=pl.String),
        "seed_image_ids": pl.from_arrow(pa.LargeListArray.from_arrays(arrow(seed_off, pl.Int64), seed_ids)),
        "candidate_image_ids": pl.from_arrow(pa.LargeListArray.from_arrays(offs, cand_ids)),
        "candidates": pl.from_arrow(pa.LargeListArray.from_arrays(offs, cand_struct)),
        "difficulty": pl.DataFrame({p: [d[p] for d in difficulty] for p in pools},
                                   schema=schema["difficulty"].to_schema()).to_struct(),
        "shortfall": pl.from_arrow(pa.LargeListArray.from_arrays(arrow(short_off, pl.Int64), short_struct)),
    }
    if core:
        prof = schema["profile"].to_schema()
        cols["profile"] = pl.DataFrame({k: [q.profile.get(k) for q in planned] for k in prof},
                                       schema=prof).to_struct()
    return pl.DataFrame([s.alias(k) for k, s in cols.items()]).cast(schema)  # type: ignore[arg-type]


def _read_columns(kind: str, path: str, keep: list[str], columns, fm: FacetModel | None = None,
                  optional: tuple[str, ...] = (), categorical: tuple[str, ...] = ()) -> pl.DataFrame:
    """The columns the planner's index needs, parsed and validated block by block (only those: the
    other columns (summaries, confidences, licenses, ...) are neither parsed nor held in memory;
    ``table_blocks.iter_table_columns``). ``optional`` columns are kept where the file has them;
    ``categorical`` ones are read as (lists of) Categorical."""
    frames = list(iter_table_columns(kind, path, keep, optional=optional, columns=columns, facets=fm,
                                     categorical=categorical))
    if not frames:
        return empty_table(kind, fm).select(keep)
    return pl.concat(frames, how="vertical_relaxed")


def read_plan_inputs(annotations: str, images: str, fm: FacetModel, columns: Mapping[str, str] | None,
                     annotations_columns: str | None = None,
                     images_columns: str | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(annotations, images) with only the columns the planner's index needs, validated; tags as lists
    of Categorical (the index only needs their codes: a quarter of the memory of string views). From
    the merges' columnar copies (``*_columns``, ``benchmaker.columnar``) when they belong to the JSONL
    files as they are now, else (one log line says why) from the JSONL files."""
    t0 = time.perf_counter()
    ann = read_copy(annotations_columns, kind="annotations", source=annotations, facets=fm, columns=columns)
    how_a = "columnar copy" if ann is not None else "JSONL"
    if ann is None:
        ann = _read_columns("annotations", annotations, ["image_id", "tags", *fm.names], columns, fm,
                            categorical=("tags",))
    t1 = time.perf_counter()
    img = read_copy(images_columns, kind="images", source=images, columns=columns)
    how_i = "columnar copy" if img is not None else "JSONL"
    if img is None:
        img = _read_columns("images", images, ["image_id", "sha256", "phash"], columns,
                            optional=("duplicate_group",))
    log.info("read %d annotations (%s, %.1f s) and %d images (%s, %.1f s)", ann.height, how_a, t1 - t0,
             img.height, how_i, time.perf_counter() - t1)
    return ann, img


def run(
    *,
    annotations: str,
    images: str,
    plan: str,
    losses: str,
    settings: Mapping[str, Any],
    facets: Mapping[str, Any],
    benchmark_name: str,
    columns: Mapping[str, str],
    version: str | None = None,
    threads: int = 1,
    seeds_file: str | None = None,
    pools_file: str | None = None,
    annotations_columns: str | None = None,
    images_columns: str | None = None,
) -> None:
    fm = FacetModel.from_config(facets)
    loss = Losses("plan")
    # read inside the call so that plan_frames holds the only references and can free the tables early
    df = plan_frames(*read_plan_inputs(annotations, images, fm, columns, annotations_columns, images_columns),
                     fm, settings, benchmark_name, loss, seeds_file=seeds_file, columns=columns, pools_file=pools_file)
    n = write_table(df, "query_plan", plan, columns=columns)
    loss.write(losses)
    log.info("wrote %d planned queries to %s; %d losses", n, plan, len(loss))

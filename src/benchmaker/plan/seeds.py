"""Seeds: stratified sampling over core-facet combinations, or a user's seeds file."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..formats import FormatError, iter_json_objects
from ..losses import Losses
from .index import Index

__all__ = ["SeedQuery", "query_prefix", "query_ids", "sample_seeds", "read_seeds_file"]


@dataclass
class SeedQuery:
    query_id: str
    seeds: list[int]          # image positions in the index
    stratum: str = ""         # human-readable stratum (core-facet combination) for logs


def query_prefix(benchmark_name: str) -> str:
    p = re.sub(r"[^A-Za-z0-9._-]+", "_", str(benchmark_name)).strip("_")
    return p or "query"


def query_ids(benchmark_name: str, n: int) -> list[str]:
    width = max(4, len(str(n)))
    prefix = query_prefix(benchmark_name)
    return [f"{prefix}_q{i:0{width}d}" for i in range(1, n + 1)]


def _allocate(capacity: list[int], total: int, order: list[int]) -> list[int]:
    """Water-filling: as equal a share per stratum as capacities allow; leftovers go in ``order``."""
    alloc = [0] * len(capacity)
    remaining = min(total, sum(capacity))
    while remaining > 0:
        active = [k for k in order if alloc[k] < capacity[k]]
        share = remaining // len(active)
        if share == 0:
            for k in active[:remaining]:
                alloc[k] += 1
            break
        for k in active:
            give = min(share, capacity[k] - alloc[k])
            alloc[k] += give
            remaining -= give
    return alloc


def sample_seeds(index: Index, strata_facets: list[int], num_seeds: int, per_query: int,
                 benchmark_name: str, rng: np.random.Generator) -> tuple[list[SeedQuery], int]:
    """``num_seeds`` queries of ``per_query`` seeds each, balanced across strata.

    Strata are the combinations of ``strata_facets`` present in the collection. Each stratum gets an
    equal share (water-filling when a stratum is too small); within a stratum seeds are consecutive
    in the index's fixed random order, so one query's seeds share the stratum's facet values. Query ids
    interleave the strata (round robin in a seeded random stratum order). Returns (queries, shortfall).
    """
    b = index.buckets(strata_facets)
    keys = sorted(b.spans)
    capacity = [(b.spans[k][1] - b.spans[k][0]) // per_query for k in keys]
    order = [int(x) for x in rng.permutation(len(keys))] if keys else []
    alloc = _allocate(capacity, num_seeds, order)
    picked: list[list[list[int]]] = []
    for k, a in zip(keys, alloc):
        start = b.spans[k][0]
        mem = b.members[start:start + a * per_query]
        picked.append([sorted(int(x) for x in mem[q * per_query:(q + 1) * per_query]) for q in range(a)])
    seq: list[tuple[int, list[int]]] = []
    rnd = 0
    while True:
        added = False
        for k in order:
            if rnd < len(picked[k]):
                seq.append((k, picked[k][rnd]))
                added = True
        if not added:
            break
        rnd += 1
    ids = query_ids(benchmark_name, len(seq))
    out = []
    for qid, (_k, seeds) in zip(ids, seq):
        label = ",".join(f"{index.facet_names[f]}={index.values[f][index.codes[seeds[0], f]]}" for f in strata_facets)
        out.append(SeedQuery(qid, seeds, label or "all"))
    return out, max(0, num_seeds - len(seq))


def file_queries(rows: list[tuple], benchmark_name: str, index: Index, path: str, losses: Losses,
                 not_annotated: str = "has no annotation"):
    """``(query id, annotated seed positions, row)`` per row ``(query id or None, seed ids, ...)`` of a
    seeds or pools file, in file order. A missing query id is generated from the row number
    (``<benchmark>_q0001`` = first row); a duplicate id, or a query left without an annotated seed, is
    a loss (item_type ``query``); each unannotated seed is dropped with a loss (item_type ``image``)."""
    generated = query_ids(benchmark_name, len(rows))
    pos = {iid: i for i, iid in enumerate(index.ids)}
    seen: set[str] = set()
    for row, gen in zip(rows, generated):
        qid, seeds = row[0], row[1]
        qid = str(qid) if qid not in (None, "") else gen
        if qid in seen:
            losses.add("query", qid, "duplicate_query_id", f"query id {qid} appears more than once in {path}")
            continue
        seen.add(qid)
        good: list[int] = []
        for s in dict.fromkeys(seeds):
            if s in pos:
                good.append(pos[s])
            else:
                losses.add("image", s, "seed_not_annotated",
                           f"seed of {qid} {not_annotated}; dropped from the query", query_id=qid)
        if not good:
            losses.add("query", qid, "no_annotated_seed",
                       f"none of the seeds {seeds[:5]} has an annotation" if seeds else "empty seed list")
            continue
        yield qid, good, row


def read_seeds_file(path: str, index: Index, benchmark_name: str, losses: Losses,
                    columns: Mapping[str, str] | None = None) -> list[SeedQuery]:
    """Rows ``{query_id?, seed_image_ids: [...]}`` (configured column names accepted too).

    Unannotated seed ids are dropped (loss item_type ``image``); a query left without seeds, or with a
    duplicate query id, is lost (item_type ``query``). Query ids missing in the file are generated
    from the row number (``<benchmark>_q0001`` = first row).
    """
    from ..settings_schema import filled

    cols = filled("columns", columns)
    qcol, scol = cols["query_id"], cols["seed_image_ids"]
    rows = []
    for ln, row in iter_json_objects(path):
        seeds = row.get(scol, row.get("seed_image_ids"))
        if isinstance(seeds, str):
            seeds = [seeds]
        if not isinstance(seeds, list) or not all(isinstance(s, str) for s in seeds):
            raise FormatError(f"{path}: line {ln}: '{scol}' must be a list of image ids")
        rows.append((row.get(qcol, row.get("query_id")), seeds))
    return [SeedQuery(qid, good, "seeds_file") for qid, good, _ in
            file_queries(rows, benchmark_name, index, path, losses)]

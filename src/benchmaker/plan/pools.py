"""Fixed pools: a plan read from ``paths.pools_file`` instead of built by the planner.

Rows ``{query_id, seed_image_ids: [...], candidate_image_ids: [...]}`` (the shape of upstream
``imsearch_benchmaker``'s ``query_plan.jsonl``; configured column names are accepted too), in file
order. Each becomes one planned query with exactly those seeds and candidates: seeds first, then the
other candidates in the file's order.

Pool names. Upstream lists ``seeds + hard + near-miss + easy`` with the quotas ``plan.neg_hard``,
``plan.neg_nearmiss`` and ``plan.neg_easy``. When a row's non-seed candidates number exactly
``neg_hard + neg_nearmiss + neg_easy`` they are named by position (the first ``neg_hard`` hard, the
next ``neg_nearmiss`` nearmiss, the rest easy); otherwise the quotas cannot say which is which and
every non-seed candidate is in the pool ``imported``.

Nothing is dropped silently: a seed or candidate without an annotation (quarantined, never
annotated) is removed with a loss (item_type ``image``, reasons ``seed_not_annotated`` /
``candidate_not_annotated``) and, for a candidate, a ``shortfall`` entry of its pool; a repeated
candidate is removed with a loss (``duplicate_candidate``); a query left without an annotated seed,
or whose query id repeats, is lost (item_type ``query``). The planner's own rules (reuse cap,
near-duplicate guard, diversity cap) are not applied: the pools are someone else's decision.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping

import numpy as np

from ..formats import FormatError, iter_json_objects
from ..losses import Losses
from .candidates import PlannedQuery
from .index import Index
from .seeds import file_queries

__all__ = ["read_pools_file", "pool_names", "seed_profile", "IMPORTED"]

IMPORTED = "imported"
REASON = "pools_file"


def pool_names(n: int, settings: Mapping[str, Any]) -> list[str]:
    """Pool of each of ``n`` non-seed candidates in upstream's order (see module doc)."""
    h, m, e = (int(settings.get(k, 0) or 0) for k in ("neg_hard", "neg_nearmiss", "neg_easy"))
    if n != h + m + e or n == 0:
        return [IMPORTED] * n
    return ["hard"] * h + ["nearmiss"] * m + ["easy"] * e


def seed_profile(index: Index, seeds: list[int], core: list[int]) -> dict[str, Any]:
    """Per core facet, the majority value over the seeds (as the planner computes it)."""
    s = np.asarray(seeds, dtype=np.int64)
    out = {}
    for f in core:
        code = int(np.argmax(np.bincount(index.codes[s, f], minlength=len(index.values[f]))))
        out[index.facet_names[f]] = index.typed[f][index.values[f][code]]
    return out


def _id_list(row: dict, col: str, default: str, path: str, ln: int) -> list[str]:
    v = row.get(col, row.get(default))
    if v is None:
        return []
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise FormatError(f"{path}: line {ln}: '{col}' must be a list of image ids")
    return v


def read_pools_file(path: str, index: Index, settings: Mapping[str, Any], benchmark_name: str, losses: Losses,
                    columns: Mapping[str, str] | None = None) -> list[PlannedQuery]:
    """The planned queries of a pools file (see module doc), in file order."""
    from ..settings_schema import filled

    cols = filled("columns", columns)
    qcol, scol, ccol = cols["query_id"], cols["seed_image_ids"], cols["candidate_image_ids"]
    rows = []
    for ln, row in iter_json_objects(path):
        rows.append((row.get(qcol, row.get("query_id")), _id_list(row, scol, "seed_image_ids", path, ln),
                     _id_list(row, ccol, "candidate_image_ids", path, ln)))
    pos = {iid: i for i, iid in enumerate(index.ids)}
    core = [index.col(f) for f in settings.get("core_facets") or []]
    out: list[PlannedQuery] = []
    for qid, good, (_, seeds, cands) in file_queries(rows, benchmark_name, index, path, losses,
                                                     "has no annotation (quarantined or not annotated)"):
        seed_set = set(seeds)
        rest = [c for c in cands if c not in seed_set]
        names = pool_names(len(rest), settings)
        q = PlannedQuery(qid, good)
        used = {pos[s] for s in seeds if s in pos}
        wanted, lost = Counter(names), Counter()
        for c, pool in zip(rest, names):
            i = pos.get(c)
            if i is None:
                losses.add("image", c, "candidate_not_annotated",
                           f"candidate of {qid} ({pool} pool) in the pools file has no annotation (quarantined "
                           "or not annotated); dropped from the pool", query_id=qid)
                lost[pool] += 1
            elif i in used:
                losses.add("image", c, "duplicate_candidate",
                           f"listed more than once among the candidates of {qid}; kept once", query_id=qid)
            else:
                used.add(i)
                q.picks.append((i, pool, REASON))
        for pool in dict.fromkeys(names):
            if lost[pool]:
                q.shortfall.append({"pool": pool, "wanted": wanted[pool], "got": wanted[pool] - lost[pool],
                                    "reason": f"candidates without an annotation: {lost[pool]} dropped from the "
                                              "pools file's list"})
        if core:
            q.profile = seed_profile(index, good, core)
        out.append(q)
    return out

"""Per-query candidate pools (docs/planner.md).

For each query, in query order, with one seeded RNG:

* profile  = per-facet majority over the seeds (ties -> smallest value as text); seed tags = union.
* positive = all core facets match, highest tag Jaccard with the seed tags.
* neutral  = all core facets match and exactly one non-core facet differs, highest Jaccard.
* hard     = all core facets match, next Jaccard ranks (after positives and neutrals); when short,
             relaxed to the first k core facets, k = |core|-1 .. 1.
* nearmiss = exactly one off facet differs, every other core/off facet matches; when short, images
             that match the first core facet only. Off facets default to the core facets, and to every
             facet when neither is configured (upstream then had no near-misses at all).
* easy     = many facets differ and Jaccard <= easy_max_jaccard (random order); when short, low
             overlap only, then the lowest-overlap images left. Easy also pads negatives that the hard
             and near-miss pools could not supply, so a query has ``neg_total`` negatives if at all possible.

Bounded work per query: the core bucket is scored whole when it holds at most ``SAMPLE_CAP``
images; a larger one contributes a random window of ``SAMPLE_CAP`` images plus, from the inverted
index (``Index.postings``), the bucket's images that carry the seeds' rarest tags (up to
``SAMPLE_CAP`` more), so the best-overlap candidates are found without scoring the whole bucket.
Near-miss, relaxed-hard and easy lookups read bounded random windows. Exact (sha256) and near (pHash)
duplicates of a seed, images already used by ``max_image_reuse`` queries and images already in the
query are never candidates. Each pool keeps at most ``diversity_cap`` candidates per diversity-facet key.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

from ..settings_schema import filled
from .candidates import PlannedQuery, _CompiledLookup, _Lookup, _Stats
from .index import Index
from .pool_rules import PoolRules
from .seeds import SeedQuery

__all__ = ["Planner", "SAMPLE_CAP", "DEFAULTS", "COMPILE_MIN_QUERIES", "use_compiled"]

SAMPLE_CAP = 2048  # random images of the core bucket scored per query (the whole bucket when smaller);
#                   as many again come from the inverted index, and 2x as many are shared by the near-miss lookups

# from this many queries on, the search runs compiled (plan.compiled): importing numba and loading the
# compiled functions from its cache costs 0.7-1.6 s per process (2 cores), the search saves ~0.5-0.9 ms a query
COMPILE_MIN_QUERIES = 3000

DEFAULTS: dict[str, Any] = filled("plan", {})   # the schema's (config/schema.yaml), for library callers


def use_compiled(n_queries: int) -> bool:
    """Whether to run the search compiled: numba is importable and there are enough queries to repay
    its fixed cost (``COMPILE_MIN_QUERIES``)."""
    if n_queries < COMPILE_MIN_QUERIES:
        return False
    import importlib.util

    return importlib.util.find_spec("numba") is not None


class Planner(PoolRules):
    def __init__(self, index: Index, settings: Mapping[str, Any], rng: np.random.Generator,
                 sample_cap: int = SAMPLE_CAP, compiled: bool = False):
        s = filled("plan", settings)
        self.s = s
        self.ix = index
        self.rng = rng
        self.cap = int(sample_cap)
        col = index.col
        nf = len(index.facet_names)
        self.core = [col(f) for f in s["core_facets"]]
        # off facets as upstream (off_facets or core_facets); with neither configured, every facet, so that
        # near-misses still mean "one facet away from the seed" instead of nothing (upstream: all random)
        self.off = [col(f) for f in (s["off_facets"] or s["core_facets"])] or list(range(nf))
        self.off_default_all = not (s["off_facets"] or s["core_facets"])
        self.div = [col(f) for f in s["diversity_facets"]]
        self.both = list(dict.fromkeys(self.core + self.off))  # core ∪ off, core first
        self.noncore = [j for j in range(nf) if j not in self.core]
        self.easy_cols = self.both if len(self.both) >= 2 else list(range(nf))
        self.cap_near = max(64, (2 * self.cap) // max(1, len(self.off)))
        self.cap_easy = max(64, min(512, self.cap // 2))
        self.cap_neutral = max(64, self.cap // max(1, len(self.noncore)))
        self.post_budget = self.cap
        ne = len(self.easy_cols)
        self.easy_min = min(ne, max(2, math.ceil(ne / 2))) if ne else 0
        self.fcol = index.codes.T  # (F, N): row f is facet f's codes, contiguous
        self.usage = np.zeros(index.n, dtype=np.int32)
        self.in_query = np.zeros(index.n, dtype=bool)
        self.coverage = {"whole bucket": 0, "every image sharing a seed tag": 0, "sampled": 0,
                         "neutral per-facet search": 0}
        if self.div:
            self.div_codes = index.image_keys(self.div)
        else:
            self.div_codes = None
        self.compiled = compiled
        if compiled:  # the inner loops in numba (plan.compiled): the same picks, in the same order
            from . import compiled as c

            self._c = c
            self._rec, self._small, self._nw, self._coff = c.records(index)
            self._reuse_cap = int(s["max_image_reuse"])
            self._div_or_none = self.div_codes if self.div_codes is not None else np.zeros(0, dtype=np.int64)
            # at most one diversity key per pick of a pool
            self._dc_size = 1 + int(s["pos_total"]) + int(s["neutral_total"]) + int(s["neg_total"])

    # ---- helpers -----------------------------------------------------------------------------
    def _differ(self, idx: np.ndarray, cols: list[int], prof: np.ndarray) -> np.ndarray:
        """Per image of ``idx``, in how many facets of ``cols`` it differs from the profile."""
        if self.compiled:
            return self._c.n_differ(self._small, self._coff, idx, np.asarray(cols, dtype=np.int64), prof)
        out = np.zeros(idx.size, dtype=np.int64)
        for f in cols:  # one contiguous facet column at a time (Index.codes is column-major)
            out += self.fcol[f].take(idx) != prof[f]
        return out

    def _differ_in(self, idx: np.ndarray, f: int, prof: np.ndarray) -> np.ndarray:
        """The images of ``idx`` whose facet ``f`` differs from the profile."""
        if self.compiled:
            return self._c.differ_in(self._small, self._coff, idx, f, prof[f])
        return idx[self.fcol[f].take(idx) != prof[f]]

    def reserve_seeds(self, queries: list[SeedQuery]) -> None:
        """Seeds count toward the reuse cap of their images before any candidate is drawn."""
        for q in queries:
            np.add.at(self.usage, np.asarray(q.seeds, dtype=np.int64), 1)

    def _window(self, members: np.ndarray, size: int | None = None) -> np.ndarray:
        """A contiguous run of ``size`` members (wrapping) from a seeded random start."""
        size = self.cap if size is None else size
        n = members.size
        if n <= size:
            return members
        start = int(self.rng.integers(n))
        w = members[start:start + size]
        if w.size < size:
            w = np.concatenate([w, members[: size - w.size]])
        return w

    def _dup(self, idx: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        """Duplicates of any seed: the same bytes (sha256) or the same duplicate group (images.jsonl's
        ``duplicate_group``: byte copies and near-duplicates, preprocess.near_duplicate_threshold)."""
        ix = self.ix
        dup = np.zeros(idx.size, dtype=bool)
        for sd in seeds:
            if ix.sha_ok[sd]:
                dup |= ix.sha_ok[idx] & (ix.sha_code[idx] == ix.sha_code[sd])
            if ix.group_ok[sd]:
                dup |= ix.group_ok[idx] & (ix.group_code[idx] == ix.group_code[sd])
        return dup

    def _ok(self, idx: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        """Eligible: not in the query, not at the reuse cap, not a duplicate of a seed."""
        if idx.size == 0:
            return np.zeros(0, dtype=bool)
        if self.compiled:
            return self._c.eligible_mask(idx, seeds, self.in_query, self.usage, self._reuse_cap, self._rec, self._nw)
        bad = self.in_query[idx] | (self.usage[idx] >= self.s["max_image_reuse"])
        return ~(bad | self._dup(idx, seeds))

    def _explain(self, st: _Stats, seeds: np.ndarray) -> str:
        """Why the images a pool searched could not fill it (counted when the shortfall is recorded)."""
        idx = np.unique(np.concatenate(st.searched)) if st.searched else np.zeros(0, np.int64)
        taken = self.in_query[idx]
        reused = (self.usage[idx] >= self.s["max_image_reuse"]) & ~taken
        dups = self._dup(idx, seeds) & ~taken & ~reused
        return (f"searched {idx.size} images in the matching buckets; excluded {int(taken.sum())} already in the "
                f"query, {int(reused.sum())} at the reuse cap, {int(dups.sum())} duplicates of a seed, "
                f"{st.divcap} over the diversity cap")

    def _jaccard(self, idx: np.ndarray, seed_set) -> np.ndarray:
        """``Index.jaccard`` (compiled when the planner is)."""
        if not self.compiled:
            return self.ix.jaccard(idx, seed_set)
        ix, (ref, n_ref) = self.ix, seed_set
        if ix.tag_bits is not None:
            return self._c.jaccard_bits(self._rec, self._nw, idx, ref, n_ref)
        return self._c.jaccard_csr(self._rec, ix.tag_flat, ix.tag_start, idx, ref, n_ref)

    def _new_lookup(self, idx: np.ndarray, j: np.ndarray, seeds: np.ndarray, st: _Stats) -> _Lookup | _CompiledLookup:
        if self.compiled:
            return _CompiledLookup(idx, j, seeds, st)
        return _Lookup(self, idx, j, seeds, st)

    def _lookup(self, idx: np.ndarray, seeds: np.ndarray, seed_set, st: _Stats) -> tuple[_Lookup | _CompiledLookup,
                                                                                         np.ndarray]:
        j = self._jaccard(idx, seed_set)
        return self._new_lookup(idx, j, seeds, st), j

    def _divcount(self) -> Any:
        """A pool's picks per diversity key: a dict, or (keys, counts, n) arrays when compiled."""
        if self.compiled:
            return (np.empty(self._dc_size, dtype=np.int64), np.empty(self._dc_size, dtype=np.int64),
                    np.zeros(1, dtype=np.int64))
        return {}

    def _pick(self, q: PlannedQuery, idx: np.ndarray, order: _Lookup | _CompiledLookup | np.ndarray, quota: int,
              pool: str, reason: Callable[[int], str], st: _Stats, divcount: Any) -> int:
        """Take up to ``quota`` candidates of ``idx`` in ``order`` (a lookup's best-first order, or
        positions into ``idx``) that are not in the query and within the diversity cap."""
        if quota <= 0:
            return 0
        if self.compiled:
            return self._pick_compiled(q, idx, order, quota, pool, reason, st, divcount)
        got = 0
        cap = self.s["diversity_cap"]
        for k in (order.order() if isinstance(order, _Lookup) else order.tolist()):
            i = int(idx[k])
            if self.in_query[i]:
                continue
            if self.div_codes is not None:
                d = int(self.div_codes[i])
                if divcount.get(d, 0) >= cap:
                    st.divcap += 1
                    continue
                divcount[d] = divcount.get(d, 0) + 1
            self.in_query[i] = True
            self.usage[i] += 1
            q.picks.append((i, pool, reason(int(k))))
            got += 1
            if got >= quota:
                break
        return got

    def _pick_compiled(self, q: PlannedQuery, idx: np.ndarray, order: _CompiledLookup | np.ndarray, quota: int,
                       pool: str, reason: Callable[[int], str], st: _Stats, divcount: Any) -> int:
        c = self._c
        out = np.empty(quota, dtype=np.int64)
        dkeys, dcounts, dn = divcount
        cap = int(self.s["diversity_cap"])
        if isinstance(order, _CompiledLookup):
            got, capped = c.pick_lookup(*order.state, quota, out, order.seeds, self.in_query, self.usage,
                                        self._reuse_cap, self._rec, self._nw, self._div_or_none,
                                        cap, dkeys, dcounts, dn)
        else:
            got, capped = c.pick_order(idx, np.asarray(order, dtype=np.int64), quota, out, self.in_query, self.usage,
                                       self._div_or_none, cap, dkeys, dcounts, dn)
        st.divcap += capped
        for k in out[:got].tolist():
            q.picks.append((int(idx[k]), pool, reason(k)))
        return got

    def _short(self, q: PlannedQuery, pool: str, wanted: int, got: int, why: Callable[[], str] | str) -> None:
        if got < wanted:
            text = why() if callable(why) else why
            q.shortfall.append({"pool": pool, "wanted": int(wanted), "got": int(got), "reason": text})

    def _fname(self, j: int) -> str:
        return self.ix.facet_names[j]

    def _fval(self, j: int, code: int) -> str:
        return self.ix.values[j][code]

    def _core_candidates(self, prof: np.ndarray, seed_set) -> tuple[np.ndarray, bool]:
        """The core bucket when it fits ``cap``; else a random window of ``cap`` of it plus, within
        ``post_budget``, the bucket's images carrying the seeds' rarest tags (inverted index)."""
        ix = self.ix
        b = ix.buckets(self.core)
        members = b.get(prof)
        if members.size <= self.cap:
            self.coverage["whole bucket"] += 1
            return members, False
        lists = ix.postings(self.core).lists(b.key_of(prof), ix.seed_tag_codes(seed_set))
        parts = [self._window(members)]
        if len(self.core) < len(ix.facet_names):  # tags follow facets: the images equal on every facet
            parts.append(self._window(ix.buckets(range(len(ix.facet_names))).get(prof), self.cap_neutral))
        budget = self.post_budget
        complete = True
        for t in np.argsort([lst.size for lst in lists], kind="stable").tolist():  # rarest tag first
            lst = lists[t]
            if lst.size > budget:
                complete = False
                parts.append(lst[:budget])  # a prefix of the fixed random order: a random subset
                break
            parts.append(lst)
            budget -= lst.size
        self.coverage["every image sharing a seed tag" if complete else "sampled"] += 1
        c = np.sort(np.concatenate(parts))
        return c[np.append(True, c[1:] != c[:-1])], True

    # ---- one query ---------------------------------------------------------------------------
    def plan(self, sq: SeedQuery) -> PlannedQuery:
        ix = self.ix
        seeds = np.asarray(sq.seeds, dtype=np.int64)
        q = PlannedQuery(sq.query_id, list(sq.seeds))
        nf = len(ix.facet_names)
        if seeds.size == 1:  # the majority of one
            prof = ix.codes[seeds[0]].astype(np.int64)
        else:
            prof = np.zeros(nf, dtype=np.int64)
            for f in range(nf):
                prof[f] = int(np.argmax(np.bincount(ix.codes[seeds, f], minlength=len(ix.values[f]))))
        q.profile = {self._fname(f): ix.typed[f][self._fval(f, prof[f])] for f in self.core}
        seed_set = ix.seed_set(seeds)
        self.in_query[seeds] = True
        try:
            self._pools(q, seeds, prof, seed_set)
        finally:
            self.in_query[seeds] = False
            if q.picks:
                self.in_query[np.fromiter((p[0] for p in q.picks), dtype=np.int64)] = False
        return q

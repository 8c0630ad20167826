"""Per-query candidate pools (docs/planner.md).

For each query, in query order, with one seeded RNG:

* profile  = per-facet majority over the seeds (ties -> smallest value as text); seed tags = union.
* positive = all core facets match, highest tag Jaccard with the seed tags.
* neutral  = all core facets match and exactly one non-core facet differs, highest Jaccard.
* hard     = all core facets match, next Jaccard ranks (after positives and neutrals); when short,
             relaxed to the first k core facets, k = |core|-1 .. 1.
* nearmiss = exactly one off facet differs, every other core/off facet matches; when short, images
             that match the first core facet only.
* easy     = many facets differ and Jaccard <= easy_max_jaccard (random order); when short, low
             overlap only, then the lowest-overlap images left. Easy also pads negatives that the hard
             and near-miss pools could not supply, so a query has ``neg_total`` negatives if at all possible.

Every lookup reads a bounded random *window* (``SAMPLE_CAP`` images) of one facet-key bucket, so the
work per query does not grow with the collection. Exact (sha256) and near (pHash) duplicates of a
seed, images already used by ``max_image_reuse`` queries and images already in the query are never
candidates. Each pool keeps at most ``diversity_cap`` candidates per diversity-facet key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from .index import Index
from .seeds import SeedQuery

__all__ = ["Planner", "PlannedQuery", "SAMPLE_CAP", "DEFAULTS"]

SAMPLE_CAP = 512  # images read from the core bucket per lookup (near-miss/easy lookups read less)

DEFAULTS: dict[str, Any] = {
    "num_seeds": 100, "seeds_per_query": 1, "core_facets": [], "off_facets": [], "diversity_facets": [],
    "diversity_cap": 6, "pos_total": 5, "neutral_total": 5, "neg_total": 30, "neg_hard": 15,
    "neg_nearmiss": 10, "neg_easy": 5, "easy_max_jaccard": 0.1, "max_image_reuse": 3,
    "phash_max_distance": 6, "random_seed": 42,
}


@dataclass
class PlannedQuery:
    query_id: str
    seeds: list[int]
    picks: list[tuple[int, str, str]] = field(default_factory=list)  # (image, pool, reason)
    shortfall: list[dict[str, Any]] = field(default_factory=list)
    profile: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Stats:
    seen: int = 0
    reused: int = 0
    dups: int = 0
    taken: int = 0
    divcap: int = 0

    def text(self) -> str:
        return (f"searched {self.seen} images in the matching buckets; excluded {self.taken} already in the "
                f"query, {self.reused} at the reuse cap, {self.dups} duplicates of a seed, "
                f"{self.divcap} over the diversity cap")


class Planner:
    def __init__(self, index: Index, settings: Mapping[str, Any], rng: np.random.Generator,
                 sample_cap: int = SAMPLE_CAP):
        s = {**DEFAULTS, **dict(settings)}
        self.s = s
        self.ix = index
        self.rng = rng
        self.cap = int(sample_cap)
        col = index.col
        self.core = [col(f) for f in s["core_facets"]]
        self.off = [col(f) for f in (s["off_facets"] or s["core_facets"])]
        self.div = [col(f) for f in s["diversity_facets"]]
        self.both = list(dict.fromkeys(self.core + self.off))  # core ∪ off, core first
        self.noncore = [j for j in range(len(index.facet_names)) if j not in self.core]
        self.easy_cols = self.both if len(self.both) >= 2 else list(range(len(index.facet_names)))
        self.cap_near = max(64, self.cap // max(1, len(self.off)))
        self.cap_easy = max(64, self.cap // 2)
        ne = len(self.easy_cols)
        self.easy_min = min(ne, max(2, math.ceil(ne / 2))) if ne else 0
        self.usage = np.zeros(index.n, dtype=np.int32)
        self.in_query = np.zeros(index.n, dtype=bool)
        if self.div:
            self.div_key = index.buckets(self.div)  # reuse mixed-radix key
            self.div_codes = (index.codes[:, self.div].astype(np.int64) * self.div_key.radix).sum(axis=1)
        else:
            self.div_codes = None

    # ---- helpers -----------------------------------------------------------------------------
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

    def _eligible(self, idx: np.ndarray, seeds: np.ndarray, st: _Stats) -> np.ndarray:
        st.seen += int(idx.size)
        if idx.size == 0:
            return idx
        taken = self.in_query[idx]
        reused = (self.usage[idx] >= self.s["max_image_reuse"]) & ~taken
        dup = np.zeros(idx.size, dtype=bool)
        ix = self.ix
        for sd in seeds:
            if ix.sha_ok[sd]:
                dup |= ix.sha_ok[idx] & (ix.sha_code[idx] == ix.sha_code[sd])
            if ix.phash_ok[sd]:
                dist = np.bitwise_count(ix.phash[idx] ^ ix.phash[sd])
                dup |= ix.phash_ok[idx] & (dist <= self.s["phash_max_distance"])
        dup &= ~taken
        st.taken += int(taken.sum())
        st.reused += int(reused.sum())
        st.dups += int((dup & ~reused).sum())
        return idx[~(taken | reused | dup)]

    @staticmethod
    def _rank(idx: np.ndarray, j: np.ndarray) -> np.ndarray:
        order = np.lexsort((idx, -j))  # Jaccard desc, then image id
        return order

    def _pick(self, q: PlannedQuery, idx: np.ndarray, order: np.ndarray, quota: int, pool: str,
              reason: Callable[[int], str], st: _Stats, divcount: dict[int, int]) -> int:
        got = 0
        cap = self.s["diversity_cap"]
        for k in order:
            if got >= quota:
                break
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
        return got

    def _short(self, q: PlannedQuery, pool: str, wanted: int, got: int, why: str) -> None:
        if got < wanted:
            q.shortfall.append({"pool": pool, "wanted": int(wanted), "got": int(got), "reason": why})

    def _fname(self, j: int) -> str:
        return self.ix.facet_names[j]

    def _fval(self, j: int, code: int) -> str:
        return self.ix.values[j][code]

    # ---- one query ---------------------------------------------------------------------------
    def plan(self, sq: SeedQuery) -> PlannedQuery:
        ix = self.ix
        seeds = np.asarray(sq.seeds, dtype=np.int64)
        q = PlannedQuery(sq.query_id, list(sq.seeds))
        nf = len(ix.facet_names)
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

    def _pools(self, q: PlannedQuery, seeds: np.ndarray, prof: np.ndarray, seed_set) -> None:
        ix, s = self.ix, self.s
        jac = lambda idx: ix.jaccard(idx, seed_set)  # noqa: E731

        # positive, neutral, hard: the core bucket
        st_core = _Stats()
        cand = self._eligible(self._window(ix.buckets(self.core).get(prof)), seeds, st_core)
        j = jac(cand)
        order = self._rank(cand, j)
        ncore = len(self.core)
        core_txt = f"core match ({ncore}/{ncore})" if ncore else "no core facets"

        dc: dict[int, int] = {}
        got = self._pick(q, cand, order, s["pos_total"], "positive",
                         lambda k: f"{core_txt}; jaccard={j[k]:.2f}", st_core, dc)
        self._short(q, "positive", s["pos_total"], got, "too few core-matching images: " + st_core.text())

        dc = {}
        if self.noncore and cand.size:
            diff = ix.codes[cand][:, self.noncore] != prof[self.noncore]
            one = diff.sum(axis=1) == 1
            which = np.argmax(diff, axis=1)
            sub = order[one[order]]
            nc = self.noncore
            got = self._pick(
                q, cand, sub, s["neutral_total"], "neutral",
                lambda k: (f"{core_txt}, {self._fname(nc[which[k]])}="
                           f"{self._fval(nc[which[k]], ix.codes[cand[k], nc[which[k]]])} differs; jaccard={j[k]:.2f}"),
                _Stats(), dc)
            why = "too few core-matching images with exactly one other facet different: " + st_core.text()
        else:
            got = 0
            why = "no non-core facets to differ" if not self.noncore else "no core-matching images left"
        self._short(q, "neutral", s["neutral_total"], got, why)

        dc = {}
        got_hard = self._pick(q, cand, order, s["neg_hard"], "hard",
                              lambda k: f"{core_txt}; jaccard={j[k]:.2f}", st_core, dc)
        level = ncore
        for k_core in range(ncore - 1, 0, -1):
            if got_hard >= s["neg_hard"]:
                break
            level = k_core
            c2 = self._eligible(self._window(ix.buckets(self.core[:k_core]).get(prof)), seeds, st_core)
            j2 = jac(c2)
            names = ",".join(self._fname(f) for f in self.core[:k_core])
            got_hard += self._pick(q, c2, self._rank(c2, j2), s["neg_hard"] - got_hard, "hard",
                                   lambda k, j2=j2, kc=k_core, nm=names:
                                   f"relaxed to {kc}/{ncore} core facets ({nm}); jaccard={j2[k]:.2f}",
                                   st_core, dc)
        relaxed = f" even after relaxing to {level}/{ncore} core facets" if level < ncore else ""
        self._short(q, "hard", s["neg_hard"], got_hard, f"too few core-matching images{relaxed}: " + st_core.text())

        # near-miss: exactly one off facet differs
        st_near = _Stats()
        dc = {}
        got_near = 0
        if self.off:
            parts, facet_of = [], []
            for f in self.off:
                others = [c for c in self.both if c != f]
                w = self._eligible(self._window(ix.buckets(others).get(prof), self.cap_near), seeds, st_near)
                w = w[ix.codes[w, f] != prof[f]]
                parts.append(w)
                facet_of.append(np.full(w.size, f, dtype=np.int64))
            c3 = np.concatenate(parts) if parts else np.zeros(0, np.int64)
            f3 = np.concatenate(facet_of) if facet_of else np.zeros(0, np.int64)
            j3 = jac(c3)
            got_near = self._pick(
                q, c3, self._rank(c3, j3), s["neg_nearmiss"], "nearmiss",
                lambda k: (f"{self._fname(f3[k])} differs ({self._fval(f3[k], ix.codes[c3[k], f3[k]])} vs "
                           f"{self._fval(f3[k], prof[f3[k]])}); jaccard={j3[k]:.2f}"),
                st_near, dc)
            if got_near < s["neg_nearmiss"] and self.core:
                f0 = self.core[0]
                c4 = self._eligible(self._window(ix.buckets([f0]).get(prof), self.cap_near), seeds, st_near)
                c4 = c4[(ix.codes[c4][:, self.both] != prof[self.both]).any(axis=1)] if c4.size else c4
                j4 = jac(c4)
                got_near += self._pick(q, c4, self._rank(c4, j4), s["neg_nearmiss"] - got_near, "nearmiss",
                                       lambda k: f"relaxed: matches {self._fname(f0)} only; jaccard={j4[k]:.2f}",
                                       st_near, dc)
            why = "too few images with exactly one off facet different: " + st_near.text()
        else:
            why = "no off or core facets configured"
        self._short(q, "nearmiss", s["neg_nearmiss"], got_near, why)

        # easy (+ padding of the negatives the other pools could not supply)
        quota = s["neg_easy"] + (s["neg_hard"] - got_hard) + (s["neg_nearmiss"] - got_near)
        st_easy = _Stats()
        dc = {}
        c5 = self._eligible(self._window(ix.global_order, self.cap_easy), seeds, st_easy)
        j5 = jac(c5)
        if self.easy_cols:
            nd = (ix.codes[c5][:, self.easy_cols] != prof[self.easy_cols]).sum(axis=1)
        else:
            nd = np.zeros(c5.size, dtype=np.int64)
        low = j5 <= s["easy_max_jaccard"]
        ne = len(self.easy_cols)
        got_easy = 0
        n_easy = [0]

        def why_easy(k: int, tier: str) -> str:
            pad = "padding for short hard/nearmiss pools; " if n_easy[0] >= s["neg_easy"] else ""
            n_easy[0] += 1
            return f"{pad}{tier}: {nd[k]}/{ne} facets differ; jaccard={j5[k]:.2f}"

        tiers = [
            ("many facets differ, low tag overlap", np.flatnonzero(low & (nd >= self.easy_min))),
            ("low tag overlap", np.flatnonzero(low)),
            ("fill, lowest tag overlap left", np.lexsort((c5, j5))),
        ]
        for tier, order5 in tiers:
            if got_easy >= quota:
                break
            got_easy += self._pick(q, c5, order5, quota - got_easy, "easy",
                                   lambda kk, t=tier: why_easy(kk, t), st_easy, dc)
        easy_wanted = s["neg_easy"]
        easy_for_easy = min(got_easy, easy_wanted)
        self._short(q, "easy", easy_wanted, easy_for_easy, "too few eligible images left: " + st_easy.text())

"""The pool rules of docs/planner.md, as the planner's methods (:class:`Planner` inherits them): a
query's positive, neutral and hard pools from the core bucket, its near-miss pool, then easy (which
also pads the negatives the hard and near-miss pools could not supply)."""

from __future__ import annotations

import numpy as np

from .candidates import PlannedQuery, _Stats

NEUTRAL_MIN_FACTOR = 8  # fewer one-off core candidates than 8x the neutral quota: search per facet too


class PoolRules:
    """The pool rules; they use the :class:`~benchmaker.plan.planner.Planner`'s index, settings,
    eligibility checks and picking (``self``)."""

    def _pools(self, q: PlannedQuery, seeds: np.ndarray, prof: np.ndarray, seed_set) -> None:
        """The query's pools in order: positive, neutral and hard from the core bucket, near-miss, then
        easy (which also pads the negatives the hard and near-miss pools could not supply)."""
        got_hard = self._core_pools(q, seeds, prof, seed_set)
        got_near = self._nearmiss_pool(q, seeds, prof, seed_set)
        self._easy_pool(q, seeds, prof, seed_set, got_hard, got_near)

    def _core_pools(self, q: PlannedQuery, seeds: np.ndarray, prof: np.ndarray, seed_set) -> int:
        """Positive, neutral and hard negatives: the core bucket (relaxed for hard negatives); returns
        how many hard negatives were picked."""
        ix, s = self.ix, self.s

        # positive, neutral, hard: the core bucket
        st_core = _Stats()
        cand, sampled = self._core_candidates(prof, seed_set)
        nc = self.noncore
        nd_core = None
        if self.compiled and nc and ix.tag_bits is not None:  # one pass over the candidates' records
            j, nd_core = self._c.jaccard_differ(self._rec, self._nw, self._small, self._coff, cand, *seed_set,
                                                np.asarray(nc, dtype=np.int64), prof)
            look = self._new_lookup(cand, j, seeds, st_core)
        else:
            look, j = self._lookup(cand, seeds, seed_set, st_core)
        ncore = len(self.core)
        core_txt = f"core match ({ncore}/{ncore})" if ncore else "no core facets"
        why_core = lambda: self._explain(st_core, seeds)  # noqa: E731

        dc = self._divcount()
        got = self._pick(q, cand, look, s["pos_total"], "positive",
                         lambda k: f"{core_txt}; jaccard={j[k]:.2f}", st_core, dc)
        self._short(q, "positive", s["pos_total"], got, lambda: "too few core-matching images: " + why_core())

        dc = self._divcount()
        if nc:
            # the core candidates one non-core facet away; when the core bucket was too large to score
            # whole and those are few, also windows of the buckets "every facet but f equal" (f non-core)
            one = (nd_core if nd_core is not None else self._differ(cand, nc, prof)) == 1
            cn, jn = cand[one], j[one]
            if sampled and cn.size < NEUTRAL_MIN_FACTOR * s["neutral_total"]:
                self.coverage["neutral per-facet search"] += 1
                parts = [cn]
                allf = range(len(ix.facet_names))
                for f in nc:
                    w = self._window(ix.buckets([c for c in allf if c != f]).get(prof), self.cap_neutral)
                    parts.append(self._differ_in(w, f, prof))
                cn = np.sort(np.concatenate(parts))
                cn = cn[np.append(True, cn[1:] != cn[:-1])] if cn.size else cn
                jn = self._jaccard(cn, seed_set)
            st_neutral = _Stats()
            ln = self._new_lookup(cn, jn, seeds, st_neutral)

            def why_neutral(k: int) -> str:
                f = next(f for f in nc if ix.codes[cn[k], f] != prof[f])
                return f"{core_txt}, {self._fname(f)}={self._fval(f, ix.codes[cn[k], f])} differs; jaccard={jn[k]:.2f}"

            got = self._pick(q, cn, ln, s["neutral_total"], "neutral", why_neutral, st_neutral, dc)
            why = lambda: ("too few core-matching images with exactly one other facet different: "  # noqa: E731
                           + self._explain(st_neutral, seeds))
        else:
            got, why = 0, "no non-core facets to differ"
        self._short(q, "neutral", s["neutral_total"], got, why)

        dc = self._divcount()
        got_hard = self._pick(q, cand, look, s["neg_hard"], "hard",
                              lambda k: f"{core_txt}; jaccard={j[k]:.2f}", st_core, dc)
        level = ncore
        for k_core in range(ncore - 1, 0, -1):
            if got_hard >= s["neg_hard"]:
                break
            level = k_core
            c2 = self._window(ix.buckets(self.core[:k_core]).get(prof))
            l2, j2 = self._lookup(c2, seeds, seed_set, st_core)
            names = ",".join(self._fname(f) for f in self.core[:k_core])
            got_hard += self._pick(q, c2, l2, s["neg_hard"] - got_hard, "hard",
                                   lambda k, j2=j2, kc=k_core, nm=names:
                                   f"relaxed to {kc}/{ncore} core facets ({nm}); jaccard={j2[k]:.2f}",
                                   st_core, dc)
        relaxed = f" even after relaxing to {level}/{ncore} core facets" if level < ncore else ""
        self._short(q, "hard", s["neg_hard"], got_hard,
                    lambda: f"too few core-matching images{relaxed}: " + why_core())
        return got_hard

    def _nearmiss_pool(self, q: PlannedQuery, seeds: np.ndarray, prof: np.ndarray, seed_set) -> int:
        """Near-miss negatives; returns how many were picked."""
        ix, s = self.ix, self.s
        # near-miss: exactly one off facet differs (every facet when neither off nor core facets are set)
        st_near = _Stats()
        dc = self._divcount()
        got_near = 0
        if self.off:
            parts, facet_of = [], []
            for f in self.off:
                others = [c for c in self.both if c != f]
                w = self._window(ix.buckets(others).get(prof), self.cap_near)
                w = self._differ_in(w, f, prof)
                parts.append(w)
                facet_of.append(np.full(w.size, f, dtype=np.int64))
            c3, f3 = np.concatenate(parts), np.concatenate(facet_of)
            l3, j3 = self._lookup(c3, seeds, seed_set, st_near)
            got_near = self._pick(
                q, c3, l3, s["neg_nearmiss"], "nearmiss",
                lambda k: (f"{self._fname(f3[k])} differs ({self._fval(f3[k], ix.codes[c3[k], f3[k]])} vs "
                           f"{self._fval(f3[k], prof[f3[k]])}); jaccard={j3[k]:.2f}"),
                st_near, dc)
            if got_near < s["neg_nearmiss"] and self.core:
                f0 = self.core[0]
                c4 = self._window(ix.buckets([f0]).get(prof), self.cap_near)
                c4 = c4[self._differ(c4, self.both, prof) > 0]
                l4, j4 = self._lookup(c4, seeds, seed_set, st_near)
                got_near += self._pick(q, c4, l4, s["neg_nearmiss"] - got_near, "nearmiss",
                                       lambda k: f"relaxed: matches {self._fname(f0)} only; jaccard={j4[k]:.2f}",
                                       st_near, dc)
            scope = "facet" if self.off_default_all else "off facet"
            why = lambda: (f"too few images with exactly one {scope} different: "  # noqa: E731
                           + self._explain(st_near, seeds))
        else:
            why = "no facets configured"
        self._short(q, "nearmiss", s["neg_nearmiss"], got_near, why)
        return got_near

    def _easy_pool(self, q: PlannedQuery, seeds: np.ndarray, prof: np.ndarray, seed_set, got_hard: int,
                   got_near: int) -> None:
        """Easy negatives, plus the hard and near-miss negatives those pools fell short of."""
        ix, s = self.ix, self.s
        # easy (+ padding of the negatives the other pools could not supply)
        quota = s["neg_easy"] + (s["neg_hard"] - got_hard) + (s["neg_nearmiss"] - got_near)
        st_easy = _Stats()
        dc = self._divcount()
        c5 = self._window(ix.global_order, self.cap_easy)
        st_easy.searched.append(c5)
        c5 = c5[self._ok(c5, seeds)]
        j5 = self._jaccard(c5, seed_set)
        if self.easy_cols:
            nd = self._differ(c5, self.easy_cols, prof)
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

        tiers = [  # each order computed only when the tiers before it did not fill the pool
            ("many facets differ, low tag overlap", lambda: np.flatnonzero(low & (nd >= self.easy_min))),
            ("low tag overlap", lambda: np.flatnonzero(low)),
            ("fill, lowest tag overlap left", lambda: np.lexsort((c5, j5))),
        ]
        for tier, order5 in tiers:
            if got_easy >= quota:
                break
            got_easy += self._pick(q, c5, order5(), quota - got_easy, "easy",
                                   lambda kk, t=tier: why_easy(kk, t), st_easy, dc)
        easy_for_easy = min(got_easy, s["neg_easy"])
        self._short(q, "easy", s["neg_easy"], easy_for_easy,
                    lambda: "too few eligible images left: " + self._explain(st_easy, seeds))

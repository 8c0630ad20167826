"""Human-corrected nDCG@k, MAP and MRR: model-assisted multiple imputation of people's labels from the
judge's and the audit sample (docs/trust.md, "Human-corrected scores").

These metrics divide by quantities of the labels themselves (the ideal DCG, the number of relevant pairs), so
the linear prediction-powered estimator of :mod:`.corrected` does not apply. Instead the people's labels of
the pairs nobody labelled are predicted from the judge's label and the audit sample, and the metric is
computed on the completed labels:

* **Cells.** For one system, a pair's cell is (the judge's label, the bucket of the system's rank of it,
  ``BUCKETS``). Rank buckets let the judge's error differ on a system's own top hits (a judge that favours a
  system errs there most) and people's labels follow the system's ranking. A cell's distribution of
  people's labels is drawn from a Dirichlet posterior: its audited pairs (their count times their
  distribution weighted by the design weights N_h / n_h, Hájek; ``audit/sample.jsonl``) plus ``PRIOR``
  pseudo-pair of its judge label's distribution over all ranks; a cell without audited pairs takes that
  distribution with its judge label's count. The prior keeps a small cell whose few pairs agree from
  claiming certainty.
* **Design-based correction** (model-assisted, Särndal, Swensson & Wretman 1992, ch. 6: the rectifier of
  prediction-powered inference for a non-linear metric): each audited pair's effect on its query's metric,
  for each label level with the rest of the query imputed, gives its residual (people's label minus the
  cell's expectation); the residuals are expanded to the unaudited pairs (weights N_h / n_h − 1) and added.
  For nDCG@k and MAP the expectation is under the replicate's draw of the cells, which then cancels against
  the imputation (GREG: the interval is the correction's design variance). MRR rests on each query's first
  relevant pair, a handful of rare errors whose design variance is zero whenever the sample holds none of
  them: its residuals are at the cells' posterior mean, so the cells' posterior uncertainty stays in its
  interval (``FIRST_PAIR_METRICS``; docs/trust.md gives the measurements behind the choice).
* **Imputation and interval.** Each replicate reweights the audited pairs by a Rao & Wu (JASA 1988) rescaled
  bootstrap within their audit strata (the correction's design variance under stratified sampling without
  replacement, finite-population correction included), draws the cells'
  distributions from their posterior, draws a label for every unaudited pair from its cell's distribution
  (the audited pairs keep their people's labels), and computes the metric plus the correction over the
  evaluated queries — proper multiple imputation (Rubin 1987; cf. the approximate Bayesian bootstrap of
  Rubin & Schenker, JASA 1986), whose replicates are draws of the metric's predictive distribution. The
  estimate is their mean, the interval their percentiles at ``confidence``.
  The interval is about this benchmark's queries (the same estimand as :mod:`.corrected`): the value people
  would give if they labelled every judged pair.
* **People only.** The same with cells that ignore the judge's label (the rank bucket only).

This is the imputation route to combining many model labels with few human ones (Oosterhuis et al., KDD 2024;
prediction-powered inference, Angelopoulos et al., Science 2023, is its linear special case); its validity
rests on the cells: within a cell, the people's label must not depend on anything else that the metric
weighs. benchmarks/trust_ppi.py measures it against known truth.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

__all__ = ["MIN_CELL", "imputed_rows", "metric_values"]

MIN_CELL = 3
PRIOR = 1.0
BUCKETS = (1, 2, 3, 5, 11, 21)  # a pair's rank bucket starts: [1], [2], [3, 4], [5, 10], [11, 20], [21, ...); unranked


def rank_buckets(rank: np.ndarray) -> np.ndarray:
    """The bucket of each pair's rank (0 = unranked -> the last bucket)."""
    b = np.searchsorted(np.asarray(BUCKETS), rank, side="right") - 1
    return np.where(rank > 0, b, len(BUCKETS) - 1)


FIRST_PAIR_METRICS = ("mrr",)  # metrics of each query's first relevant pair: residuals at the posterior mean
INFLUENCE_DRAWS = 100  # imputations of a query's other pairs behind each audited pair's influence
_BLOCK_CELLS = 1_000_000  # replicates x pairs per vectorised block


def metric_values(labels: np.ndarray, order: np.ndarray, ranked: np.ndarray, metric: str, k: int) -> np.ndarray:
    """Per replicate, the mean over queries of ``metric`` (``ndcg``: gain = label, log2 discount, ranx's;
    ``map``, ``mrr``: label > 0 is relevant). ``labels`` [B, Q, P] in pool order (0 for padding), ``order``
    [Q, P] a permutation of pool positions, the system's ranking first, ``ranked`` [Q, P] whether rank
    position r holds a pair."""
    return ranked_values(np.take_along_axis(labels, np.broadcast_to(order, labels.shape), axis=2), ranked,
                         metric, k)


def ranked_values(r: np.ndarray, ranked: np.ndarray, metric: str, k: int) -> np.ndarray:
    """:func:`metric_values` of labels ``r`` [B, Q, P] already in the system's rank order (every pool pair
    present once: the ranked ones first, then the unranked ones and padding)."""
    P = r.shape[2]
    pos = np.arange(1, P + 1, dtype=float)
    if metric == "ndcg":
        disc = 1.0 / np.log2(pos[:k] + 1.0)
        dcg = ((r[..., :k] * ranked[..., :k]) * disc[: min(k, P)]).sum(axis=2)
        cum = np.concatenate([[0.0], np.cumsum(disc)])  # ideal DCG of the top min(n, k) gains
        ideal = np.zeros(dcg.shape)
        prev = 0.0
        for lev in np.unique(r[r > 0]):  # sum over levels of (step) x discount of the pairs at least that high
            ideal += (lev - prev) * cum[np.minimum((r >= lev).sum(axis=2), k)]
            prev = lev
        per_q = np.divide(dcg, ideal, out=np.zeros_like(dcg), where=ideal > 0)
    else:
        rel = (r > 0) & ranked
        if metric == "mrr":
            first = np.argmax(rel, axis=2)
            per_q = np.where(rel.any(axis=2), 1.0 / (first + 1.0), 0.0)
        else:
            nrel = (r > 0).sum(axis=2)
            ap = (np.cumsum(rel, axis=2) / pos * rel).sum(axis=2)
            per_q = np.divide(ap, nrel, out=np.zeros_like(ap), where=nrel > 0)
    return per_q.mean(axis=1)


def _cell_probs(cells: np.ndarray, coarse: np.ndarray, yidx: np.ndarray, w: np.ndarray, n_cells: int,
                n_coarse: int, n_lab: int, counts: np.ndarray) -> np.ndarray:
    """[B, n_cells, n_lab] label distributions per cell from weights ``w`` [B, n] (fallbacks as documented)."""
    B = w.shape[0]
    fine = np.zeros((B, n_cells, n_lab))
    crs = np.zeros((B, n_coarse, n_lab))
    np.add.at(fine, (slice(None), cells, yidx), w)
    np.add.at(crs, (slice(None), coarse, yidx), w)
    glob = crs.sum(axis=1, keepdims=True)
    fine_tot, crs_tot = fine.sum(axis=2, keepdims=True), crs.sum(axis=2, keepdims=True)
    coarse_of = np.arange(n_cells) // (n_cells // n_coarse)
    use_fine = (counts >= MIN_CELL)[None, :, None] & (fine_tot > 0)
    c_rows = np.where(crs_tot > 0, crs / np.maximum(crs_tot, 1e-300), glob / glob.sum(axis=2, keepdims=True))
    return np.where(use_fine, fine / np.maximum(fine_tot, 1e-300), c_rows[:, coarse_of, :])


class _Pools:
    """The evaluated queries' judged pools as padded arrays [Q, P]."""

    def __init__(self, qrels: pl.DataFrame, audited: pl.DataFrame, queries: Sequence[str]):
        qpos = {q: n for n, q in enumerate(queries)}
        pools: dict[str, list[tuple[str, int]]] = {}
        for q, i, lab in qrels.select("query_id", "image_id", "relevance_label").iter_rows():
            if q in qpos:
                pools.setdefault(q, []).append((i, int(lab)))
        self.Q, self.P = len(queries), max((len(v) for v in pools.values()), default=1)
        self.ids = [[i for i, _ in pools.get(q, [])] for q in queries]
        self.judge = np.zeros((self.Q, self.P))
        self.valid = np.zeros((self.Q, self.P), bool)
        self.where: dict[tuple[str, str], tuple[int, int]] = {}
        for q in queries:
            for j, (i, lab) in enumerate(pools.get(q, [])):
                self.judge[qpos[q], j], self.valid[qpos[q], j] = lab, True
                self.where[(q, i)] = (qpos[q], j)
        keep = [n for n, key in enumerate(zip(audited["query_id"].to_list(), audited["image_id"].to_list()))
                if key in self.where]
        a = audited[keep].unique(subset=["query_id", "image_id"], keep="first", maintain_order=True)
        self.a_pos = np.asarray([self.where[key] for key in zip(a["query_id"].to_list(), a["image_id"].to_list())],
                                dtype=int).reshape(-1, 2)
        self.a_human = a["human_label"].to_numpy().astype(float)
        self.a_judge = a["judge_label"].to_numpy().astype(float)
        strata = a["stratum"].to_list()
        N = {h: int(n) for h, n in audited.select("stratum", "stratum_size").unique().iter_rows()}
        self.strata = np.asarray(strata, dtype=object)
        n_h = {h: strata.count(h) for h in set(strata)}
        self.weight = np.asarray([N[h] / n_h[h] for h in strata], dtype=float)
        self.audited = np.zeros((self.Q, self.P), bool)
        if len(self.a_pos):
            self.audited[self.a_pos[:, 0], self.a_pos[:, 1]] = True

    def ranking(self, run: Mapping[str, Mapping[str, float]], queries: Sequence[str]) -> tuple[np.ndarray, ...]:
        """The system's ranking of each pool (ties: image id): ``order`` [Q, P] a permutation of the pool
        positions, those the system ranks first in rank order, then the others (unranked pairs, padding);
        ``ranked`` [Q, P] whether that position holds a ranked pair; ``rank`` [Q, P] each pool pair's rank
        (0: unranked)."""
        order = np.zeros((self.Q, self.P), int)
        ranked = np.zeros((self.Q, self.P), bool)
        rank = np.zeros((self.Q, self.P), int)
        for n, q in enumerate(queries):
            docs = run.get(q) or {}
            pos = {i: j for j, i in enumerate(self.ids[n])}
            hits = sorted(((d, s) for d, s in docs.items() if d in pos), key=lambda t: (-t[1], t[0]))
            for r, (d, _) in enumerate(hits):
                ranked[n, r], rank[n, pos[d]] = True, r + 1
            rest = [j for j in range(self.P) if rank[n, j] == 0]
            order[n] = [pos[d] for d, _ in hits] + rest
        return order, ranked, rank


def _replicate_weights(pools: _Pools, B: int, rng: np.random.Generator) -> np.ndarray:
    """[B, n] Rao & Wu (JASA 1988) rescaled bootstrap weights of the audited pairs: per stratum n_h - 1 draws
    with replacement, rescaled by sqrt(1 - f_h) (f_h = n_h / N_h), so that the replicates' variance of a
    weighted total is the design variance of stratified sampling without replacement. A stratum of one
    audited pair keeps its weight (it has no variance estimate)."""
    out = np.tile(pools.weight, (B, 1))
    for h in np.unique(pools.strata):
        idx = np.flatnonzero(pools.strata == h)
        n = len(idx)
        if n < 2:
            continue
        lam = np.sqrt(max(0.0, 1.0 - 1.0 / pools.weight[idx[0]]))
        mult = np.zeros((B, n))
        np.add.at(mult, (np.arange(B)[:, None], rng.integers(0, n, size=(B, n - 1))), 1.0)
        out[:, idx] = pools.weight[idx] * (1.0 - lam + lam * n / (n - 1) * mult)
    return out


def _posterior(args: tuple, weight: np.ndarray, counts: np.ndarray, nb: int, n_coarse: int, n_lab: int, B: int,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """B draws [B, cells, L] of the cells' label distributions and their mean [cells, L]: Dirichlet with the
    cell's audited pairs (count x its weighted distribution) plus ``PRIOR`` pseudo-pairs of its judge label's
    distribution over all ranks; a cell with no audited pair: that distribution with its judge label's count."""
    n_cells = nb * n_coarse
    fine = _cell_probs(*args, weight[None], n_cells, n_coarse, n_lab, np.full(n_cells, MIN_CELL))[0]
    coarse = _cell_probs(*args, weight[None], n_cells, n_coarse, n_lab, np.zeros(n_cells, int))[0]
    ccount = np.bincount(args[1], minlength=n_coarse)[np.arange(n_cells) // nb]
    alpha = np.where(counts[:, None] > 0, counts[:, None] * fine + PRIOR * coarse,
                     np.maximum(ccount, 1)[:, None] * coarse) + 1e-9
    g = rng.gamma(np.broadcast_to(alpha, (B, *alpha.shape)))
    return g / g.sum(axis=2, keepdims=True), alpha / alpha.sum(axis=1, keepdims=True)


def _influence(pools: _Pools, cell_r: np.ndarray, levels: np.ndarray, p_full: np.ndarray, fixed_r: np.ndarray,
               free_r: np.ndarray, at: np.ndarray, ranked: np.ndarray, metrics: Sequence[tuple[str, int]],
               rng: np.random.Generator, d: int = INFLUENCE_DRAWS) -> dict[tuple[str, int], np.ndarray]:
    """Per metric [n, L]: each audited pair's query's metric with that pair's label set to each level, the
    query's other unaudited pairs imputed from ``p_full`` (mean over ``d`` draws). Arrays in the system's
    rank order (``_r``); ``at`` [n]: each audited pair's position in it."""
    q = pools.a_pos[:, 0]
    n, P, L = len(q), pools.P, len(levels)
    cum = np.cumsum(p_full, axis=1)[:, :-1][cell_r[q]]  # [n, P, L-1]
    total = {m: np.zeros((L, n)) for m in metrics}
    step = max(1, _BLOCK_CELLS // max(1, L * n * P))  # draws per block
    rk = ranked[q]
    for d0 in range(0, d, step):
        dd = min(step, d - d0)
        lab = levels[(rng.random((dd, n, P))[..., None] >= cum[None]).sum(axis=3)]
        lab = np.where(free_r[q][None], lab, fixed_r[q][None])
        lab = np.broadcast_to(lab, (L, dd, n, P)).copy()
        lab[:, :, np.arange(n), at] = levels[:, None, None]
        lab = lab.reshape(L * dd * n, 1, P)
        rks = np.broadcast_to(rk, (L, dd, n, P)).reshape(L * dd * n, 1, P)
        for m in metrics:
            total[m] += ranked_values(lab, rks, m[0], m[1]).reshape(L, dd, n).sum(axis=1)
    return {m: (t / d).T for m, t in total.items()}


def _draws(pools: _Pools, topk: np.ndarray, levels: np.ndarray, w: np.ndarray, use_judge: bool,
           metrics: Sequence[tuple[str, int]], order: np.ndarray, ranked: np.ndarray,
           rng: np.random.Generator) -> dict[tuple[str, int], np.ndarray]:
    """Per metric, B values: the imputed metric plus the design-based correction of the imputation model's
    error (model-assisted; cells with or without the judge's label)."""
    jidx = np.searchsorted(levels, pools.judge) if use_judge else np.zeros(pools.judge.shape, int)
    n_coarse = len(levels) if use_judge else 1
    nb = len(BUCKETS)
    cell_all = jidx * nb + topk
    a_cell = cell_all[pools.a_pos[:, 0], pools.a_pos[:, 1]]
    yidx = np.searchsorted(levels, pools.a_human)
    counts = np.bincount(a_cell, minlength=nb * n_coarse)
    args = (a_cell, a_cell // nb, yidx)
    probs, p_full = _posterior(args, pools.weight, counts, nb, n_coarse, len(levels), w.shape[0], rng)
    cum = np.cumsum(probs, axis=2)[..., :-1]
    fixed = np.zeros(pools.judge.shape)
    fixed[pools.a_pos[:, 0], pools.a_pos[:, 1]] = pools.a_human
    free = pools.valid & ~pools.audited
    # everything in the system's rank order once, so no replicate gathers
    cell_r, fixed_r, free_r = (np.take_along_axis(x, order, axis=1) for x in (cell_all, fixed, free))
    at = np.argsort(order, axis=1)[pools.a_pos[:, 0], pools.a_pos[:, 1]]
    out: dict[tuple[str, int], list[np.ndarray]] = {m: [] for m in metrics}
    step = max(1, _BLOCK_CELLS // max(1, pools.Q * pools.P))
    for b0 in range(0, w.shape[0], step):
        c = cum[b0:b0 + step][:, cell_r, :]  # [b, Q, P, L-1]
        u = rng.random(c.shape[:3])
        lab = levels[(u[..., None] >= c).sum(axis=3)]
        lab = np.where(free_r, lab, fixed_r)
        for m in metrics:
            out[m].append(ranked_values(lab, ranked, m[0], m[1]))
    res = {}
    unsampled = w - 1.0  # [B, n]: each audited pair's share of the unaudited pairs (replicate weight - 1)
    infl = _influence(pools, cell_r, levels, p_full, fixed_r, free_r, at, ranked, metrics, rng)
    for m in metrics:
        e = infl[m]  # [n, L]
        # the residual at the replicate's draw of the cells (GREG: the draw's spread cancels against the
        # correction, whose Rao-Wu replicates carry the design variance); for a metric of the first relevant
        # pair (MRR) at the cells' posterior mean, so that their model uncertainty stays in the interval
        p_res = p_full[None] if m[0] in FIRST_PAIR_METRICS else probs  # [B or 1, cells, L]
        resid = e[np.arange(len(yidx)), yidx][None] - (p_res[:, a_cell, :] * e[None]).sum(axis=2)  # [B|1, n]
        res[m] = np.concatenate(out[m]) + (unsampled * resid).sum(axis=1) / pools.Q
    return res


def imputed_rows(qrels: pl.DataFrame, audited: pl.DataFrame, runs: Mapping[str, Mapping[str, Mapping[str, float]]],
                 queries: Sequence[str], *, ks: Sequence[int], confidence: float, draws: int,
                 seed: int) -> list[dict[str, Any]]:
    """Rows of ``corrected.csv`` for ``ndcg@k`` (each k), ``map`` and ``mrr`` (cells at the first k)."""
    pools = _Pools(qrels, audited, queries)
    if not len(pools.a_pos):
        return []
    levels = np.unique(np.concatenate([pools.judge[pools.valid], pools.a_human]))
    metrics = [("ndcg", k) for k in ks] + [("map", ks[0]), ("mrr", ks[0])]
    lo, hi = (1 - confidence) / 2, (1 + confidence) / 2
    rows = []
    for s_n, name in enumerate(sorted(runs)):
        order, ranked, rank = pools.ranking(runs[name], queries)
        judge = {m: float(metric_values(pools.judge[None], order, ranked, m[0], m[1])[0]) for m in metrics}
        by_k: dict[int, dict[str, dict]] = {}
        for k in sorted({m[1] for m in metrics}):
            topk = rank_buckets(rank)
            rng = np.random.default_rng([seed, s_n, k])
            w = _replicate_weights(pools, draws, rng)
            mk = [m for m in metrics if m[1] == k]
            by_k[k] = {"c": _draws(pools, topk, levels, w, True, mk, order, ranked, rng),
                       "h": _draws(pools, topk, levels, w, False, mk, order, ranked, rng),
                       "n": int(((rank > 0) & (rank <= k))[pools.a_pos[:, 0], pools.a_pos[:, 1]].sum())}
        for m in metrics:
            c, h = by_k[m[1]]["c"][m], by_k[m[1]]["h"][m]
            rows.append({"system": name, "metric": f"ndcg@{m[1]}" if m[0] == "ndcg" else m[0],
                         "queries": len(queries), "judge": judge[m], "corrected": float(c.mean()),
                         "corrected_lo": float(np.quantile(c, lo)), "corrected_hi": float(np.quantile(c, hi)),
                         "human_only": float(h.mean()), "human_only_lo": float(np.quantile(h, lo)),
                         "human_only_hi": float(np.quantile(h, hi)), "lambda": None,
                         "audited_pairs_ranked": by_k[m[1]]["n"], "method": "imputation"})
    return rows

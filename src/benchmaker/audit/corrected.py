"""Human-corrected system scores: prediction-powered inference over the judge's labels on every pair and the
people's labels on the audited pairs (docs/trust.md, "Human-corrected scores").

The estimand is what each system would score if people had labelled every judged pair: the mean over the
evaluated queries (those with a relevant pair, as in the evaluate stage) of a metric of the system's ranking
of each query's judged pool (the leaderboard's pool scope). The metrics corrected are those **linear in the
labels** — precision@k (label > 0 counts as relevant, as ranx) and DCG@k (gain = label, discount log2(rank+1),
ranx's ``dcg@k``): each is a sum over pairs, θ = (1/|Q|) Σ c(q, i) g(y(q, i)), with c the pair's weight in
the system's ranking (1/k, or 1/log2(rank+1), in the top k; 0 elsewhere). That is the setting of
prediction-powered inference for IR evaluation (Oosterhuis et al., KDD 2024): the judge's total over
every pair is known exactly, and the audit sample, drawn stratum by stratum without replacement
(``audit/sample.jsonl``: ``stratum_size`` N_h, ``stratum_sample`` n_h), estimates the judge's error:

    θ̂ = (1/|Q|) [ λ Σ_all c g(ŷ) + Σ_h N_h · mean_{S_h}( c g(y) − λ c g(ŷ) ) ]
    Var θ̂ = (1/|Q|²) Σ_h N_h² (1 − n_h/N_h) s²_h / n_h,   s²_h the sample variance of c g(y) − λ c g(ŷ)

with λ = 1 the prediction-powered estimator of Angelopoulos et al. (Science 2023) — in survey terms the
stratified difference estimator (Särndal, Swensson & Wretman 1992, §6.3) — and λ tuned from the sample
(PPI++, Angelopoulos, Duchi & Zrnic 2023; the survey regression estimator) so that a poor judge never makes
the interval wider than the people's labels alone would (λ = 0). The interval is normal (z of
``audit.confidence``). Beside it: the people-only (stratified expansion) estimate and interval, and the
judge-only value. nDCG, MAP and MRR divide by quantities of the labels themselves (the ideal DCG, the number
of relevant pairs) and have no unbiased estimator from a pair sample: with ``draws`` they are estimated by
model-assisted multiple imputation (:mod:`.imputed`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

__all__ = ["CORRECTED_COLUMNS", "corrected_ks", "corrected_scores", "estimate", "pair_weights"]

CORRECTED_COLUMNS = {"system": pl.String, "metric": pl.String, "queries": pl.Int64, "judge": pl.Float64,
                     "corrected": pl.Float64, "corrected_lo": pl.Float64, "corrected_hi": pl.Float64,
                     "human_only": pl.Float64, "human_only_lo": pl.Float64, "human_only_hi": pl.Float64,
                     "lambda": pl.Float64, "audited_pairs_ranked": pl.Int64, "rank_judge": pl.Int64,
                     "rank_corrected": pl.Int64, "method": pl.String}


def corrected_ks(metrics: Sequence[str]) -> list[int]:
    """The cutoffs of the audit's metrics (``audit.metrics``: ``ndcg@10`` -> 10); [10] when none has one."""
    ks = sorted({int(m.split("@", 1)[1]) for m in metrics if "@" in m and m.split("@", 1)[1].isdigit()})
    return ks or [10]


def pair_weights(run: Mapping[str, Mapping[str, float]], pools: Mapping[str, Sequence[str]], queries: Sequence[str],
                 k: int) -> tuple[dict[tuple[str, str], int], int]:
    """The system's rank (1..k) of each pair in its top k of each query's judged pool (ties: image id),
    and the number of evaluated queries."""
    ranks: dict[tuple[str, str], int] = {}
    for q in queries:
        docs = run.get(q) or {}
        pool = set(pools.get(q) or ())
        ranked = sorted(((d, s) for d, s in docs.items() if d in pool), key=lambda t: (-t[1], t[0]))[:k]
        for r, (d, _) in enumerate(ranked, 1):
            ranks[(q, d)] = r
    return ranks, len(queries)


def _strat_var(z: np.ndarray, strata: np.ndarray, N: Mapping[str, int]) -> float:
    """Σ_h N_h² (1 − n_h/N_h) s²_h / n_h; a stratum with one labelled pair borrows the pooled variance."""
    pooled = float(np.var(z, ddof=1)) if len(z) >= 2 else 0.0
    v = 0.0
    for h in np.unique(strata):
        zh = z[strata == h]
        n, big = len(zh), int(N[h])
        s2 = float(np.var(zh, ddof=1)) if n >= 2 else pooled
        v += big * big * max(0.0, 1.0 - n / big) * s2 / n
    return v


def _strat_total(z: np.ndarray, strata: np.ndarray, N: Mapping[str, int]) -> float:
    return float(sum(int(N[h]) * float(z[strata == h].mean()) for h in np.unique(strata)))


def _strat_cov(a: np.ndarray, b: np.ndarray, strata: np.ndarray, N: Mapping[str, int]) -> float:
    c = 0.0
    for h in np.unique(strata):
        m = strata == h
        n, big = int(m.sum()), int(N[h])
        if n >= 2:
            c += big * big * max(0.0, 1.0 - n / big) * float(np.cov(a[m], b[m], ddof=1)[0, 1]) / n
    return c


def estimate(total_judge: float, cy: np.ndarray, cj: np.ndarray, strata: np.ndarray, N: Mapping[str, int],
             n_queries: int, *, z: float, tune: bool = True) -> dict[str, float]:
    """The corrected (PPI / PPI++) and people-only estimates with their intervals, and λ.
    ``total_judge``: Σ over every pair of c g(ŷ); ``cy``, ``cj``: c g(y) and c g(ŷ) of the labelled sample
    pairs; ``strata``: their strata; ``N``: stratum sizes."""
    lam = 1.0
    if tune:
        vj = _strat_var(cj, strata, N)
        lam = min(1.0, max(0.0, _strat_cov(cy, cj, strata, N) / vj)) if vj > 0 else 1.0
    d = cy - lam * cj
    est = (lam * total_judge + _strat_total(d, strata, N)) / n_queries
    se = math.sqrt(_strat_var(d, strata, N)) / n_queries
    hum = _strat_total(cy, strata, N) / n_queries
    se_h = math.sqrt(_strat_var(cy, strata, N)) / n_queries
    return {"corrected": est, "corrected_lo": est - z * se, "corrected_hi": est + z * se, "human_only": hum,
            "human_only_lo": hum - z * se_h, "human_only_hi": hum + z * se_h, "lambda": lam}


def _gain(metric: str, label: np.ndarray) -> np.ndarray:
    return (label > 0).astype(float) if metric == "precision" else label.astype(float)


def _coef(metric: str, rank: np.ndarray, k: int) -> np.ndarray:
    on = rank > 0
    out = np.zeros(len(rank))
    if metric == "precision":
        out[on] = 1.0 / k
    else:
        out[on] = 1.0 / np.log2(rank[on] + 1.0)
    return out


def _design(qrels: pl.DataFrame, sample: pl.DataFrame, confidence: float):
    """What both the corrected scores and the projection read of the judged pools and a stratified sample:
    each query's pool (image ids in qrels order), the normal quantile of ``confidence``, each stratum's
    size, and the sample's strata and (query, image) keys in its row order."""
    from scipy.stats import norm

    pools: dict[str, list[str]] = {}
    for q, i in qrels.select("query_id", "image_id").iter_rows():
        pools.setdefault(q, []).append(i)
    z = float(norm.ppf(0.5 + confidence / 2))
    N = {h: int(n) for h, n in sample.select("stratum", "stratum_size").unique().iter_rows()}
    strata = np.asarray(sample["stratum"].to_list())
    keys = list(zip(sample["query_id"].to_list(), sample["image_id"].to_list()))
    return pools, z, N, strata, keys


def corrected_scores(qrels: pl.DataFrame, audited: pl.DataFrame, runs: Mapping[str, Mapping[str, Mapping[str, float]]],
                     *, ks: Sequence[int], confidence: float, draws: int = 0, seed: int = 0) -> dict[str, Any]:
    """``qrels``: every judged pair (query_id, image_id, relevance_label); ``audited``: the labelled sample
    pairs (query_id, image_id, judge_label, human_label, stratum, stratum_size); ``runs``: system -> TREC run
    as {query: {image: score}}. Returns {"status", "queries", "confidence", "rows": [...]}. With ``draws``
    > 0 also nDCG@k, MAP and MRR by multiple imputation with that many replicates (:mod:`.imputed`)."""
    if not audited.height or not runs:
        return {"status": "no human labels" if not audited.height else "no systems", "rows": []}
    queries = sorted(qrels.filter(pl.col("relevance_label") > 0)["query_id"].unique().to_list())
    pools, z, N, strata, a_keys = _design(qrels, audited, confidence)
    y, yj = audited["human_label"].to_numpy(), audited["judge_label"].to_numpy()
    all_keys = list(zip(qrels["query_id"].to_list(), qrels["image_id"].to_list()))
    all_j = qrels["relevance_label"].to_numpy()
    rows = []
    for k in ks:
        for name in sorted(runs):
            ranks, nq = pair_weights(runs[name], pools, queries, k)
            r_all = np.asarray([ranks.get(key, 0) for key in all_keys], dtype=float)
            r_s = np.asarray([ranks.get(key, 0) for key in a_keys], dtype=float)
            for metric in ("precision", "dcg"):
                c_all, c_s = _coef(metric, r_all, k), _coef(metric, r_s, k)
                total_j = float(np.sum(c_all * _gain(metric, all_j)))
                est = estimate(total_j, c_s * _gain(metric, y), c_s * _gain(metric, yj), strata, N, nq, z=z)
                rows.append({"system": name, "metric": f"{metric}@{k}", "queries": nq, "judge": total_j / nq,
                             **est, "audited_pairs_ranked": int((r_s > 0).sum()), "method": "ppi++"})
    if draws > 0:
        from .imputed import imputed_rows

        rows = imputed_rows(qrels, audited, runs, queries, ks=ks, confidence=confidence, draws=draws,
                            seed=seed) + rows
    _rank(rows)
    return {"status": "ok", "queries": len(queries), "confidence": confidence, "z": z,
            "estimator": "PPI++ (stratified, lambda tuned) over judge labels on every pair and human labels on "
                         "the audited pairs; people-only: stratified expansion estimator",
            "estimator_ratio": (f"nDCG@k, MAP, MRR: model-assisted multiple imputation of people's labels "
                                f"({draws} replicates; cells: judge label x the system's rank bucket, Dirichlet "
                                f"posterior; design-based residual correction at the posterior mean, Rao-Wu stratified "
                                f"bootstrap); "
                                f"people-only: cells without the judge's label") if draws > 0 else None,
            "rows": [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]}


def _rank(rows: list[dict[str, Any]]) -> None:
    for metric in sorted({r["metric"] for r in rows}):
        group = [r for r in rows if r["metric"] == metric]
        for key, col in (("judge", "rank_judge"), ("corrected", "rank_corrected")):
            for pos, r in enumerate(sorted(group, key=lambda r: (-r[key], r["system"])), 1):
                r[col] = pos


def corrected_table(doc: Mapping[str, Any]) -> pl.DataFrame:
    """``corrected.csv``: one row per (metric, system)."""
    rows = doc.get("rows") or []
    return pl.DataFrame([{c: r.get(c) for c in CORRECTED_COLUMNS} for r in rows], schema=CORRECTED_COLUMNS)


def projected(qrels: pl.DataFrame, sample: pl.DataFrame, runs: Mapping[str, Mapping[str, Mapping[str, float]]],
              *, ks: Sequence[int], confidence: float) -> dict[str, Any]:
    """Before any human label: the half-width of each system's people-only precision@k interval once the
    sample is labelled, **at worst** — whatever labels people give. Precision@k's pair terms c·g(y) are 0
    or 1/k, so in a stratum of n labelled pairs of which m are in the system's top k the sample variance is
    at most j(n − j)/(n(n − 1)k²), j = min(m, ⌊n/2⌋) (half of the top-k pairs relevant); the interval is
    :func:`_strat_var`'s with that variance. The corrected (PPI++) interval is never wider than the
    people-only one, so this bounds what labelling the sample buys (docs/trust.md). The judge's labels
    cannot stand in for people's here: the strata hold one judge label each, so a pool of at most k pairs
    (all in the top k) would project a variance of 0 and an interval of ±0."""
    queries = sorted(qrels.filter(pl.col("relevance_label") > 0)["query_id"].unique().to_list())
    status = "ok" if sample.height and runs and queries else ("no systems" if not runs else "nothing to label")
    out = {"status": status, "sample_pairs": sample.height, "confidence": confidence,
           "assumption": "worst case over people's labels: in every stratum half of the sampled pairs in the "
                         "system's top k relevant (the largest variance any labels can give)", "rows": []}
    if status != "ok":
        return out
    pools, z, N, strata, keys = _design(qrels, sample, confidence)
    for k in ks:
        for name in sorted(runs):
            ranks, nq = pair_weights(runs[name], pools, queries, k)
            top = np.asarray([key in ranks for key in keys])
            out["rows"].append({"system": name, "metric": f"precision@{k}",
                                "half_width": round(z * math.sqrt(_worst_var(top, strata, N)) / (k * nq), 6)})
    return out


def _worst_s2(top: np.ndarray) -> float:
    """The largest sample variance (ddof 1) of 0/1 values that are 0 off ``top``: ⌊n/2⌋ ones, at most m."""
    n = len(top)
    if n < 2:
        return 0.0
    j = min(int(top.sum()), n // 2)
    return j * (n - j) / (n * (n - 1))


def _worst_var(top: np.ndarray, strata: np.ndarray, N: Mapping[str, int]) -> float:
    """:func:`_strat_var` with each stratum's worst-case variance (a stratum of one pair: the pooled one)."""
    pooled = _worst_s2(top)
    v = 0.0
    for h in np.unique(strata):
        th = top[strata == h]
        n, big = len(th), int(N[h])
        v += big * big * max(0.0, 1.0 - n / big) * (_worst_s2(th) if n >= 2 else pooled) / n
    return v

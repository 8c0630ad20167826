"""The evaluate stage's metrics: ranx scores per query, and the measures beside them.

Metrics are ranx's (never re-implemented here): ``ndcg@k``, ``map``, ``mrr``, ``precision@k``,
``recall@k``, ``hit_rate@k`` for each configured cutoff k. Beside them, as the Sage evaluator reports
it, ``diversity@k`` = 1 − mean pairwise cosine similarity of the top-k images' embeddings (the
benchmark's similarity-model image embeddings, the same for every system), and for the corpus scopes
``judged@k`` = the share of the top k that the judge labelled. ``significance``: the paired tests between
systems; ``difficulty_of``: a query's difficulty from its judged pool. The stage that runs them over every
system's run is :mod:`.stage`.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from .runs import RanxIds, to_ranx_run

__all__ = [
    "DIFFICULTY_BINS",
    "difficulty_of",
    "diversity",
    "evaluate_scope",
    "judged_at",
    "ranx_metrics",
    "ranx_scores",
    "significance",
    "to_ranx_qrels",
    "top_k",
]

# query difficulty from the share of relevant images in its judged pool (fewer = harder)
DIFFICULTY_BINS = ((0.2, "hard"), (0.5, "medium"), (1.01, "easy"))

def ranx_metrics(ks: Sequence[int]) -> list[str]:
    """The stage's ranx metrics at cutoffs ``ks`` (the names declared in :mod:`benchmaker.evaluate_settings`,
    which config validation checks other settings against)."""
    from ..evaluate_settings import CUTOFF_METRICS, WHOLE_METRICS

    return [f"{m}@{k}" for k in ks for m in CUTOFF_METRICS] + list(WHOLE_METRICS)


def to_ranx_qrels(qrels: pl.DataFrame, ids: RanxIds | None = None):
    from ranx import Qrels

    qc = ids.query if ids is not None else str
    dc = ids.image if ids is not None else str
    d: dict[str, dict[str, int]] = {}
    for qid, docs, rels in qrels.group_by("query_id").agg("image_id", "relevance_label").iter_rows():
        d[qc(qid)] = {dc(i): int(r) for i, r in zip(docs, rels)}
    return Qrels(d)


def evaluate_scope(qrels: pl.DataFrame, run: pl.DataFrame, metrics: Sequence[str], name: str,
                   queries: Sequence[str], ranx_qrels=None, ids: RanxIds | None = None) -> pl.DataFrame:
    """Per-query ranx scores (``query_id`` + one column per metric) over ``queries``; a query the run
    does not rank scores 0. ``ranx_qrels`` (the qrels of exactly ``queries``) is built when not given;
    ``ids``: the :class:`RanxIds` codes the qrels were built with (default: built here)."""
    if ids is None:
        ids = RanxIds(qrels["query_id"].to_list(), qrels["image_id"].to_list())
        ranx_qrels = None
    return ranx_scores(ranx_qrels if ranx_qrels is not None else to_ranx_qrels(
        qrels.filter(pl.col("query_id").is_in(list(queries))), ids), run, metrics, name, queries, ids)[0]


def ranx_scores(q, run: pl.DataFrame, metrics: Sequence[str], name: str, queries: Sequence[str],
                ids: RanxIds | None = None):
    """(per-query scores, the ranx Run) of ``run`` against ranx Qrels ``q`` holding exactly ``queries``.

    The Run gets exactly the same queries (an empty ranking where the run has none), so ranx needs no
    ``make_comparable`` copy. ``ids``: the :class:`RanxIds` codes ``q`` was built with (or None)."""
    from ranx import evaluate

    order = sorted(queries)
    schema = {"query_id": pl.String, **{m: pl.Float64 for m in metrics}}
    sub = run.filter(pl.col("query_id").is_in(order))
    if not sub.height:  # ranx cannot build a Run without a single document; every metric of it is 0
        return pl.DataFrame({"query_id": order, **{m: [0.0] * len(order) for m in metrics}}, schema=schema), None
    r = to_ranx_run(sub, name, order, ids)
    evaluate(q, r, list(metrics), return_mean=False, save_results_in_run=True)
    keys = [ids.query(x) for x in order] if ids is not None else order
    return pl.DataFrame({"query_id": order, **{m: [float(r.scores[m][x]) for x in keys] for m in metrics}},
                        schema=schema), r


def top_k(run: pl.DataFrame, k: int) -> pl.DataFrame:
    return (run.sort(["query_id", "score", "image_id"], descending=[False, True, False])
            .group_by("query_id", maintain_order=True).head(k))


def judged_at(run: pl.DataFrame, qrels: pl.DataFrame, k: int, queries: Sequence[str]) -> pl.DataFrame:
    """Per query: share of the top k that has a judgment (any label)."""
    t = top_k(run, k).join(qrels.select("query_id", "image_id", pl.lit(True).alias("_j")),
                           on=["query_id", "image_id"], how="left")
    g = t.group_by("query_id").agg((pl.col("_j").fill_null(False).sum() / k).alias(f"judged@{k}"))
    return pl.DataFrame({"query_id": list(queries)}, schema={"query_id": pl.String}).join(
        g, on="query_id", how="left").with_columns(pl.col(f"judged@{k}").fill_null(0.0))


def diversity(run: pl.DataFrame, k: int, emb_index: Mapping[str, int], emb: np.ndarray,
              queries: Sequence[str]) -> pl.DataFrame:
    """Per query: 1 − mean pairwise cosine similarity of the top k (images with an embedding); null when
    fewer than two of them have one (as the Sage evaluator: NaN below two vectors)."""
    name = f"diversity@{k}"
    t = top_k(run, k).group_by("query_id", maintain_order=True).agg("image_id")
    val: dict[str, float | None] = {}
    for qid, ids in t.iter_rows():
        idx = [emb_index[i] for i in ids if i in emb_index]
        if len(idx) < 2:
            val[qid] = None
            continue
        v = emb[idx]
        sim = v @ v.T
        iu = np.triu_indices(len(idx), k=1)
        val[qid] = float(1.0 - sim[iu].mean())
    return pl.DataFrame({"query_id": list(queries), name: [val.get(q) for q in queries]},
                        schema={"query_id": pl.String, name: pl.Float64})


def difficulty_of(qrels: pl.DataFrame) -> pl.DataFrame:
    """``query_id, positive_rate, difficulty`` (hard / medium / easy by the pool's share of relevant images)."""
    g = qrels.group_by("query_id").agg((pl.col("relevance_label") > 0).mean().alias("positive_rate"))
    expr = pl.when(pl.col("positive_rate") < DIFFICULTY_BINS[0][0]).then(pl.lit(DIFFICULTY_BINS[0][1]))
    for limit, label in DIFFICULTY_BINS[1:]:
        expr = expr.when(pl.col("positive_rate") < limit).then(pl.lit(label))
    return g.with_columns(expr.otherwise(pl.lit(DIFFICULTY_BINS[-1][1])).alias("difficulty"))


def adjusted_p(p_values: Sequence[float], *, alpha: float, method: str) -> list[float]:
    """``p_values`` corrected for multiple testing as one family (statsmodels ``multipletests``)."""
    from statsmodels.stats.multitest import multipletests

    # statsmodels' holm runs gc.collect() on every call: a full collection of everything ranx, scipy
    # and numba loaded (~0.1 s each, more in a long-lived process); frozen objects are not scanned
    gc.freeze()
    try:
        return [float(p) for p in multipletests(p_values, alpha=alpha, method=method)[1]]
    finally:
        gc.unfreeze()


def significance(q, runs: Mapping[str, Any], metrics: Sequence[str], stat_test: str, correction: str,
                 max_p: float) -> pl.DataFrame:
    """Paired tests between every pair of systems (``ranx.compare`` on ranx Qrels ``q`` and ranx Runs of
    the same queries), p-values corrected across all pairs of a metric (statsmodels ``multipletests``;
    ``tukey`` is already a multiple-comparison procedure and is left as it is). Beside them, by how
    much: ``delta`` (mean_a - mean_b) and its paired-t confidence interval at ``1 - max_p``
    (``scipy.stats.ttest_rel(...).confidence_interval``, per pair, not adjusted) over ``queries``."""
    from ranx import compare

    schema = {"metric": pl.String, "system_a": pl.String, "system_b": pl.String, "mean_a": pl.Float64,
              "mean_b": pl.Float64, "delta": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64,
              "queries": pl.Int64, "p_value": pl.Float64, "p_adjusted": pl.Float64, "significant": pl.Boolean,
              "test": pl.String, "correction": pl.String}
    names = sorted(n for n, r in runs.items() if r is not None)
    if len(names) < 2:
        return pl.DataFrame(schema=schema)
    report = compare(q, [runs[n] for n in names], list(metrics), stat_test=stat_test, max_p=max_p)
    rows = []
    for m in metrics:
        pairs = list(itertools.combinations(names, 2))
        pv = [float(report.comparisons[frozenset((a, b))][m]["p_value"]) for a, b in pairs]
        if stat_test == "tukey" or correction == "none":
            adj, method = pv, ("tukey-hsd" if stat_test == "tukey" else "none")
        else:
            adj, method = adjusted_p(pv, alpha=max_p, method=correction), correction
        for (a, b), p, pa in zip(pairs, pv, adj):
            rows.append({"metric": m, "system_a": a, "system_b": b, "mean_a": report.results[a][m],
                         "mean_b": report.results[b][m], **_difference(runs[a], runs[b], m, 1 - max_p),
                         "p_value": p, "p_adjusted": float(pa),
                         "significant": bool(pa <= max_p), "test": stat_test, "correction": method})
    return pl.DataFrame(rows, schema=schema)


def _difference(run_a: Any, run_b: Any, metric: str, confidence: float) -> dict[str, float | int | None]:
    """mean_a - mean_b over the queries both runs scored (ranx keeps the per-query values of ``compare``
    in ``run.scores``) and its paired-t confidence interval (scipy); no interval below two queries or
    when every per-query difference is the same (then the interval is that difference)."""
    from scipy import stats

    sa, sb = run_a.scores[metric], run_b.scores[metric]
    qs = sorted(set(sa) & set(sb))
    a = np.array([float(sa[x]) for x in qs])
    b = np.array([float(sb[x]) for x in qs])
    if not qs:
        return {"delta": None, "ci_low": None, "ci_high": None, "queries": 0}
    d = a - b
    delta = float(d.mean())
    if len(qs) < 2:
        lo = hi = None
    elif np.ptp(d) == 0:
        lo = hi = delta
    else:
        ci = stats.ttest_rel(a, b).confidence_interval(confidence)
        lo, hi = float(ci.low), float(ci.high)
    return {"delta": delta, "ci_low": lo, "ci_high": hi, "queries": len(qs)}

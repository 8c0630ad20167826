"""Human-corrected scores against known truth: a biased judge, many simulated audits (docs/trust.md).

    python benchmarks/trust_ppi.py [--audits 1000] [--queries 50] [--pool 30] [--sample 200] [--seed 1] [--draws 200]
                                   [--design label|label_rank] [--bands 3:4,10:2] [--every N]

Each simulated benchmark draws people's (true) binary labels for ``queries x pool`` judged pairs (30 %
relevant), three systems that rank each pool by noisy scores of different quality (A best, then B, then C),
and a judge that calls 20 % of non-relevant pairs relevant, 60 % of the non-relevant pairs in system B's top
10, and misses 10 % of relevant ones. The audit draws ``--sample`` pairs as the workflow does
(``benchmaker.audit.sample.draw_sample``: proportional allocation, at least 5 per stratum, bottom-k by a fresh
seed per audit), stratified by the judge's label (``--design label``) or by the judge's label x the band of
the best rank any system gives the pair (``--design label_rank``: ``rank_strata``, bands and weights
``--bands``, as ``audit.rank_bands``), and :func:`benchmaker.audit.corrected.corrected_scores` estimates every
system's precision@10 and DCG@10 (PPI++) and nDCG@10, MAP and MRR (multiple imputation, ``--draws``
replicates) as people would score them over all pairs. Printed per metric: the
coverage of the 95 % corrected intervals and of the people-only intervals (target 0.95 ± 0.02), their mean
widths, and how often the ranking by the corrected estimates (and the judge's) equals the true ranking.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from benchmaker.audit.corrected import corrected_scores, pair_weights  # noqa: E402
from benchmaker.audit.imputed import _Pools, metric_values  # noqa: E402
from benchmaker.audit.sample import draw_sample, rank_strata  # noqa: E402
from benchmaker.formats import FacetModel  # noqa: E402

SYSTEMS = {"A": 1.6, "B": 1.0, "C": 0.6}  # signal of the true label in each system's score


def one_benchmark(rng: np.random.Generator, queries: int, pool: int):
    qids = np.repeat([f"q{i:04d}" for i in range(queries)], pool)
    iids = np.tile([f"i{j:03d}" for j in range(pool)], queries)
    y = (rng.random(queries * pool) < 0.3).astype(int)
    runs, top_b = {}, np.zeros(len(y), bool)
    for name, signal in SYSTEMS.items():
        score = signal * y + rng.normal(size=len(y))
        run: dict[str, dict[str, float]] = {}
        for q, i, s in zip(qids, iids, score):
            run.setdefault(q, {})[i] = float(s)
        runs[name] = run
        if name == "B":  # the judge's favourite: its top 10 per query
            order = np.lexsort((iids, -score, qids))
            rank = np.empty(len(y), int)
            for q0 in range(queries):
                idx = order[q0 * pool:(q0 + 1) * pool]
                rank[idx] = np.arange(1, pool + 1)
            top_b = rank <= 10
    fp = np.where(top_b, 0.6, 0.2)
    judge = np.where(y == 1, (rng.random(len(y)) >= 0.10).astype(int), (rng.random(len(y)) < fp).astype(int))
    qrels = pl.DataFrame({"query_id": qids, "image_id": iids, "relevance_label": judge, "human": y})
    return qrels, runs


def truth(qrels: pl.DataFrame, runs) -> dict[tuple[str, str], float]:
    """Every system's precision@10 and DCG@10 under the people's labels on every pair, over the queries
    the estimates are about (those with a pair the judge called relevant, as the evaluate stage)."""
    queries = sorted(qrels.filter(pl.col("relevance_label") > 0)["query_id"].unique().to_list())
    pools: dict[str, list[str]] = {}
    for q, i in qrels.select("query_id", "image_id").iter_rows():
        pools.setdefault(q, []).append(i)
    human = {(q, i): h for q, i, h in qrels.select("query_id", "image_id", "human").iter_rows()}
    out = {}
    for name, run in runs.items():
        ranks, nq = pair_weights(run, pools, queries, 10)
        out[(name, "precision@10")] = sum(human[key] / 10 for key in ranks) / nq
        out[(name, "dcg@10")] = sum(human[key] / np.log2(r + 1) for key, r in ranks.items()) / nq
    # nDCG@10, MAP, MRR: the library's metric code on the people's labels of every pair (no sample)
    census = qrels.select("query_id", "image_id", pl.col("human").alias("relevance_label"))
    pools_h = _Pools(census, census.head(0).with_columns(pl.lit(0).alias("judge_label"), pl.lit(0).alias(
        "human_label"), pl.lit("").alias("stratum"), pl.lit(0).alias("stratum_size")), queries)
    for name, run in runs.items():
        order, ranked, _ = pools_h.ranking(run, queries)
        for metric, label in (("ndcg", "ndcg@10"), ("map", "map"), ("mrr", "mrr")):
            out[(name, label)] = float(metric_values(pools_h.judge[None], order, ranked, metric, 10)[0])
    return out


DESIGNS = {"label": ["judge_label"], "label_rank": ["judge_label", "rank"]}


def one_audit(rng: np.random.Generator, qrels: pl.DataFrame, runs, n: int, design: str, bands) -> pl.DataFrame:
    """The audit sample as the workflow draws it (:func:`benchmaker.audit.sample.draw_sample`, proportional
    allocation, at least 5 per stratum), with a fresh sampling seed per audit."""
    q = qrels.with_columns(pl.col("query_id").alias("query_text"), pl.lit("random").alias("pool"),
                           pl.lit(False).alias("is_seed"), pl.lit("sim").alias("judge"))
    ranks = None
    if "rank" in DESIGNS[design]:
        frames = {name: pl.DataFrame([(qq, i, sc) for qq, docs in run.items() for i, sc in docs.items()],
                                     schema={"query_id": pl.String, "image_id": pl.String, "score": pl.Float64},
                                     orient="row") for name, run in runs.items()}
        ranks = rank_strata(q, frames, bands)
    s = draw_sample(q, pl.DataFrame(), pl.DataFrame({"image_id": []}, schema={"image_id": pl.String}),
                    FacetModel.from_config({}), sample_size=n, seed=int(rng.integers(2**62)),
                    strata=DESIGNS[design], min_per_stratum=5, allocation="proportional", ranks=ranks)
    human = {(a, b): h for a, b, h in qrels.select("query_id", "image_id", "human").iter_rows()}
    return s.select("query_id", "image_id", "judge_label", "stratum", "stratum_size").with_columns(
        pl.Series("human_label", [human[k] for k in zip(s["query_id"].to_list(), s["image_id"].to_list())]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--audits", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--pool", type=int, default=30)
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--draws", type=int, default=200, help="bootstrap replicates of the nDCG/MAP/MRR imputation")
    ap.add_argument("--every", type=int, default=0, help="also print the figures so far every N audits")
    ap.add_argument("--design", choices=sorted(DESIGNS), default="label",
                    help="audit strata: the judge's label, or the judge's label x the best rank band of any system")
    ap.add_argument("--bands", default="3:4,10:2", help="rank bands as max_rank:weight,... (design label_rank)")
    a = ap.parse_args()
    a.band_list = [{"max_rank": int(m), "weight": float(w)} for m, w in
                   (b.split(":") for b in a.bands.split(",") if b)]
    rng = np.random.default_rng(a.seed)
    t0 = time.perf_counter()
    stats: dict[str, dict[str, list]] = {}
    for n_done in range(1, a.audits + 1):
        qrels, runs = one_benchmark(rng, a.queries, a.pool)
        true = truth(qrels, runs)
        audit = one_audit(rng, qrels, runs, a.sample, a.design, a.band_list)
        res = corrected_scores(qrels.drop("human"), audit, runs, ks=[10], confidence=0.95, draws=a.draws,
                               seed=int(rng.integers(2**31)))
        for metric in ("ndcg@10", "map", "mrr", "precision@10", "dcg@10"):
            keys = ("cov", "cov_h", "w", "w_h", "rank_c", "rank_j", "err", "sys")
            st = stats.setdefault(metric, {k: [] for k in keys})
            rows = [r for r in res["rows"] if r["metric"] == metric]
            for r in rows:
                t = true[(r["system"], metric)]
                st["sys"].append(r["system"])
                st["cov"].append(r["corrected_lo"] <= t <= r["corrected_hi"])
                st["err"].append(r["corrected"] - t)
                st["cov_h"].append(r["human_only_lo"] <= t <= r["human_only_hi"])
                st["w"].append(r["corrected_hi"] - r["corrected_lo"])
                st["w_h"].append(r["human_only_hi"] - r["human_only_lo"])
            order_true = sorted(SYSTEMS, key=lambda s: -true[(s, metric)])
            st["rank_c"].append([r["system"] for r in sorted(rows, key=lambda r: -r["corrected"])] == order_true)
            st["rank_j"].append([r["system"] for r in sorted(rows, key=lambda r: -r["judge"])] == order_true)
        if n_done == a.audits or (a.every and n_done % a.every == 0):
            _report(stats, a, n_done, time.perf_counter() - t0)


def _report(stats, a, n_done: int, seconds: float) -> None:
    print(f"{n_done} simulated audits: {a.queries} queries x {a.pool} pairs, sample {a.sample} "
          f"(design {a.design}{' ' + a.bands if a.design == 'label_rank' else ''}), 3 systems, "
          f"{a.draws} imputation replicates; {seconds:.0f} s")
    for metric, st in stats.items():
        print(f"{metric}: coverage corrected {np.mean(st['cov']):.3f}, people-only {np.mean(st['cov_h']):.3f}; "
              f"mean width corrected {np.mean(st['w']):.4f}, people-only {np.mean(st['w_h']):.4f}; "
              f"true ranking recovered: corrected {np.mean(st['rank_c']):.3f}, judge {np.mean(st['rank_j']):.3f}; "
              f"bias {np.mean(st['err']):+.4f}, rmse {np.sqrt(np.mean(np.square(st['err']))):.4f}", flush=True)
        # diagnosis per system: bias, the error's spread and the mean reported half-width over 1.96 of it (1 = the
        # intervals are as wide as a normal 95 % interval of the actual error needs)
        parts = []
        for s in SYSTEMS:
            on = np.asarray(st["sys"]) == s
            e, w = np.asarray(st["err"])[on], np.asarray(st["w"])[on]
            parts.append(f"{s}: coverage {np.mean(np.asarray(st['cov'])[on]):.3f}, bias {e.mean():+.4f}, "
                         f"sd {e.std():.4f}, half-width / (1.96 sd) {w.mean() / 2 / (1.96 * e.std()):.2f}")
        print(f"  {metric} by system: " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    main()

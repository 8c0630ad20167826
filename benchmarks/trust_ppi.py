"""Human-corrected scores against known truth: a biased judge, many simulated audits (docs/trust.md).

    python benchmarks/trust_ppi.py [--audits 1000] [--queries 50] [--pool 30] [--sample 200] [--seed 1] [--draws 200]
                                   [--design label|label_rank|pool_label_rank[,...]] [--bands 3:4,10:2] [--every N]
                                   [--pools 1|3|6]

Each simulated benchmark draws people's (true) binary labels for ``queries x pool`` judged pairs (30 %
relevant), three systems that rank each pool by noisy scores of different quality (A best, then B, then C),
and a judge that calls 20 % of non-relevant pairs relevant, 60 % of the non-relevant pairs in system B's top
10, and misses 10 % of relevant ones. The audit draws ``--sample`` pairs as the workflow does
(``benchmaker.audit.sample.draw_sample``: proportional allocation, at least 5 per stratum, bottom-k by a fresh
seed per audit), stratified by the judge's label (``--design label``) or by the judge's label x the band of
the best rank any system gives the pair (``--design label_rank``: ``rank_strata``, bands and weights
``--bands``, as ``audit.rank_bands``), and :func:`benchmaker.audit.corrected.corrected_scores` estimates every
system's precision@10 and DCG@10 (PPI++) and nDCG@10, MAP and MRR (multiple imputation, ``--draws``
replicates) as people would score them over all pairs.

``--pools 3`` or ``6`` splits each query's ``--pool`` pairs into candidate pools as the planner makes them
(``POOLS``: 6 = seed, positive, neutral, hard, near-miss, easy; 3 = positive, hard, easy), each with its own
share of the pairs, rate of relevant pairs, judge error rates (the judge's bias for system B's top 10 adds
0.4 to a pool's false-positive rate, as 0.2 -> 0.6 with one pool) and a score offset every system gives its
pairs (a real system ranks seeds and positives above easy negatives). Several designs, comma-separated
(``--design pool_label_rank,label_rank``), audit each simulated benchmark with the same sampling seed (paired:
the width ratio's Monte-Carlo error is small); designs that draw the same pairs share one estimate. Printed
per design and metric: the
coverage of the 95 % corrected intervals and of the people-only intervals (target 0.95 ± 0.02), their mean
widths, and how often the ranking by the corrected estimates (and the judge's) equals the true ranking;
with ``±`` the Monte-Carlo standard error over audits (an audit's intervals counted together, as they share
its sample). Then the strata and how many pairs the floor ``min_per_stratum`` takes, and the paired ratio of
the mean widths to the first design's.
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

# candidate pools per query, as the planner makes them (docs/planner.md; schema defaults 1 seed, 5 positive,
# 5 neutral, 15 hard, 10 near-miss, 5 easy of 41, here scaled to 30): (name, pairs of 30, share of relevant
# pairs, judge's miss rate on relevant pairs, judge's false-positive rate on the others, score offset every
# system adds). One pool: the original simulation (30 % relevant, misses 10 %, false positives 20 %).
POOLS = {
    1: [("random", 30, 0.30, 0.10, 0.20, 0.0)],
    3: [("positive", 9, 0.75, 0.05, 0.35, 0.75), ("hard", 14, 0.22, 0.15, 0.25, 0.22),
        ("easy", 7, 0.03, 0.30, 0.05, 0.03)],
    6: [("seed", 1, 0.95, 0.02, 0.50, 0.95), ("positive", 4, 0.70, 0.05, 0.35, 0.70),
        ("neutral", 4, 0.45, 0.10, 0.30, 0.45), ("hard", 10, 0.25, 0.15, 0.25, 0.25),
        ("nearmiss", 7, 0.15, 0.20, 0.20, 0.15), ("easy", 4, 0.02, 0.30, 0.03, 0.02)],
}


def pool_layout(pools: int, pool: int) -> list[tuple]:
    """Each pool's spec with its pairs per query scaled from 30 to ``pool`` (largest pools absorb rounding)."""
    spec = POOLS[pools]
    sizes = [max(1, round(n * pool / 30)) for _, n, *_ in spec]
    big = max(range(len(spec)), key=lambda i: spec[i][1])
    sizes[big] += pool - sum(sizes)
    return [(name, n, *rest) for (name, _, *rest), n in zip(spec, sizes)]


def one_benchmark(rng: np.random.Generator, queries: int, pool: int, pools: int = 1):
    layout = pool_layout(pools, pool)
    per_pair = [row for row in layout for _ in range(row[1])]  # one query's pairs, pool by pool
    name_q = np.asarray([r[0] for r in per_pair])
    rel_q, fn_q, fp_q, off_q = (np.asarray([r[j] for r in per_pair], float) for j in (2, 3, 4, 5))
    qids = np.repeat([f"q{i:04d}" for i in range(queries)], pool)
    iids = np.tile([f"i{j:03d}" for j in range(pool)], queries)
    pool_name, rel, fn, fp0, offset = (np.tile(x, queries) for x in (name_q, rel_q, fn_q, fp_q, off_q))
    y = (rng.random(queries * pool) < rel).astype(int)
    runs, top_b = {}, np.zeros(len(y), bool)
    for name, signal in SYSTEMS.items():
        score = signal * y + offset + rng.normal(size=len(y))
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
    fp = np.where(top_b, np.minimum(fp0 + 0.4, 0.9), fp0)
    judge = np.where(y == 1, (rng.random(len(y)) >= fn).astype(int), (rng.random(len(y)) < fp).astype(int))
    qrels = pl.DataFrame({"query_id": qids, "image_id": iids, "relevance_label": judge, "human": y,
                          "pool": pool_name})
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


DESIGNS = {"label": ["judge_label"], "label_rank": ["judge_label", "rank"],
           "pool_label_rank": ["pool", "judge_label", "rank"]}
METRICS = ("ndcg@10", "map", "mrr", "precision@10", "dcg@10")


def system_ranks(qrels: pl.DataFrame, runs, bands) -> pl.DataFrame:
    """The rank stratum (:func:`benchmaker.audit.sample.rank_strata`) of the three systems' runs."""
    frames = {name: pl.DataFrame([(qq, i, sc) for qq, docs in run.items() for i, sc in docs.items()],
                                 schema={"query_id": pl.String, "image_id": pl.String, "score": pl.Float64},
                                 orient="row") for name, run in runs.items()}
    return rank_strata(qrels, frames, bands)


def one_audit(qrels: pl.DataFrame, ranks: pl.DataFrame, n: int, design: str, seed: int,
              min_per_stratum: int) -> pl.DataFrame:
    """The audit sample as the workflow draws it (:func:`benchmaker.audit.sample.draw_sample`, proportional
    allocation, at least ``min_per_stratum`` per stratum), with the audit's sampling seed."""
    q = qrels.with_columns(pl.col("query_id").alias("query_text"), pl.lit(False).alias("is_seed"),
                           pl.lit("sim").alias("judge"))
    s = draw_sample(q, pl.DataFrame(), pl.DataFrame({"image_id": []}, schema={"image_id": pl.String}),
                    FacetModel.from_config({}), sample_size=n, seed=seed, strata=DESIGNS[design],
                    min_per_stratum=min_per_stratum, allocation="proportional",
                    ranks=ranks if "rank" in DESIGNS[design] else None)
    human = {(a, b): h for a, b, h in qrels.select("query_id", "image_id", "human").iter_rows()}
    return s.select("query_id", "image_id", "judge_label", "stratum", "stratum_size", "stratum_sample",
                    "pool").with_columns(
        pl.Series("human_label", [human[k] for k in zip(s["query_id"].to_list(), s["image_id"].to_list())]))


def sample_facts(audit: pl.DataFrame, pool_names: list[str], min_per_stratum: int) -> dict[str, float]:
    """The strata, the pairs the floor takes, and the fewest audited pairs of any pool."""
    st = audit.group_by("stratum").agg(pl.col("stratum_size").first())
    per_pool = audit.group_by("pool").len()
    got = dict(zip(per_pool["pool"].to_list(), per_pool["len"].to_list()))
    return {"strata": st.height, "floor": int(sum(min(int(x), min_per_stratum) for x in st["stratum_size"])),
            "min_pool": min(got.get(p, 0) for p in pool_names)}


def record(stats: dict, res: dict, true: dict) -> None:
    """One audit's intervals into ``stats`` [metric]: per system and the audit's means (for the MC error)."""
    for metric in METRICS:
        keys = ("cov", "cov_h", "w", "w_h", "rank_c", "rank_j", "err", "sys", "a_cov", "a_w", "a_covh")
        st = stats.setdefault(metric, {k: [] for k in keys})
        rows = [r for r in res["rows"] if r["metric"] == metric]
        cov = []
        for r in rows:
            t = true[(r["system"], metric)]
            st["sys"].append(r["system"])
            cov.append(r["corrected_lo"] <= t <= r["corrected_hi"])
            st["err"].append(r["corrected"] - t)
            st["cov_h"].append(r["human_only_lo"] <= t <= r["human_only_hi"])
            st["w"].append(r["corrected_hi"] - r["corrected_lo"])
            st["w_h"].append(r["human_only_hi"] - r["human_only_lo"])
        st["cov"].extend(cov)
        st["a_cov"].append(np.mean(cov))
        st["a_covh"].append(np.mean(st["cov_h"][-len(rows):]))
        st["a_w"].append(np.mean(st["w"][-len(rows):]))
        order_true = sorted(SYSTEMS, key=lambda s: -true[(s, metric)])
        st["rank_c"].append([r["system"] for r in sorted(rows, key=lambda r: -r["corrected"])] == order_true)
        st["rank_j"].append([r["system"] for r in sorted(rows, key=lambda r: -r["judge"])] == order_true)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--audits", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--pool", type=int, default=30)
    ap.add_argument("--pools", type=int, choices=sorted(POOLS), default=1,
                    help="candidate pools per query (POOLS: sizes, relevance and judge errors per pool)")
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--min-per-stratum", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--draws", type=int, default=200, help="bootstrap replicates of the nDCG/MAP/MRR imputation")
    ap.add_argument("--every", type=int, default=0, help="also print the figures so far every N audits")
    ap.add_argument("--design", default="label",
                    help="audit strata, comma-separated designs audited on the same benchmarks: label (the judge's "
                         "label), label_rank (x the best rank band of any system), pool_label_rank (x the pool)")
    ap.add_argument("--bands", default="3:4,10:2", help="rank bands as max_rank:weight,... (designs with rank)")
    a = ap.parse_args()
    a.designs = a.design.split(",")
    unknown = [d for d in a.designs if d not in DESIGNS]
    if unknown:
        ap.error(f"--design: unknown {unknown} (of {sorted(DESIGNS)})")
    a.band_list = [{"max_rank": int(m), "weight": float(w)} for m, w in
                   (b.split(":") for b in a.bands.split(",") if b)]
    pool_names = [p[0] for p in POOLS[a.pools]]
    rng = np.random.default_rng(a.seed)
    t0 = time.perf_counter()
    stats: dict[str, dict] = {d: {} for d in a.designs}
    facts: dict[str, list] = {d: [] for d in a.designs}
    for n_done in range(1, a.audits + 1):
        qrels, runs = one_benchmark(rng, a.queries, a.pool, a.pools)
        true = truth(qrels, runs)
        ranks = system_ranks(qrels, runs, a.band_list)
        sample_seed, est_seed = int(rng.integers(2**62)), int(rng.integers(2**31))
        done: dict[frozenset, dict] = {}
        for d in a.designs:
            audit = one_audit(qrels, ranks, a.sample, d, sample_seed, a.min_per_stratum)
            key = frozenset(zip(audit["query_id"].to_list(), audit["image_id"].to_list(),
                                audit["stratum_size"].to_list()))
            if key not in done:  # the same pairs with the same stratum sizes: the same estimate
                done[key] = corrected_scores(qrels.drop("human", "pool"), audit, runs, ks=[10], confidence=0.95,
                                             draws=a.draws, seed=est_seed)
            record(stats[d], done[key], true)
            facts[d].append(sample_facts(audit, pool_names, a.min_per_stratum))
        if n_done == a.audits or (a.every and n_done % a.every == 0):
            _report(stats, facts, a, n_done, time.perf_counter() - t0)


def _se(x) -> float:
    x = np.asarray(x, float)
    return float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")


def _ratio(a, b) -> tuple[float, float]:
    """mean(a) / mean(b) of paired per-audit values and its delta-method standard error."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    r = a.mean() / b.mean()
    return float(r), _se(a - r * b) / float(b.mean())


def _report(stats, facts, a, n_done: int, seconds: float) -> None:
    print(f"{n_done} simulated audits: {a.queries} queries x {a.pool} pairs in {a.pools} pool(s), sample {a.sample}, "
          f"min_per_stratum {a.min_per_stratum}, bands {a.bands}, 3 systems, {a.draws} imputation replicates; "
          f"{seconds:.0f} s; ± = Monte-Carlo standard error over audits")
    first = a.designs[0]
    for d in a.designs:
        f = facts[d]
        print(f"design {d} {DESIGNS[d]}: strata {np.mean([x['strata'] for x in f]):.1f}, pairs taken by the floor "
              f"{np.mean([x['floor'] for x in f]):.1f} of {a.sample}, fewest audited pairs of a pool "
              f"{np.mean([x['min_pool'] for x in f]):.1f} (min {min(x['min_pool'] for x in f)})", flush=True)
        for metric, st in stats[d].items():
            line = (f"  {metric}: coverage corrected {np.mean(st['cov']):.3f} ± {_se(st['a_cov']):.3f}, people-only "
                    f"{np.mean(st['cov_h']):.3f} ± {_se(st['a_covh']):.3f}; mean width corrected {np.mean(st['w']):.4f}"
                    f" ± {_se(st['a_w']):.4f}, people-only {np.mean(st['w_h']):.4f}")
            if d != first:
                r, se = _ratio(st["a_w"], stats[first][metric]["a_w"])
                dc = np.asarray(st["a_cov"]) - np.asarray(stats[first][metric]["a_cov"])
                line += f"; width / {first} {r:.3f} ± {se:.3f}, coverage - {first} {dc.mean():+.3f} ± {_se(dc):.3f}"
            print(line + f"; true ranking recovered: corrected {np.mean(st['rank_c']):.3f}, judge "
                  f"{np.mean(st['rank_j']):.3f}; bias {np.mean(st['err']):+.4f}, "
                  f"rmse {np.sqrt(np.mean(np.square(st['err']))):.4f}", flush=True)
            # per system: coverage, bias, the error's spread and the mean reported half-width over 1.96 of it
            # (1 = the intervals are as wide as a normal 95 % interval of the actual error needs)
            parts = []
            for s in SYSTEMS:
                on = np.asarray(st["sys"]) == s
                e, w = np.asarray(st["err"])[on], np.asarray(st["w"])[on]
                parts.append(f"{s}: coverage {np.mean(np.asarray(st['cov'])[on]):.3f}, bias {e.mean():+.4f}, "
                             f"sd {e.std():.4f}, half-width / (1.96 sd) {w.mean() / 2 / (1.96 * e.std()):.2f}")
            print(f"    {metric} by system: " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    main()

"""Power statement against known truth: is the stated minimum detectable difference detected 80 % of the
time, and does the stated query count deliver 80 %? (docs/trust.md, "Power")

    python benchmarks/trust_power.py [--benchmarks 1000] [--queries 100] [--systems 4] [--sd 0.2]
                                     [--pilot 50] [--delta 0.05] [--seed 1]

Per simulated benchmark, per-query metric values of ``--systems`` systems are drawn as a query effect plus
a system effect plus independent noise (so the per-query differences of two systems have standard deviation
``--sd``):

1. **MDD**: from the evaluated runs (systems 0.02 apart), the MDD of the pair (system 0, system 1) is
   stated as the evaluate stage states it (:func:`benchmaker.evaluate.power.mdd` at the pair's σ_d, the
   per-pair level α / pairs). A fresh benchmark of the same size is then
   drawn in which system 1 is better than system 0 by exactly that stated MDD and every other system
   equals system 0; every pair is tested as the evaluate stage tests them (paired t-test, scipy's
   ``ttest_rel``; p-values corrected with Holm over all pairs, statsmodels). Detection = the pair is
   significant with the right sign.
2. **Query count**: a pilot of ``--pilot`` queries gives σ_d (the median over its system pairs, as
   ``benchmaker power --from`` reads it); :func:`benchmaker.evaluate.power.queries_needed` states the
   queries a difference ``--delta`` needs; a fresh benchmark with that many queries and that true
   difference is tested as above.

Printed: the detection rates (target 0.80 ± 0.05) and the mean stated MDD and query count.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402
from scipy.stats import ttest_rel  # noqa: E402
from statsmodels.stats.multitest import multipletests  # noqa: E402

from benchmaker.evaluate.power import mdd, pair_alpha, queries_needed  # noqa: E402


def draw(rng: np.random.Generator, n: int, means: list[float], sd_diff: float) -> np.ndarray:
    """(n, systems) per-query values: query effect + system mean + noise (differences have sd ``sd_diff``)."""
    u = rng.uniform(0.3, 0.7, size=(n, 1))
    return u + np.asarray(means)[None, :] + rng.normal(0.0, sd_diff / np.sqrt(2), size=(n, len(means)))


def sd_diffs(values: np.ndarray) -> np.ndarray:
    """σ_d of every system pair (ddof 1), as ``pair_table`` measures it from ``per_query.csv``."""
    k = values.shape[1]
    return np.asarray([np.std(values[:, b] - values[:, a], ddof=1) for a, b in itertools.combinations(range(k), 2)])


def detected(values: np.ndarray, alpha: float) -> bool:
    """Whether the evaluate stage's tests find s1 > s0 (paired t, Holm over every pair)."""
    k = values.shape[1]
    pairs = list(itertools.combinations(range(k), 2))
    p = [ttest_rel(values[:, b], values[:, a]).pvalue for a, b in pairs]
    # statsmodels' holm runs gc.collect() on every call; frozen objects are not scanned (as evaluate.metrics)
    gc.freeze()
    adj = multipletests(p, alpha=alpha, method="holm")[1]
    gc.unfreeze()
    i = pairs.index((0, 1))
    return bool(adj[i] <= alpha and values[:, 1].mean() > values[:, 0].mean())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--benchmarks", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--systems", type=int, default=4)
    ap.add_argument("--sd", type=float, default=0.2)
    ap.add_argument("--pilot", type=int, default=50)
    ap.add_argument("--delta", type=float, default=0.05)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    k, t0 = a.systems, time.perf_counter()
    hits_mdd, hits_n, mdds, needs = [], [], [], []
    a_pair = pair_alpha(a.alpha, k * (k - 1) // 2, "holm")
    for _ in range(a.benchmarks):
        evaluated = draw(rng, a.queries, [0.02 * j for j in range(k)], a.sd)
        stated = mdd(float(sd_diffs(evaluated)[0]), a.queries, alpha=a_pair)  # pair (s0, s1), as power.csv
        mdds.append(stated)
        hits_mdd.append(detected(draw(rng, a.queries, [0.0, stated] + [0.0] * (k - 2), a.sd), a.alpha))
        pilot = draw(rng, a.pilot, [0.02 * j for j in range(k)], a.sd)
        n = queries_needed(a.delta, float(np.median(sd_diffs(pilot))), alpha=a_pair)
        needs.append(n)
        hits_n.append(detected(draw(rng, n, [0.0, a.delta] + [0.0] * (k - 2), a.sd), a.alpha))
    print(f"{a.benchmarks} simulated benchmarks: {a.queries} queries, {k} systems ({k * (k - 1) // 2} pairs, Holm, "
          f"alpha {a.alpha}), per-query sd of differences {a.sd}; {time.perf_counter() - t0:.0f} s")
    print(f"stated MDD (mean) {np.mean(mdds):.4f}; detection rate at the stated MDD {np.mean(hits_mdd):.3f}")
    print(f"pilot of {a.pilot} queries -> queries stated for a difference of {a.delta}: mean {np.mean(needs):.0f} "
          f"(range {min(needs)}-{max(needs)}); detection rate with them {np.mean(hits_n):.3f}")


if __name__ == "__main__":
    main()

"""Power of the benchmark: the smallest difference between two evaluated systems it can detect, and the
queries a chosen difference needs (docs/trust.md, "Power").

The evaluate stage compares every two systems with a paired test on the per-query values of a metric and
corrects the p-values across the pairs of that metric (``evaluate.stat_test``, ``evaluate.correction``).
Its power is that of a paired t-test on the per-query differences d of the two systems: with n queries,
standard deviation σ_d and a per-pair level α', the **minimum detectable difference** (MDD) at power
1 − β is the mean difference Δ the test detects with probability 1 − β (Sakai, "Topic set size design",
IRJ 2016; statsmodels' :class:`~statsmodels.stats.power.TTestPower` solves the noncentral-t equation,
nothing is hand-written). α' is α divided by the number of pairs the report compares (Bonferroni): Holm
tests the smallest p-value at exactly that level, so a single real difference among otherwise equal
systems is detected with the stated power under Holm too; with several real differences Holm (and
Benjamini–Hochberg) test later pairs at larger levels, so the stated MDD is conservative for them.
With ``correction: none`` α' = α.

σ_d is taken from the evaluated runs (each pair of systems has its own; the card states the median and
the range over pairs), from a pilot's ``per_query.csv``, or from an earlier benchmark's published
``evaluate/trust.json`` (:func:`sd_from`), which records σ_d per scope and metric.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..errors import UserError
from ..settings_schema import default

__all__ = ["HEADLINE_PREFIXES", "TYPICAL_SD", "check_levels", "headline_metrics", "mdd", "pair_alpha", "pair_table",
           "power_doc", "queries_needed", "sd_from"]

# the metrics the significance table tests (evaluate.stage: nDCG@k, MAP, MRR): the card's headline metrics
HEADLINE_PREFIXES = ("ndcg@", "map", "mrr")
# σ_d of nDCG@10 differences reported for TREC-style collections (docs/trust.md): used only to say what a
# benchmark with fewer than two systems would detect, and always labelled as an assumption
TYPICAL_SD = (0.15, 0.25)


def pair_alpha(alpha: float, pairs: int, correction: str) -> float:
    """The per-pair level the corrected test holds for its most significant pair: α / pairs (Bonferroni;
    Holm's first step, Benjamini–Hochberg's for one real difference; Tukey's HSD is close to it), or α
    for ``none``."""
    if correction == "none" or pairs <= 1:
        return float(alpha)
    return float(alpha) / int(pairs)


def _quiet_solve(**kw) -> float:
    """statsmodels' ``TTestPower.solve_power`` (two-sided), its convergence warnings silenced: the callers
    check the answer with :func:`_power` and solve again where it is off (NaN, or a root finder's bound)."""
    from statsmodels.stats.power import TTestPower
    from statsmodels.tools.sm_exceptions import ConvergenceWarning  # its import puts an "always" filter first

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        try:
            return float(np.asarray(TTestPower().solve_power(alternative="two-sided", **kw)).item())
        except (ValueError, ArithmeticError):
            return float("nan")


def _power(es: float, n: int, alpha: float) -> float:
    """The power of a two-sided paired t-test on ``n`` queries at level ``alpha`` for the standardised
    difference ``es``: statsmodels' noncentral t. Where scipy's noncentral t gives NaN (a large noncentrality
    on few degrees of freedom: e.g. an effect of 8 on 2 queries) the same probability is taken as the
    expectation, over the chi-square of the variance, of the normal tails (T = (Z + λ) / sqrt(V / df))."""
    from scipy import stats
    from statsmodels.stats.power import TTestPower

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = float(TTestPower().power(effect_size=es, nobs=n, alpha=alpha, alternative="two-sided"))
    if math.isfinite(p):
        return p
    df, lam = n - 1, es * math.sqrt(n)
    c = float(stats.t.isf(alpha / 2, df))
    return float(stats.chi2(df).expect(lambda v: stats.norm.sf(c * math.sqrt(v / df) - lam)
                                       + stats.norm.cdf(-c * math.sqrt(v / df) - lam)))


@functools.lru_cache(maxsize=1024)
def _effect_size(n: int, alpha: float, power: float) -> float:
    """The standardised difference (Δ / σ_d) a two-sided paired t-test on ``n`` queries detects: statsmodels'
    solution where it holds; else (NaN, or its root finder stopped at a bound: few queries at a small
    level) the root of :func:`_power` by scipy's ``brentq``."""
    from scipy.optimize import brentq

    es = _quiet_solve(effect_size=None, nobs=n, alpha=alpha, power=power)
    if math.isfinite(es) and abs(_power(es, n, alpha) - power) < 1e-4:
        return es
    hi = 1.0
    while _power(hi, n, alpha) < power:
        hi *= 2
    return float(brentq(lambda e: _power(e, n, alpha) - power, 0.0, hi, xtol=1e-10))


def check_levels(alpha: float, power: float) -> None:
    """A level and a power must lie strictly between 0 and 1 (a clear error, not a solver's NaN)."""
    for name, v in (("alpha", alpha), ("power", power)):
        if not (math.isfinite(v) and 0 < v < 1):
            raise UserError(f"{name} must be between 0 and 1, exclusive (got {v})")


def mdd(sd: float, n: int, *, alpha: float, power: float = default("evaluate.power.power")) -> float | None:
    """The smallest mean difference a two-sided paired t-test on ``n`` queries detects with ``power`` at
    level ``alpha`` when the per-query differences have standard deviation ``sd`` (None below 2 queries)."""
    if n < 2 or not math.isfinite(sd):
        return None
    if sd == 0:
        return 0.0
    return _effect_size(int(n), float(alpha), float(power)) * float(sd)


def queries_needed(delta: float, sd: float, *, alpha: float,
                   power: float = default("evaluate.power.power")) -> int:
    """Queries a two-sided paired t-test needs to detect a mean difference ``delta`` with ``power`` at
    level ``alpha`` when the per-query differences have standard deviation ``sd`` (rounded up; at least 2).
    statsmodels' solution where it holds, else the smallest n whose :func:`_power` reaches ``power``."""
    if not (math.isfinite(delta) and delta > 0):
        raise UserError(f"the difference to detect must be positive (got {delta})")
    if not (math.isfinite(sd) and sd >= 0):
        raise UserError(f"the standard deviation of the per-query differences must be a number >= 0 (got {sd})")
    check_levels(alpha, power)
    if sd == 0:
        return 2
    es = float(delta) / float(sd)
    n = _quiet_solve(effect_size=es, nobs=None, alpha=float(alpha), power=float(power))
    if math.isfinite(n):
        got = max(2, int(math.ceil(n - 1e-9)))
        if _power(es, got, alpha) >= power - 1e-6 and (got == 2 or _power(es, got - 1, alpha) < power + 1e-6):
            return got
    if _power(es, 2, alpha) >= power:
        return 2
    lo, hi = 2, 4  # power(lo) < power <= power(hi): the power of a fixed difference grows with n
    while _power(es, hi, alpha) < power:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _power(es, mid, alpha) < power else (lo, mid)
    return hi


def headline_metrics(columns: Sequence[str]) -> list[str]:
    """The per-query columns the significance table tests, in the evaluate stage's order."""
    nd = [c for c in columns if c.startswith("ndcg@")]
    return nd + [c for c in ("map", "mrr") if c in columns]


def pair_table(per_query: pl.DataFrame, *, alpha: float, correction: str,
               power: float = default("evaluate.power.power")) -> pl.DataFrame:
    """One row per (scope, metric, system pair): queries, mean and σ of the per-query differences
    (b − a, the queries both scored), the per-pair level and the MDD."""
    schema = {"scope": pl.String, "metric": pl.String, "system_a": pl.String, "system_b": pl.String,
              "queries": pl.Int64, "mean_diff": pl.Float64, "sd_diff": pl.Float64, "pairs_compared": pl.Int64,
              "alpha_pair": pl.Float64, "mdd": pl.Float64}
    rows = []
    if not per_query.height:
        return pl.DataFrame(schema=schema)
    metrics = headline_metrics(per_query.columns)
    for (scope,), g in per_query.sort("scope", "system", "query_id").group_by("scope", maintain_order=True):
        names = sorted(g["system"].unique().to_list())
        pairs = list(itertools.combinations(names, 2))
        a_pair = pair_alpha(alpha, len(pairs), correction)
        wide = {n: g.filter(pl.col("system") == n) for n in names}
        for m in metrics:
            for a, b in pairs:
                j = wide[a].select("query_id", pl.col(m).cast(pl.Float64).alias("a")).join(
                    wide[b].select("query_id", pl.col(m).cast(pl.Float64).alias("b")), on="query_id").drop_nulls()
                d = (j["b"] - j["a"]).to_numpy()
                sd = float(np.std(d, ddof=1)) if len(d) >= 2 else float("nan")
                rows.append({"scope": scope, "metric": m, "system_a": a, "system_b": b, "queries": len(d),
                             "mean_diff": round(float(d.mean()), 6) if len(d) else None,
                             "sd_diff": round(sd, 6) if math.isfinite(sd) else None, "pairs_compared": len(pairs),
                             "alpha_pair": a_pair,
                             "mdd": _round(mdd(sd, len(d), alpha=a_pair, power=power))})
    return pl.DataFrame(rows, schema=schema)


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def _summary_rows(table: pl.DataFrame, alpha: float, power: float, deltas: Sequence[float]) -> list[dict]:
    out = []
    for (scope, metric), g in table.group_by("scope", "metric", maintain_order=True):
        g = g.filter(pl.col("sd_diff").is_not_null())
        if not g.height:
            continue
        sds = np.sort(g["sd_diff"].to_numpy())
        n = int(g["queries"].median())
        a_pair = float(g["alpha_pair"][0])
        sd_med = float(np.median(sds))
        out.append({"scope": scope, "metric": metric, "queries": n, "systems": len(set(g["system_a"].to_list())
                                                                                 | set(g["system_b"].to_list())),
                    "pairs_compared": int(g["pairs_compared"][0]), "alpha_pair": a_pair,
                    "sd_diff_median": round(sd_med, 6), "sd_diff_min": round(float(sds[0]), 6),
                    "sd_diff_max": round(float(sds[-1]), 6),
                    "mdd": _round(mdd(sd_med, n, alpha=a_pair, power=power)),
                    "mdd_min": _round(mdd(float(sds[0]), n, alpha=a_pair, power=power)),
                    "mdd_max": _round(mdd(float(sds[-1]), n, alpha=a_pair, power=power)),
                    "queries_needed": {f"{d:g}": queries_needed(float(d), sd_med, alpha=a_pair, power=power)
                                       for d in deltas}})
    return out


def power_doc(per_query: pl.DataFrame, *, alpha: float, correction: str, stat_test: str,
              settings: Mapping[str, Any] | None = None, queries: int | None = None) -> tuple[dict, pl.DataFrame]:
    """The ``power`` part of ``evaluate/trust.json`` and the per-pair table (``evaluate/power.csv``)."""
    from ..settings_schema import filled

    s = filled("evaluate.power", settings)
    pw, deltas = float(s["power"]), [float(d) for d in s["deltas"]]
    table = pair_table(per_query, alpha=alpha, correction=correction, power=pw)
    systems = sorted(per_query["system"].unique().to_list()) if per_query.height else []
    doc: dict[str, Any] = {"alpha": alpha, "power": pw, "correction": correction, "stat_test": stat_test,
                           "test_model": "two-sided paired t-test (statsmodels TTestPower)",
                           "alpha_pair_rule": "alpha / pairs compared (Bonferroni; Holm's first step)"
                           if correction != "none" else "alpha (no correction)",
                           "systems": len(systems), "deltas": deltas}
    if len(systems) < 2:
        n = int(queries or (per_query["query_id"].n_unique() if per_query.height else 0))
        doc.update(status="fewer than two systems", queries=n, rows=[],
                   assumed={f"{sd:g}": _round(mdd(sd, n, alpha=alpha, power=pw)) for sd in TYPICAL_SD},
                   needs="two or more evaluated systems (evaluate.systems): the per-query differences between two "
                         "systems give the standard deviation the power rests on")
        return doc, table
    doc.update(status="ok", rows=_summary_rows(table, alpha, pw, deltas))
    return doc, table


def sd_from(source: str | Path, *, metric: str, scope: str = "pool") -> tuple[float, int, str]:
    """σ_d (the median over system pairs), the query count and a description, from an earlier or pilot
    benchmark: a results folder, its ``evaluate/`` folder, a published ``hf_dataset`` folder, a
    ``trust.json`` or a ``per_query.csv``."""
    p = Path(source)
    cands = [p] if p.is_file() else [p / "trust.json", p / "evaluate" / "trust.json", p / "per_query.csv",
                                       p / "evaluate" / "per_query.csv"]
    found = next((c for c in cands if c.is_file()), None)
    if found is None:
        raise UserError(f"{source}: no evaluate/trust.json or per_query.csv there (a results folder, its evaluate/ "
                        f"folder, a published hf_dataset folder, or one of those files)")
    if found.suffix == ".json":
        doc = json.loads(found.read_text(encoding="utf-8"))
        rows = (doc.get("power") or {}).get("rows") or []
        row = next((r for r in rows if r["metric"] == metric and r["scope"] == scope), None)
        if row is None:
            have = sorted({f"{r['scope']}/{r['metric']}" for r in rows}) or "none: fewer than two systems"
            raise UserError(f"{found}: no power row for scope {scope!r}, metric {metric!r} (it has: {have})")
        return float(row["sd_diff_median"]), int(row["queries"]), f"{found} ({row['pairs_compared']} system pairs)"
    pq = pl.read_csv(found)
    if metric not in pq.columns:
        have = [c for c in pq.columns if "@" in c or c in ("map", "mrr")]
        raise UserError(f"{found}: no column {metric!r} (it has: {have})")
    table = pair_table(pq.filter(pl.col("scope") == scope), alpha=0.05, correction="none")
    table = table.filter((pl.col("metric") == metric) & pl.col("sd_diff").is_not_null())
    if not table.height:
        raise UserError(f"{found}: fewer than two systems scored scope {scope!r}: no per-query differences")
    return (float(table["sd_diff"].median()), int(table["queries"].median()),
            f"{found} ({table.height} system pairs)")

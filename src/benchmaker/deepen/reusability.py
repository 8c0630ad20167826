"""Leave-one-system-out (Zobel, SIGIR 1998): is the deepened collection fair to a system that did not
contribute to the pools?

For each deepen system S: remove from the deepened qrels the pairs that *only* S brought in (its
``deepen_systems`` list is exactly ``[S]``; pairs another system also ranked in its top k stay, and so
do the planner's pools), score S again on what is left (the other systems keep their scores on the
full deepened qrels), and compare: S's score change, its rank before and after, and Kendall's tau
(tau-b, scipy) between the ranking of all systems on the full qrels and the ranking with S left out.
Voorhees's usual bar for a reusable collection is tau >= 0.9; with few systems tau is coarse, so the
number of systems is reported beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from ..evaluate.metrics import evaluate_scope

__all__ = ["TAU_BAR", "only_contributed_by", "kendall_tau", "leave_one_out"]

TAU_BAR = 0.9


def only_contributed_by(qrels: pl.DataFrame, system: str) -> pl.DataFrame:
    """The deepened pairs that ``system`` alone brought in (``deepen_systems == [system]``)."""
    return qrels.filter(pl.col("deepened") & (pl.col("deepen_systems").list.len() == 1)
                        & (pl.col("deepen_systems").list.first() == system))


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Kendall's tau-b between two score vectors of the same systems (None below two systems or when a
    vector is constant)."""
    if len(a) < 2:
        return None
    from scipy.stats import kendalltau

    t = kendalltau(list(a), list(b)).statistic
    return None if t != t else float(t)   # NaN: a constant vector


def _ranks(scores: Mapping[str, float]) -> dict[str, int]:
    """1 = best; ties share the better rank (competition ranking), then by name for the order."""
    out = {}
    for name, v in scores.items():
        out[name] = 1 + sum(1 for w in scores.values() if w > v)
    return out


def leave_one_out(qrels: pl.DataFrame, runs: Mapping[str, pl.DataFrame], metric: str, queries: Sequence[str],
                  systems: Sequence[str], per_query: pl.DataFrame | None = None) -> tuple[pl.DataFrame, dict]:
    """(one row per left-out system, totals).

    ``qrels``: the deepened qrels (deepened_qrels kind); ``runs``: every ranked system's corpus view (the
    ranking the leaderboard scores), including systems that did not deepen; ``metric``: a ranx metric;
    ``queries``: the evaluated queries (those with a relevant image in the deepened qrels: a query whose
    only relevant images are removed then scores 0 for S, as it would for a newcomer); ``systems``: the
    systems left out in turn (the deepen systems); ``per_query``: the full scores already computed
    (``system, query_id, <metric>`` over ``queries``: the deepened leaderboard's per_query.csv, corpus
    scope), else computed here. Only the queries that lose pairs are scored again."""
    names = sorted(runs)
    n_q = len(queries)
    if per_query is None:
        per_query = pl.concat([evaluate_scope(qrels, runs[n], [metric], n, queries).select(
            pl.lit(n).alias("system"), "query_id", metric) for n in names])
    pq = {n: dict(per_query.filter(pl.col("system") == n).select("query_id", metric).iter_rows()) for n in names}
    full = {n: (sum(pq[n].get(x, 0.0) for x in queries) / n_q) if n_q else 0.0 for n in names}
    rank_full = _ranks(full)
    rows = []
    for s in systems:
        removed = only_contributed_by(qrels, s)
        left = dict(full)
        if removed.height:
            hit = sorted(set(removed["query_id"].to_list()) & set(queries))
            sub = qrels.filter(pl.col("query_id").is_in(hit)).join(
                removed.select("query_id", "image_id"), on=["query_id", "image_id"], how="anti")
            new = dict(evaluate_scope(sub, runs[s], [metric], s, hit).select("query_id", metric).iter_rows()) \
                if hit else {}
            left[s] = sum(new.get(x, pq[s].get(x, 0.0)) for x in queries) / n_q
        rank_left = _ranks(left)
        tau = kendall_tau([full[n] for n in names], [left[n] for n in names])
        rows.append({"system": s, "metric": metric, "pairs_only_it_contributed": removed.height,
                     "relevant_only_it_contributed": removed.filter(pl.col("relevance_label") > 0).height,
                     "score_full": full[s], "score_left_out": left[s], "score_change": left[s] - full[s],
                     "rank_full": rank_full[s], "rank_left_out": rank_left[s], "kendall_tau": tau,
                     "systems_ranked": len(names)})
    schema = {"system": pl.String, "metric": pl.String, "pairs_only_it_contributed": pl.Int64,
              "relevant_only_it_contributed": pl.Int64, "score_full": pl.Float64, "score_left_out": pl.Float64,
              "score_change": pl.Float64, "rank_full": pl.Int64, "rank_left_out": pl.Int64,
              "kendall_tau": pl.Float64, "systems_ranked": pl.Int64}
    df = pl.DataFrame(rows, schema=schema)
    taus = [t for t in df["kendall_tau"].to_list() if t is not None]
    totals = {"metric": metric, "systems_ranked": len(names), "systems_left_out": len(rows),
              "min_kendall_tau": min(taus) if taus else None,
              "max_abs_score_change": max((abs(x) for x in df["score_change"].to_list()), default=None),
              "tau_bar": TAU_BAR, "reusable": (min(taus) >= TAU_BAR) if taus else None,
              "full_scores": full}
    return df, totals



"""Rule ``deepen``: the deepened qrels, every run scored on them, what deepening changed, and
leave-one-system-out (docs/deepen.md).

* ``deepen/qrels.jsonl`` (kind ``deepened_qrels``): every row of qrels.jsonl (``deepened`` false) and
  every pair the deepen jobs labelled (``deepened`` true, ``pool`` ``deepen``) with its provenance:
  ``deepen_system`` and ``deepen_depth`` (the system that ranked it highest, at which depth) and
  ``deepen_systems`` (every deepen system whose top k holds it).
* ``deepen/evaluate/``: the evaluate aggregate (:func:`benchmaker.evaluate.stage.run`, unchanged) on
  the deepened qrels: the same leaderboard files as ``evaluate/``.
* ``deepen/report.csv`` / ``report.json``: per system judged@k before and after, pairs added, their
  relevant share, the main metric before and after, the cost; ``deepen/leave_one_out.csv``
  (:mod:`.reusability`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ..formats import read_table, write_table
from ..io import atomic_write_text
from ..logs import get_logger
from ..settings_schema import default, filled
from .pairs import assign, group_extras, read_group_members, run_paths, system_tops

__all__ = ["run", "deepened_qrels", "REPORT_COLUMNS"]

log = get_logger("deepen")

REPORT_COLUMNS = ("system", "deepened", "k", "queries", "judged_before", "judged_after", "pairs_unjudged_before",
                  "pairs_added", "relevant_added", "relevant_share", "metric", "score_before", "score_after",
                  "score_change", "cost_usd", "requests")


def _as_list(x: Sequence[str] | str) -> list[str]:
    return [x] if isinstance(x, str) else list(x)


def deepened_qrels(qrels: pl.DataFrame, labels: pl.DataFrame, contributors: pl.DataFrame) -> pl.DataFrame:
    """qrels rows (``deepened`` false) then, per query, the new pairs in depth order; ``contributors``:
    query_id, image_id, systems (every deepen system whose top k holds the pair)."""
    qrels = qrels.with_columns(pl.lit(False).alias("deepened"), pl.lit(None, pl.String).alias("deepen_system"),
                               pl.lit(None, pl.Int64).alias("deepen_depth"),
                               pl.lit([], pl.List(pl.String)).alias("deepen_systems"))
    per_q = qrels.select("query_id", "query_text", "seed_not_relevant").unique("query_id", keep="first")
    new = (
        labels.join(per_q, on="query_id", how="inner")
        .join(contributors.select("query_id", "image_id", pl.col("systems").alias("deepen_systems")),
              on=["query_id", "image_id"], how="left")
        .with_columns(pl.lit("deepen").alias("pool"), pl.lit(False).alias("is_seed"), pl.lit(True).alias("deepened"),
                      pl.col("system").alias("deepen_system"), pl.col("depth").cast(pl.Int64).alias("deepen_depth"),
                      pl.col("deepen_systems").fill_null(pl.concat_list(pl.col("system"))))
        .sort(["query_id", "deepen_depth", "image_id"])
    )
    cols = ["query_id", "query_text", "image_id", "relevance_label", "pool", "is_seed", "seed_not_relevant",
            "judge", "deepened", "deepen_system", "deepen_depth", "deepen_systems"]
    if "rationale" in qrels.columns or "rationale" in new.columns:
        cols.append("rationale")
    order = qrels.select("query_id").unique(keep="first", maintain_order=True).with_row_index("_q")
    both = pl.concat([qrels.with_row_index("_r"), new.with_row_index("_r", offset=qrels.height)],
                     how="diagonal_relaxed")
    return both.join(order, on="query_id", how="left").sort(["_q", "_r"]).select(cols)


def _check_one_per_group(qrels: pl.DataFrame, labels: pl.DataFrame, groups: pl.DataFrame) -> None:
    """The deepen labels add no second member of a duplicate group to a query (docs/deepen.md,
    "Duplicate groups count once"): labels written by another assignment (an older version of deepen_system, or
    images.jsonl regrouped since) are an error naming the fix, never scored twice silently."""
    pairs = pl.concat([qrels.select("query_id", "image_id"), labels.select("query_id", "image_id")])
    extra = group_extras(pairs, groups) - group_extras(qrels.select("query_id", "image_id"), groups)
    if extra > 0:
        raise ValueError(f"deepen: the deepen labels add {extra} pair(s) whose duplicate group already has a member "
                         "in the query (labels from an older assignment); rerun the deepen_system jobs "
                         "(snakemake --forcerun deepen_system)")


def _board_scores(path: str | None, metric: str) -> dict[str, float]:
    if not path or not Path(path).is_file() or not Path(path).stat().st_size:
        return {}
    b = pl.read_csv(path)
    if metric not in b.columns:
        return {}
    b = b.filter(pl.col("scope") == "corpus")
    return {s: (None if v is None else float(v)) for s, v in b.select("system", metric).iter_rows()}


def _costs(paths: Sequence[str]) -> dict[str, tuple[float, int]]:
    out = {}
    for p in paths:
        usd, n = 0.0, 0
        if Path(p).is_file():
            for ln in Path(p).read_text(encoding="utf-8").splitlines():
                if ln.strip():
                    r = json.loads(ln)
                    usd += float(r.get("cost_usd") or 0.0)
                    n += 0 if r.get("cached") else 1
        out[Path(p).stem] = (round(usd, 6), n)
    return out


def _read_labels(labels: Sequence[str] | str, columns: Mapping[str, str] | None) -> pl.DataFrame:
    """The deepen jobs' labels, together; an error when two jobs labelled one pair."""
    lab = [read_table("deepen_labels", p, columns=columns) for p in _as_list(labels)]
    lab_df = pl.concat(lab, how="diagonal_relaxed") if lab else pl.DataFrame(
        schema={"query_id": pl.String, "image_id": pl.String, "relevance_label": pl.Int64, "judge": pl.String,
                "system": pl.String, "depth": pl.Int64})
    dup = lab_df.group_by("query_id", "image_id").len().filter(pl.col("len") > 1)
    if dup.height:
        raise ValueError(f"deepen: pair ({dup['query_id'][0]}, {dup['image_id'][0]}) labelled by two deepen jobs")
    return lab_df


def _system_rows(ranked: list[str], systems: list[str], lab_df: pl.DataFrame, q: pl.DataFrame,
                 deep_read: pl.DataFrame, paths: Mapping[str, str], views: Mapping[str, Any], k: int,
                 all_q: list[str], metric: str, before_scores: Mapping[str, float], after_scores: Mapping[str, float],
                 cost_of: Mapping[str, tuple[float, int]]) -> pl.DataFrame:
    """report.csv: per ranked system, the judged share at k before and after, the pairs and relevant
    pairs it brought, its score before and after and what its deepening cost."""
    from ..evaluate import metrics

    rows = []
    for n in ranked:
        mine = lab_df.filter(pl.col("system") == n)
        holes = system_tops({n: paths[n]}, k, all_q).join(q.select("query_id", "image_id"),
                                                          on=["query_id", "image_id"], how="anti").height
        jb = float(metrics.judged_at(views[n], q, k, all_q)[f"judged@{k}"].mean() or 0.0)
        ja = float(metrics.judged_at(views[n], deep_read, k, all_q)[f"judged@{k}"].mean() or 0.0)
        rel = mine.filter(pl.col("relevance_label") > 0).height
        sb, sa = before_scores.get(n), after_scores.get(n)
        usd, nreq = cost_of.get(n, (0.0, 0))
        rows.append({"system": n, "deepened": n in systems, "k": k, "queries": len(all_q), "judged_before": jb,
                     "judged_after": ja, "pairs_unjudged_before": holes, "pairs_added": mine.height,
                     "relevant_added": rel, "relevant_share": (rel / mine.height) if mine.height else None,
                     "metric": metric, "score_before": sb, "score_after": sa,
                     "score_change": (sa - sb) if sa is not None and sb is not None else None,
                     "cost_usd": usd, "requests": nreq})
    schema = {"system": pl.String, "deepened": pl.Boolean, "k": pl.Int64, "queries": pl.Int64,
              "judged_before": pl.Float64, "judged_after": pl.Float64, "pairs_unjudged_before": pl.Int64,
              "pairs_added": pl.Int64, "relevant_added": pl.Int64, "relevant_share": pl.Float64,
              "metric": pl.String, "score_before": pl.Float64, "score_after": pl.Float64,
              "score_change": pl.Float64, "cost_usd": pl.Float64, "requests": pl.Int64}
    return pl.DataFrame(rows, schema=schema)


def _leave_one_out(per_query: str, out: str, deep_read: pl.DataFrame, views: Mapping[str, Any], metric: str,
                   queries: list[str], systems: list[str], ranked: list[str]) -> tuple[pl.DataFrame, dict]:
    """The reusability check (:mod:`.reusability`): each deepened system left out of the pool, written to
    ``out``; its table and totals."""
    from .reusability import leave_one_out as loo

    t_loo = time.perf_counter()
    # the full per-query scores are the deepened leaderboard's (corpus scope): only left-out queries are re-scored
    pq = pl.read_csv(per_query, schema_overrides={"query_id": pl.String, "system": pl.String, "scope": pl.String})
    pq = pq.filter(pl.col("scope") == "corpus").select("system", "query_id", metric) if metric in pq.columns else None
    loo_df, loo_tot = loo(deep_read, views, metric, queries, [s for s in systems if s in views], per_query=pq) \
        if queries else (pl.DataFrame(schema={"system": pl.String}), {"metric": metric, "systems_ranked": len(ranked)})
    log.info("deepen: leave-one-out in %.1f s", time.perf_counter() - t_loo)
    loo_df.write_csv(out)
    return loo_df, loo_tot


def run(*, qrels: str, labels: Sequence[str] | str, runs: Sequence[str] | str, metas: Sequence[str] | str,
        images: str, annotations: str, deepened: str, report_json: str, report_csv: str, leave_one_out: str,
        leaderboard_csv: str, leaderboard_json: str, drilldown: str, significance_csv: str, per_query: str,
        sage_leaderboard: str, sage: Sequence[str] | str = (), image_embeddings: Sequence[str] | str = (),
        costs: Sequence[str] | str = (), before: str | None = None, settings: Mapping[str, Any] | None = None,
        deepen: Mapping[str, Any], facets: Mapping[str, Any] | None = None,
        columns: Mapping[str, str] | None = None, numba_cache_dir: str | None = None, version: str | None = None,
        threads: int = 1) -> dict:
    """Stage ``deepen`` (the merge): see the module docstring."""
    from ..evaluate import stage
    from ..evaluate.runs import corpus_view, read_run

    stage.set_numba_cache(numba_cache_dir)
    t0 = time.perf_counter()
    d = filled("deepen", deepen)
    systems = list(d["systems"])
    k = int(d["k"])
    q = read_table("qrels", qrels, columns=columns)
    lab_df = _read_labels(labels, columns)
    paths = run_paths(runs, [Path(p).stem for p in _as_list(runs)])
    groups = read_group_members(images, columns=columns)
    tops = system_tops({s: paths[s] for s in systems}, k, q["query_id"].unique().to_list())
    contributors = assign(tops, q, groups=groups)
    skipped = assign(tops, q).height - contributors.height    # holes a judged or earlier group member stands for
    _check_one_per_group(q, lab_df, groups)
    deep = deepened_qrels(q, lab_df, contributors)
    write_table(deep, "deepened_qrels", deepened, columns=columns)

    log.info("deepen: deepened qrels (%d new pairs) in %.1f s", lab_df.height, time.perf_counter() - t0)
    # every run on the deepened qrels: the evaluate aggregate, unchanged
    t_eval = time.perf_counter()
    doc = stage.run(qrels=deepened, images=images, annotations=annotations, runs=runs, metas=metas,
                      image_embeddings=image_embeddings, leaderboard_csv=leaderboard_csv,
                      leaderboard_json=leaderboard_json, drilldown=drilldown, significance_csv=significance_csv,
                      per_query=per_query, settings=settings, facets=facets, columns=columns,
                      numba_cache_dir=numba_cache_dir, version=version, threads=threads,
                      sage_leaderboard=sage_leaderboard, sage=sage)
    log.info("deepen: evaluate aggregate on the deepened qrels in %.1f s", time.perf_counter() - t_eval)
    ks = [int(x) for x in filled("evaluate", settings)["k"]]
    metric = f"ndcg@{ks[0]}"

    deep_read = read_table("deepened_qrels", deepened, columns=columns)
    has_pos = deep_read.group_by("query_id").agg((pl.col("relevance_label") > 0).any().alias("p"))
    queries = has_pos.filter(pl.col("p"))["query_id"].sort().to_list()
    all_q = q["query_id"].unique().sort().to_list()
    metas_of = {}
    for p in _as_list(metas):
        m = json.loads(Path(p).read_text())
        metas_of[m["name"]] = m
    ranked = sorted(n for n, m in metas_of.items() if "corpus" in (m.get("scopes") or []))
    depth = default("evaluate.depth")       # a run record without its depth: the schema's
    views = {n: corpus_view(read_run(paths[n]), int(metas_of[n].get("depth") or depth)) for n in ranked}
    cost_of = _costs(_as_list(costs))
    rep = _system_rows(ranked, systems, lab_df, q, deep_read, paths, views, k, all_q, metric,
                       _board_scores(before, metric), _board_scores(leaderboard_csv, metric), cost_of)
    Path(report_csv).parent.mkdir(parents=True, exist_ok=True)
    rep.write_csv(report_csv)
    loo_df, loo_tot = _leave_one_out(per_query, leave_one_out, deep_read, views, metric, queries, systems, ranked)
    n_new = lab_df.height
    n_rel = lab_df.filter(pl.col("relevance_label") > 0).height
    report = {
        "k": k, "systems": systems, "max_pairs": d.get("max_pairs"), "max_usd": d.get("max_usd"),
        "metric": metric, "queries": len(all_q), "queries_evaluated": doc.get("queries_evaluated"),
        "pairs_added": n_new, "relevant_added": n_rel, "relevant_share": (n_rel / n_new) if n_new else None,
        "cost_usd": round(sum(c for c, _ in cost_of.values()), 6),
        # a duplicate group counts once per query (docs/deepen.md): holes not judged for it, and the
        # members beyond the first of a group in a query of the deepened qrels (0 unless the planner's
        # pools hold several: plan.one_per_duplicate_group false)
        "duplicate_members_skipped": skipped,
        "duplicate_members_in_qrels": group_extras(deep_read.select("query_id", "image_id"), groups),
        "per_system": rep.to_dicts(), "leave_one_out": {**loo_tot, "per_system": loo_df.to_dicts()},
        "version": version,
    }
    atomic_write_text(report_json, json.dumps(report, indent=2, default=str) + "\n")
    log.info("deepen: %d new pairs (%d relevant) from %d systems; min leave-one-out tau %s over %d systems",
             n_new, n_rel, len(systems), loo_tot.get("min_kendall_tau"), loo_tot.get("systems_ranked", 0))
    return report

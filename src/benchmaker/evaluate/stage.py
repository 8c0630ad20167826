"""Stage ``evaluate``: every system's run scored with ranx (:mod:`.metrics`), drill-downs, significance,
leaderboard.

Metrics (:mod:`.metrics`) are ranx's: ``ndcg@k``, ``map``, ``mrr``, ``precision@k``, ``recall@k``,
``hit_rate@k`` for each configured cutoff k, ``diversity@k`` and, for the corpus scopes, ``judged@k``.

Scopes (docs/evaluate.md): ``pool`` ranks only each query's judged pool (what the Sage evaluator
does); ``corpus`` ranks the whole benchmark corpus, cut at the system's depth, unjudged images
counted as non-relevant (trec_eval's convention; a lower bound); ``condensed`` is the corpus ranking
with the unjudged images removed before scoring (Sakai 2007); ``exported`` ranks the exported images only
(every judged pool's images, each once: the corpus that mteb, BEIR and trec_eval score on the export) for
every query of the export, as those tools score it. Queries without any relevant image are left out of the
other scopes (reported as ``queries_without_positive``).

Beside the ranx scopes, the ``sage`` view (:mod:`.sage`) scores every corpus-ranked run the way the Sage
team's evaluator (``imsearch_eval``) reports it: ``sage/<system>.csv`` with the columns of its
``query_eval_metrics.csv`` and ``sage_leaderboard.csv`` with their means.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..formats import FacetModel, read_table
from ..io import atomic_write_text, file_sha256
from ..logs import get_logger
from ..settings_schema import filled
from . import sage as sage_mod
from .leakage import system_rows as seed_leakage
from .leakage import write as write_leakage
from .metrics import (
    difficulty_of,
    diversity,
    evaluate_scope,
    judged_at,
    ranx_metrics,
    ranx_scores,
    significance,
    to_ranx_qrels,
)
from .runs import RanxIds, corpus_view, exported_view, pool_view, read_run, set_numba_cache
from .scopes import SCOPES

__all__ = ["LEADERBOARD_COLUMNS", "SCOPES", "query_facets", "run"]

log = get_logger("evaluate")
NEGATIVE_POOLS = ("neutral", "hard", "nearmiss", "easy", "imported")  # imported: paths.pools_file


def query_facets(qrels: pl.DataFrame, annotations: pl.DataFrame, names: Sequence[str]) -> pl.DataFrame:
    """The facet values of each query's (first) seed image: ``query_id`` + one string column per facet."""
    seeds = (qrels.filter(pl.col("is_seed")).sort("query_id", "image_id").unique("query_id", keep="first")
             .select("query_id", "image_id"))
    cols = [n for n in names if n in annotations.columns]
    return seeds.join(annotations.select("image_id", *[pl.col(c).cast(pl.String) for c in cols]),
                      on="image_id", how="left").drop("image_id")


def _load_embeddings(paths: Sequence[str], columns) -> tuple[dict[str, int], np.ndarray]:
    from ..similarity.embed import read_embeddings

    frames = [read_embeddings(p, columns=columns)[0].select("image_id", "embedding") for p in paths]
    frames = [f for f in frames if f.height]
    if not frames:
        return {}, np.zeros((0, 1), np.float32)
    df = pl.concat(frames).unique("image_id", keep="first")
    return {i: n for n, i in enumerate(df["image_id"].to_list())}, df["embedding"].to_numpy().astype(np.float32)


LEADERBOARD_COLUMNS = ("system", "kind", "scope", "sees_judge_text", "queries")


def _mean(df: pl.DataFrame, cols: Sequence[str]) -> dict[str, float | None]:
    return {c: (None if df[c].drop_nulls().len() == 0 else round(float(df[c].drop_nulls().mean()), 6))
            for c in cols}


SAGE_BOARD_COLUMNS = ("system", "kind", "sees_judge_text", "queries", "complete_queries", "limit", "score_column")


def _write_csv(df: pl.DataFrame, path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    df.write_csv(path)


def _sage_system(full: pl.DataFrame, q_all: pl.DataFrame, meta: Mapping[str, Any], depth: int, cfg: Mapping[str, Any],
                 emb_index: Mapping[str, int], emb: np.ndarray, attrs: pl.DataFrame,
                 columns: Mapping[str, str] | None, path: str) -> dict[str, Any]:
    """The sage view of one run: write its per-query CSV, return its leaderboard row (the means)."""
    score_col = str(cfg["score_column"])
    if int(cfg["limit"]) > depth:
        log.warning("evaluate: sage view of %s: evaluate.sage.limit %s is above the run's depth %s, so lists that "
                    "reach below the depth are incomplete (complete = false); raise evaluate.depth", meta["name"],
                    cfg["limit"], meta.get("depth"))
    view = sage_mod.sage_view(full, q_all, limit=int(cfg["limit"]), depth=depth,
                              collection_depth=meta.get("collection_depth"), emb_index=emb_index or None,
                              emb=emb if emb_index else None, score_column=score_col)
    extra = attrs.drop("positive_rate")
    out = view.join(extra, on="query_id", how="left", maintain_order="left")
    qid_col = filled("columns", columns)["query_id"]
    _write_csv(out.rename({"query_id": qid_col}) if qid_col != "query_id" else out, path)
    values = [c for c in sage_mod.sage_columns(score_col)[2:]]
    return {"system": meta["name"], "kind": meta["kind"], "sees_judge_text": bool(meta.get("sees_judge_text")),
            "queries": view.height, "complete_queries": int(view["complete"].sum()), "limit": int(cfg["limit"]),
            "score_column": score_col, **_mean(view, values)}


def scoped_views(full: pl.DataFrame, q_all: pl.DataFrame, meta: Mapping[str, Any],
                 depth: int) -> dict[str, pl.DataFrame]:
    """The views of one run that the leaderboard scores, by scope (docs/evaluate.md, "Metrics and scopes").
    ``exported`` only for runs that hold the judged collection's own top depth (``collection_depth``: clip,
    bm25), where it is exact."""
    out = {"pool": pool_view(full, q_all)}
    if "corpus" in meta.get("scopes", []):
        out["corpus"] = corpus_view(full, depth)
        out["condensed"] = pool_view(out["corpus"], q_all)
        if meta.get("collection_depth"):
            out["exported"] = exported_view(full, q_all, int(meta["collection_depth"]))
    return out


def _score_view(scope: str, r: pl.DataFrame, name: str, meta: Mapping[str, Any], *, q_ranx, queries: Sequence[str],
                metrics: Sequence[str], ks: Sequence[int], ids: RanxIds, q_all: pl.DataFrame,
                emb_index: Mapping[str, int], emb: np.ndarray, attrs: pl.DataFrame,
                facet_names: Sequence[str]) -> tuple[pl.DataFrame, Any, dict, list[dict]]:
    """One view of one system scored: (per-query scores, the ranx Run, its leaderboard row, drill-down rows)."""
    pq, ranx_run = ranx_scores(q_ranx, r, metrics, name, queries, ids)
    for k in ks:
        if emb_index:
            pq = pq.join(diversity(r, k, emb_index, emb, queries), on="query_id", how="left")
        if scope == "corpus":
            pq = pq.join(judged_at(r, q_all, k, queries), on="query_id", how="left")
    pq = pq.with_columns(pl.lit(name).alias("system"), pl.lit(scope).alias("scope"))
    value_cols = [c for c in pq.columns if c not in ("query_id", "system", "scope")]
    timing = meta.get("timing") or {}
    row = {"system": name, "kind": meta["kind"], "scope": scope, "sees_judge_text": bool(meta.get("sees_judge_text")),
           "queries": len(queries), **_mean(pq, value_cols), "images_per_s": timing.get("images_per_s"),
           "query_latency_ms": timing.get("query_latency_ms"), "seconds": meta.get("seconds"),
           "cost_usd": meta.get("cost_usd")}
    # drill-downs: facet values of the seed, query difficulty
    drill = []
    joined = pq.join(attrs, on="query_id", how="left")
    dims = [("difficulty", "difficulty")] + [(f"facet:{f}", f) for f in facet_names if f in joined.columns]
    for dim, col in dims:
        for (value,), g in joined.group_by(col, maintain_order=True):
            drill.append({"system": name, "scope": scope, "dimension": dim,
                          "value": "(none)" if value is None else str(value), "queries": g.height,
                          **_mean(g, value_cols)})
    return pq, ranx_run, row, drill


def _write_tables(board_rows: list[dict], drill_rows: list[dict], per_query_frames: list[pl.DataFrame],
                  sig: list[pl.DataFrame], first: str, paths: Mapping[str, str]) -> None:
    """leaderboard.csv (sorted by scope, then ``first`` descending), drilldown.csv, significance.csv and
    per_query.csv, each with its header when empty."""
    sig_df = pl.concat(sig, how="diagonal_relaxed") if sig else pl.DataFrame(schema={"scope": pl.String})
    board = pl.DataFrame(board_rows, infer_schema_length=None) if board_rows else pl.DataFrame(
        schema={c: pl.String for c in LEADERBOARD_COLUMNS})
    if board.height:
        order = pl.col("scope").replace_strict({sc: i for i, sc in enumerate(SCOPES)}, return_dtype=pl.Int64)
        board = board.sort([order, first, "system"], descending=[False, True, False], nulls_last=True)
    drill = pl.DataFrame(drill_rows, infer_schema_length=None) if drill_rows else pl.DataFrame(
        schema={"system": pl.String, "scope": pl.String, "dimension": pl.String, "value": pl.String})
    pq_all = pl.concat(per_query_frames, how="diagonal_relaxed") if per_query_frames else pl.DataFrame(
        schema={"query_id": pl.String, "system": pl.String, "scope": pl.String})
    for df, key in ((board, "board"), (drill, "drill"), (sig_df, "sig"), (pq_all, "pq")):
        Path(paths[key]).parent.mkdir(parents=True, exist_ok=True)
        df.write_csv(paths[key])


def _systems(runs: Sequence[str], metas: Sequence[str]) -> tuple[dict[str, dict], dict[str, str]]:
    """The systems' run records by name and their run files by name; an error when they do not match."""
    meta_of = {}
    for p in metas:
        m = json.loads(Path(p).read_text())
        meta_of[m["name"]] = m
    run_of = {Path(p).stem: p for p in runs}
    if set(run_of) != set(meta_of):
        raise ValueError(f"evaluate: runs {sorted(run_of)} and metadata {sorted(meta_of)} do not match")
    return meta_of, run_of


def _pool_qrels(q_all: pl.DataFrame, queries: list[str], ids: RanxIds) -> dict[str, tuple]:
    """Per negative pool: (the relevant pairs and that pool's, its queries with a positive, their ranx
    Qrels), built once for every system."""
    pool_qrels = {}
    for pool in NEGATIVE_POOLS:
        sub = q_all.filter((pl.col("relevance_label") > 0) | (pl.col("pool") == pool))
        qs = sorted(set(queries) & set(q_all.filter(pl.col("pool") == pool)["query_id"].unique().to_list()))
        if qs:
            pool_qrels[pool] = (sub, qs, to_ranx_qrels(sub.filter(pl.col("query_id").is_in(qs)), ids))
    return pool_qrels


def _pool_drill(name: str, full: pl.DataFrame, pool_qrels: Mapping[str, tuple], metrics: list[str],
                ids: RanxIds) -> list[dict]:
    """The drill-down per candidate pool: the relevant images ranked against one negative pool only."""
    rows = []
    for pool, (sub, qs, q_sub) in pool_qrels.items():
        pq = evaluate_scope(sub, pool_view(full, sub), metrics, name, qs, ranx_qrels=q_sub, ids=ids)
        rows.append({"system": name, "scope": "pool", "dimension": "candidate_pool",
                     "value": f"relevant vs {pool}", "queries": len(qs),
                     **_mean(pq, [c for c in pq.columns if c != "query_id"])})
    return rows


def run(*, qrels: str, images: str, annotations: str, runs: Sequence[str] | str = (), metas: Sequence[str] | str = (),
        image_embeddings: Sequence[str] | str = (), leaderboard_csv: str, leaderboard_json: str, drilldown: str,
        significance_csv: str, per_query: str, settings: Mapping[str, Any] | None = None,
        facets: Mapping[str, Any] | None = None, columns: Mapping[str, str] | None = None,
        numba_cache_dir: str | None = None, version: str | None = None, threads: int = 1,
        sage_leaderboard: str | None = None, sage: Sequence[str] | str = (),
        baseline: Sequence[str] | str = (), comparison: Sequence[str] | str | None = None,
        leakage: str | None = None) -> dict:
    """Stage ``evaluate``: score every system's run; write the leaderboard, drill-downs and tests.

    With ``sage_leaderboard``, also the sage view of every corpus-ranked run (:mod:`.sage`): one
    ``<system>.csv`` per system (the paths in ``sage``, by file stem; default a ``sage/`` folder beside
    ``sage_leaderboard``) and their means in ``sage_leaderboard``. With ``leakage``, the seed leakage
    of every system in the pool and corpus scopes (:mod:`.leakage`)."""
    set_numba_cache(numba_cache_dir)
    from ..io import as_paths

    s = filled("evaluate", settings)
    ks = [int(k) for k in s["k"]]
    metrics = ranx_metrics(ks)
    fm = FacetModel.from_config(facets) if facets else None
    q_all = read_table("qrels", qrels, columns=columns)
    ann = read_table("annotations", annotations, columns=columns, facets=fm)
    has_pos = q_all.group_by("query_id").agg((pl.col("relevance_label") > 0).any().alias("p"))
    queries = has_pos.filter(pl.col("p"))["query_id"].sort().to_list()
    n_without = has_pos.height - len(queries)
    emb_index, emb = _load_embeddings(as_paths(image_embeddings), columns)
    facet_names = list(s.get("facets") or (list(fm.names) if fm else []))
    attrs = difficulty_of(q_all).join(query_facets(q_all, ann, facet_names), on="query_id", how="left")

    meta_of, run_of = _systems(as_paths(runs), as_paths(metas))
    per_query_frames, board_rows, drill_rows, sage_rows, leak_rows = [], [], [], [], []
    sage_cfg = {"limit": sage_mod.DEFAULT_LIMIT, "score_column": sage_mod.DEFAULT_SCORE_COLUMN,
                **dict(s.get("sage") or {})}
    sage_path = {Path(p).stem: p for p in as_paths(sage)}
    sage_seconds = 0.0
    views: dict[str, dict[str, Any]] = {sc: {} for sc in SCOPES}  # ranx Runs, for the paired tests
    # one width of ids for ranx whatever the benchmark: its JIT cache is shared (RanxIds)
    ids = RanxIds(q_all["query_id"].to_list(), q_all["image_id"].to_list())
    q_main = to_ranx_qrels(q_all.filter(pl.col("query_id").is_in(queries)), ids) if queries else None
    # the exported scope: every query of the export, as mteb and trec_eval average them
    export_queries = q_all["query_id"].unique().sort().to_list()
    q_export = to_ranx_qrels(q_all, ids) if export_queries else None
    pool_qrels = _pool_qrels(q_all, queries, ids)
    for name in sorted(run_of):
        meta = meta_of[name]
        full = read_run(run_of[name])
        depth = int(meta.get("depth") or s["depth"])  # a system's own depth, else evaluate.depth
        scoped = scoped_views(full, q_all, meta, depth)
        if leakage and queries:
            leak_rows += [seed_leakage(r, q_all, queries, name, sc) for sc, r in scoped.items()
                          if sc in ("pool", "corpus")]
        for scope, r in scoped.items():
            q_ranx, qs = (q_export, export_queries) if scope == "exported" else (q_main, queries)
            if not qs:
                continue
            pq, views[scope][name], row, drill = _score_view(
                scope, r, name, meta, q_ranx=q_ranx, queries=qs, metrics=metrics, ks=ks, ids=ids, q_all=q_all,
                emb_index=emb_index, emb=emb, attrs=attrs, facet_names=facet_names)
            per_query_frames.append(pq)
            board_rows.append(row)
            drill_rows += drill
        if sage_leaderboard and "corpus" in meta.get("scopes", []):
            t_sage = time.perf_counter()
            sage_rows.append(_sage_system(full, q_all, meta, depth, sage_cfg, emb_index, emb, attrs, columns,
                                          sage_path.pop(name, None) or str(Path(sage_leaderboard).parent / "sage"
                                                                           / f"{name}.csv")))
            sage_seconds += time.perf_counter() - t_sage
        drill_rows += _pool_drill(name, full, pool_qrels, metrics, ids)
    stat_test, correction, max_p = s["stat_test"], s["correction"], float(s["max_p"])
    main = [m for m in metrics if m.startswith("ndcg@")] + ["map", "mrr"]
    sig = [significance(q_export if sc == "exported" else q_main, views[sc], main, stat_test, correction,
                        max_p).with_columns(pl.lit(sc).alias("scope")) for sc in SCOPES if len(views[sc]) >= 2]
    _write_tables(board_rows, drill_rows, per_query_frames, sig, f"ndcg@{ks[0]}",
                  {"board": leaderboard_csv, "drill": drilldown, "sig": significance_csv, "pq": per_query})
    doc = {
        "metrics": metrics + [f"diversity@{k}" for k in ks] + [f"judged@{k}" for k in ks],
        "k": ks, "scopes": list(SCOPES), "queries_evaluated": len(queries), "queries_without_positive": n_without,
        "stat_test": stat_test, "correction": correction, "max_p": max_p,
        "systems": [{**{k: v for k, v in meta_of[n].items() if k not in ("settings",)},
                     "settings": meta_of[n].get("settings"),
                     "results": {r["scope"]: {k: v for k, v in r.items() if k not in LEADERBOARD_COLUMNS}
                                 for r in board_rows if r["system"] == n}} for n in sorted(meta_of)],
        "version": version,
        # the judgments scored against: `benchmaker compare` checks that two evaluations share them
        "qrels_sha256": file_sha256(qrels),
    }
    if leakage:
        write_leakage(leakage, leak_rows, q_all, queries)
    _finish(doc, s, sage_leaderboard=sage_leaderboard, sage_path=sage_path, sage_cfg=sage_cfg, sage_rows=sage_rows,
            sage_seconds=sage_seconds, columns=columns, leaderboard_json=leaderboard_json, baseline=baseline,
            comparison=comparison)
    log.info("evaluate: %d systems, %d queries with a positive (%d without) -> %s", len(meta_of), len(queries),
             n_without, leaderboard_csv)
    return doc


def _finish(doc: dict, s: Mapping[str, Any], *, sage_leaderboard: str | None, sage_path: dict[str, str],
            sage_cfg: Mapping[str, Any], sage_rows: list[dict], sage_seconds: float,
            columns: Mapping[str, str] | None, leaderboard_json: str, baseline: Sequence[str] | str,
            comparison: Sequence[str] | str | None) -> None:
    """The sage leaderboard (and the header-only files of systems without a corpus ranking), leaderboard.json,
    and the comparison with ``evaluate.compare.baseline``."""
    from ..io import as_paths

    if sage_leaderboard:
        for name, p in sage_path.items():  # declared but not corpus-ranked: a header-only file
            log.warning("evaluate: %s has no corpus ranking, so no sage view (%s is left empty)", name, p)
            _write_csv(pl.DataFrame(schema={c: pl.String for c in sage_mod.sage_columns(
                sage_cfg["score_column"], filled("columns", columns)["query_id"])}), p)
        sage_board = pl.DataFrame(sage_rows, infer_schema_length=None) if sage_rows else pl.DataFrame(
            schema={c: pl.String for c in SAGE_BOARD_COLUMNS})
        _write_csv(sage_board, sage_leaderboard)
        doc["sage"] = {"limit": int(sage_cfg["limit"]), "score_column": sage_cfg["score_column"],
                       "systems": sage_rows, "seconds": round(sage_seconds, 4)}
    atomic_write_text(leaderboard_json, json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
    # evaluate.compare.baseline: this evaluation against the baseline (compare.py); none: no stale comparison
    from .compare import COMPARISON_FILES, compare_with_baseline

    if as_paths(comparison or ()):  # the comparison files, comparison.csv first (no baseline: empty)
        compare_with_baseline(as_paths(baseline), leaderboard_json, as_paths(comparison)[0], s.get("compare"))
    else:
        for f in COMPARISON_FILES:
            (Path(leaderboard_json).parent / f).unlink(missing_ok=True)

"""Compile ranx's numba functions into the per-user JIT cache once, at installation.

``python -m benchmaker.evaluate.warm`` (``make`` runs it after installing). The evaluate stage hands
ranx fixed-width codes instead of ids (:class:`benchmaker.evaluate.runs.RanxIds`), so the functions
numba compiles are the same for every benchmark; the rules point numba at the same per-user cache
(``$NUMBA_CACHE_DIR``, else ``${XDG_CACHE_HOME:-~/.cache}/benchmaker/numba``; rules/evaluate_common.smk). A
first benchmark then loads ranx's metrics and statistical tests instead of spending 20–60 s
compiling them. Runs the stage's own helpers on a three-query example.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

__all__ = ["default_cache_dir", "warm"]


def default_cache_dir() -> Path:
    env = os.environ.get("NUMBA_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "benchmaker" / "numba"


def warm(cache_dir: str | os.PathLike | None = None) -> float:
    """Compile (or load) ranx's JIT functions into ``cache_dir``; returns the seconds it took."""
    from .runs import set_numba_cache

    t0 = time.perf_counter()
    set_numba_cache(str(cache_dir or default_cache_dir()))
    warnings.filterwarnings("ignore", message=".*unsafe cast.*")
    import polars as pl

    from .metrics import evaluate_scope, ranx_metrics, ranx_scores, significance, to_ranx_qrels
    from .runs import RanxIds

    qrels = pl.DataFrame({"query_id": ["q1", "q1", "q1", "q2", "q2", "q3"],
                          "image_id": ["a", "b", "c", "b", "d", "e"], "relevance_label": [1, 0, 2, 1, 1, 1]})
    queries = ["q1", "q2", "q3"]
    ids = RanxIds(queries, ["a", "b", "c", "d", "e"])
    q = to_ranx_qrels(qrels, ids)
    metrics = ranx_metrics([1, 5, 10])
    runs = {}
    for name, qid, img, score in (
            ("one", ["q1", "q1", "q1", "q2", "q2"], ["a", "b", "c", "b", "d"], [0.9, 0.5, 0.1, 0.8, 0.7]),
            ("two", ["q1", "q1", "q2", "q3", "q3"], ["c", "a", "d", "a", "e"], [0.9, 0.4, 0.9, 0.6, 0.5])):
        run = pl.DataFrame({"query_id": qid, "image_id": img, "score": score})
        _, runs[name] = ranx_scores(q, run, metrics, name, queries, ids)
        evaluate_scope(qrels, run, metrics, name, ["q1", "q2"], ids=ids)  # a drill-down's sub-qrels
    for test in ("student", "fisher", "tukey"):
        significance(q, runs, ["ndcg@10", "map", "mrr"], test, "holm", 0.05)
    # hybrid systems: ranx.fuse on coded runs (systems.hybrid_run), the common methods / norms
    from ranx import fuse

    from .runs import to_ranx_run

    parts = [to_ranx_run(pl.DataFrame({"query_id": ["q1", "q2", "q3"], "image_id": ["a", "d", "e"],
                                       "score": [0.9, 0.7, 0.2]}), "x", queries, ids),
             to_ranx_run(pl.DataFrame({"query_id": ["q1", "q1", "q3"], "image_id": ["c", "a", "e"],
                                       "score": [0.4, 0.3, 0.1]}), "y", queries, ids)]
    for method, norm in (("rrf", None), ("wsum", "min-max"), ("sum", "max"), ("mnz", "zmuv"),
                         ("wsum", "sum"), ("rrf", "rank"), ("sum", "borda")):
        params = {"weights": [0.5, 0.5]} if method == "wsum" else None
        fuse(parts, norm=norm, method=method, params=params)
    return time.perf_counter() - t0


if __name__ == "__main__":
    where = sys.argv[1] if len(sys.argv) > 1 else None
    seconds = warm(where)
    print(f"ranx JIT cache ready in {where or default_cache_dir()} ({seconds:.1f} s)")

"""The evaluate aggregate's part of "How far to trust this benchmark" (docs/trust.md): ``evaluate/trust.json``
(power of the system comparisons, circularity of the evaluated systems) and ``evaluate/power.csv`` (the
minimum detectable difference of every system pair). Written by the ``evaluate`` rule after the
leaderboard (:func:`run` wraps :func:`benchmaker.evaluate.stage.run`); read by the summary and the export.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ..families import circularity
from ..io import as_paths, atomic_write_text
from ..settings_schema import filled
from .power import power_doc

__all__ = ["TRUST_FILES", "run", "trust_doc"]

TRUST_FILES = ("trust.json", "power.csv")


def trust_doc(per_query: pl.DataFrame, metas: Sequence[Mapping[str, Any]], *, settings: Mapping[str, Any] | None,
              models: Mapping[str, str | None] | None, queries: int) -> tuple[dict[str, Any], pl.DataFrame]:
    """``trust.json``'s content and the per-pair power table."""
    s = filled("evaluate", settings)
    power, table = power_doc(per_query, alpha=float(s["max_p"]), correction=str(s["correction"]),
                             stat_test=str(s["stat_test"]), settings=s.get("power"), queries=queries)
    circ = circularity(dict(models or {}), [{"name": m["name"], "kind": m.get("kind"),
                                              "settings": m.get("settings") or {}} for m in metas])
    return {"queries_evaluated": queries, "power": power, "circularity": circ}, table


def run(*, qrels: str, images: str, annotations: str, runs: Sequence[str] | str = (), metas: Sequence[str] | str = (),
        image_embeddings: Sequence[str] | str = (), leaderboard_csv: str, leaderboard_json: str, drilldown: str,
        significance_csv: str, per_query: str, trust: str, power: str, settings: Mapping[str, Any] | None = None,
        facets: Mapping[str, Any] | None = None, columns: Mapping[str, str] | None = None,
        models: Mapping[str, str | None] | None = None, numba_cache_dir: str | None = None,
        version: str | None = None, threads: int = 1, sage_leaderboard: str | None = None,
        sage: Sequence[str] | str = (), baseline: Sequence[str] | str = (),
        comparison: Sequence[str] | str | None = None, leakage: str | None = None) -> dict:
    """Stage ``evaluate`` (:func:`benchmaker.evaluate.stage.run`, the same arguments), then ``trust`` (trust.json)
    and ``power`` (power.csv); ``models``: the judge's and the vision annotator's model names."""
    from .stage import run as evaluate

    doc = evaluate(qrels=qrels, images=images, annotations=annotations, runs=runs, metas=metas,
                   image_embeddings=image_embeddings, leaderboard_csv=leaderboard_csv,
                   leaderboard_json=leaderboard_json, drilldown=drilldown, significance_csv=significance_csv,
                   per_query=per_query, settings=settings, facets=facets, columns=columns,
                   numba_cache_dir=numba_cache_dir, version=version, threads=threads,
                   sage_leaderboard=sage_leaderboard, sage=sage, baseline=baseline, comparison=comparison,
                   leakage=leakage)
    meta_docs = [json.loads(Path(p).read_text(encoding="utf-8")) for p in as_paths(metas)]
    pq_path = Path(per_query)
    pq = pl.read_csv(pq_path, infer_schema_length=None) if pq_path.stat().st_size else pl.DataFrame()
    if pq.height and "query_id" in pq.columns:
        pq = pq.with_columns(pl.col("query_id").cast(pl.String))
    out, table = trust_doc(pq, sorted(meta_docs, key=lambda m: m["name"]), settings=settings, models=models,
                           queries=int(doc.get("queries_evaluated") or 0))
    Path(power).parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(power)
    atomic_write_text(trust, json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    return doc

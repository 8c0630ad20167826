"""The audit report's part of "How far to trust this benchmark" (docs/trust.md): human-corrected system scores
(:mod:`.corrected`, ``corrected.csv``) and, with a second judge, every system scored under both judges with
Kendall's tau between the two rankings (``judges.csv``). Both go into ``audit.json`` (keys ``corrected``
and ``judges``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from .corrected import corrected_ks, corrected_scores, corrected_table, projected
from .ranking import compare_rankings, consensus, read_run

__all__ = ["judge_rankings", "trust_parts"]

JUDGES_SCHEMA = {"system": pl.String, "metric": pl.String, "judge": pl.Float64, "judge2": pl.Float64,
                 "queries": pl.Int64}


def judge_rankings(qrels: pl.DataFrame, judge2: pl.DataFrame, sample: pl.DataFrame, scope: str,
                   runs: Mapping[str, str], metrics: Sequence[str]) -> dict[str, Any]:
    """Every system scored with ranx under the judge's and the second judge's labels, on the pairs both
    labelled (scope ``all``: every judged pair, each query's pool; ``sample``: the audit sample, condensed as
    the judge-vs-people ranking), and Kendall's tau-b between the two orderings of the first metric."""
    pairs = qrels if scope == "all" else sample.select("query_id", "image_id", pl.col("judge_label")
                                                        .alias("relevance_label"))
    both = pairs.select("query_id", "image_id", pl.col("relevance_label").alias("judge_label")).join(
        judge2.select("query_id", "image_id", pl.col("relevance_label").alias("human_label")),
        on=["query_id", "image_id"], how="inner")
    res = compare_rankings(both, runs, metrics)  # its "human" side is the second judge here
    rows = []
    for r in res.get("systems") or []:
        for m in res["metrics"]:
            rows.append({"system": r["system"], "metric": m, "judge": r.get(f"{m}_judge"),
                         "judge2": r.get(f"{m}_human"), "queries": r.get("queries")})
    return {"status": res["status"], "scope": scope, "pairs": both.height, "primary_metric": res.get("primary_metric"),
            "kendall_tau": res.get("kendall_tau"), "kendall_p": res.get("kendall_p"),
            "winner_judge": res.get("winner_judge"), "winner_judge2": res.get("winner_human"),
            "same_winner": res.get("same_winner"), "rows": rows}


def trust_parts(*, sample: pl.DataFrame, humans: pl.DataFrame, qrels: pl.DataFrame, runs: Mapping[str, str],
                metrics: Sequence[str], confidence: float, judge2: pl.DataFrame | None = None,
                judge2_scope: str = "sample") -> tuple[dict[str, Any], dict[str, pl.DataFrame]]:
    """``audit.json``'s ``corrected`` and ``judges`` entries and the tables ``corrected`` and ``judges``."""
    info: dict[str, Any] = {"corrected": None, "judges": None, "projected": None}
    tables = {"corrected": corrected_table({}), "judges": pl.DataFrame(schema=JUDGES_SCHEMA)}
    loaded = {name: read_run(path) for name, path in sorted(runs.items())} if runs else {}
    if humans.height and loaded:
        audited = sample.select("item_id", "query_id", "image_id", "judge_label", "stratum", "stratum_size").join(
            consensus(humans).rename({"label": "human_label"}), on="item_id", how="inner")
        doc = corrected_scores(qrels.select("query_id", "image_id", "relevance_label"), audited, loaded,
                               ks=corrected_ks(metrics), confidence=confidence)
        doc["audited_pairs"] = audited.height
        info["corrected"] = doc
        tables["corrected"] = corrected_table(doc)
    elif humans.height:
        info["corrected"] = {"status": "no systems", "rows": []}
    elif loaded:  # nothing labelled yet: what labelling the sample would buy
        info["projected"] = projected(qrels.select("query_id", "image_id", "relevance_label"), sample, loaded,
                                      ks=corrected_ks(metrics), confidence=confidence)
    if judge2 is not None and runs:
        doc = judge_rankings(qrels, judge2, sample, judge2_scope, runs, metrics)
        info["judges"] = doc
        tables["judges"] = pl.DataFrame(doc["rows"], schema=JUDGES_SCHEMA)
    return info, tables

"""Does the judge change conclusions? System rankings under the judge's labels vs people's labels.

For each retrieval system of the evaluate stage (``{RESULTS}/evaluate/runs/{name}.trec``, TREC run
format, ids encoded with :func:`benchmaker.ids.trec_id`), the run is restricted to the audited pairs
(a condensed list: documents without a human label are removed before scoring, Sakai 2007) and scored
with ranx under two qrels over the same pairs: the judge's labels and the people's consensus label
(majority; a tie goes to the lower label). Every system is scored on the same queries, all the audited
ones: a query for which a system ranks none of the audited pairs scores 0 for it, as in the evaluate
stage (a system that skips a hard query must not be scored on the easy ones only). Reported per system:
each metric under both, their difference, and, over systems, Kendall's tau-b (scipy) between the two
orderings of the primary metric and whether the winner is the same. ranx's conventions apply: a query
none of whose audited pairs is relevant scores 0.

ranx gets the evaluate stage's fixed-width codes for the ids (:class:`benchmaker.evaluate.runs.RanxIds`),
so the functions numba compiled for the evaluate stage serve the audit too (the rule points numba at the
same per-user cache: ``numba_cache_dir``, :func:`benchmaker.evaluate.runs.set_numba_cache`). The numbers do
not change: ranx breaks score ties by the order documents are given, never by id, and the codes keep the
sorted order of the ids (the order of the queries a mean adds up); the documents reach ranx in the order
they did when ranx read the run file itself (tests/test_audit.py checks runs full of ties against ranx
on the raw ids).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl

from ..evaluate.runs import RanxIds
from ..evaluate.runs import read_run as read_run_frame
from ..logs import get_logger

__all__ = ["read_run", "compare_rankings", "consensus"]

log = get_logger("audit")


def consensus(labels: pl.DataFrame) -> pl.DataFrame:
    """(item_id, label): the people's majority label per pair; ties go to the lower label."""
    counts = labels.group_by("item_id", "label").len("votes")
    return (counts.sort(["item_id", "votes", "label"], descending=[False, True, False])
            .group_by("item_id", maintain_order=True).first().select("item_id", "label"))


def read_run(path: str | Path) -> dict[str, dict[str, float]]:
    """A TREC run file as {query_id: {image_id: score}} with the ids decoded, queries in id order and each
    query's images in ranx's order of the file (score descending; ties as ranx leaves them)."""
    from ranx import Run

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: run file not found (written by the evaluate stage)")
    frame = read_run_frame(path)  # FormatError (a ValueError) naming the line of a malformed file
    if not frame.height:  # a system that ranked nothing (an empty external run): no query
        return {}
    ids = RanxIds(frame["query_id"].to_list(), frame["image_id"].to_list())
    coded: dict[str, dict[str, float]] = {}
    for q, d, s in frame.iter_rows():  # file order, as ranx's own reader hands it to ranx
        coded.setdefault(ids.query(q), {})[ids.image(d)] = s
    qs, ds = ids.decode()
    return {qs[q]: {ds[d]: float(s) for d, s in docs.items()} for q, docs in Run(coded).to_dict().items()}


def _clean(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def _scores(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]],
            metrics: Sequence[str], ids: RanxIds) -> dict[str, float | None]:
    """Each metric's mean over *every* query of ``qrels``; a query absent from ``run`` scores 0 (ranx's
    ``make_comparable`` gives it an empty ranking). ``ids``: the codes ranx gets (every id of both given)."""
    from ranx import Qrels, Run, evaluate

    if not run:  # nothing ranked at all: every query scores 0 (ranx refuses an empty run)
        return {m: 0.0 for m in metrics}
    q_coded = {ids.query(q): {ids.image(i): r for i, r in d.items()} for q, d in qrels.items()}
    r_coded = {ids.query(q): {ids.image(i): s for i, s in d.items()} for q, d in run.items()}
    res = evaluate(Qrels.from_dict(q_coded), Run.from_dict(r_coded), list(metrics), make_comparable=True)
    res = res if isinstance(res, dict) else {metrics[0]: res}
    return {m: _clean(res[m]) for m in metrics}


def compare_rankings(audited: pl.DataFrame, runs: Mapping[str, str | Path], metrics: Sequence[str]) -> dict[str, Any]:
    """``audited``: query_id, image_id, judge_label, human_label for every audited pair."""
    from scipy.stats import kendalltau

    metrics = list(metrics)
    if not runs:
        return {"status": "no systems", "systems": [], "metrics": metrics}
    pairs = {(q, i) for q, i in audited.select("query_id", "image_id").iter_rows()}
    qj: dict[str, dict[str, int]] = {}
    qh: dict[str, dict[str, int]] = {}
    for q, i, j, h in audited.select("query_id", "image_id", "judge_label", "human_label").iter_rows():
        qj.setdefault(q, {})[i] = int(j)
        qh.setdefault(q, {})[i] = int(h)
    queries = sorted(qj)  # the audited queries: every system is scored on all of them
    # codes in id order for every audited id (a run's cut holds no other): ranx's cache is the evaluate stage's
    ids = RanxIds(queries, [i for _, i in pairs])
    rows = []
    for name, path in runs.items():
        run = read_run(path)
        cut = {q: {d: s for d, s in docs.items() if (q, d) in pairs} for q, docs in run.items() if q in qj}
        cut = {q: docs for q, docs in cut.items() if docs}
        covered = sum(len(d) for d in cut.values())
        row: dict[str, Any] = {"system": name, "queries": len(queries), "queries_ranked": len(cut),
                               "audited_pairs_ranked": covered}
        if not cut:
            log.warning("audit: run %s ranks none of the audited pairs: it scores 0 on every audited query", name)
        elif len(cut) < len(queries):
            log.info("audit: run %s ranks no audited pair of %d of the %d audited queries (they score 0)", name,
                     len(queries) - len(cut), len(queries))
        for label, qrels in (("judge", qj), ("human", qh)):
            res = _scores(qrels, cut, metrics, ids)
            for m in metrics:
                row[f"{m}_{label}"] = res[m]
        for m in metrics:
            j, h = row[f"{m}_judge"], row[f"{m}_human"]
            row[f"{m}_diff"] = None if j is None or h is None else j - h
        rows.append(row)
    primary = metrics[0]
    ok = [r for r in rows if r[f"{primary}_judge"] is not None and r[f"{primary}_human"] is not None]
    out: dict[str, Any] = {"status": "ok", "metrics": metrics, "primary_metric": primary, "systems": rows}
    if len(ok) < 2:
        out.update(status="fewer than two systems", kendall_tau=None, kendall_p=None, same_winner=None)
        return out
    js = [r[f"{primary}_judge"] for r in ok]
    hs = [r[f"{primary}_human"] for r in ok]
    res = kendalltau(js, hs)
    win_j = max(ok, key=lambda r: (r[f"{primary}_judge"], r["system"]))["system"]
    win_h = max(ok, key=lambda r: (r[f"{primary}_human"], r["system"]))["system"]
    out.update(kendall_tau=_clean(res.statistic), kendall_p=_clean(res.pvalue), winner_judge=win_j,
               winner_human=win_h, same_winner=win_j == win_h)
    return out

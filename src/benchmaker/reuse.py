"""Reused judge labels: queries answered from ``paths.judge_reuse_file`` instead of the judge.

The file holds labels someone already paid for (``benchmaker import-upstream`` writes upstream
``imsearch_benchmaker``'s qrels there): JSONL rows ``{query_id, query_text, image_id,
relevance_label, judge?}`` (configured column names accepted too). A planned query is **reused**
when the file labels every one of its planned candidates for that query id, every such label is an
integer on the configured scale (``judge.labels``: 0..1 binary, 0..3 graded) and the query has a
non-empty text. Its query text and labels are taken as they are, no request is built or sent, and
its rows say ``judge = imported:<the file's judge, or 'file'>``; the cost file gets one row per
reused query with ``mode: imported``, ``cached: true`` and $0, so the summary counts them. Every
other planned query goes to the judge as usual, whole (one query text covers the whole pool), and
the reasons why it was not reused are logged with their counts.

Both stages that would pay for a query read it: the query writer (:mod:`benchmaker.queries`) takes a
reused query's text from the file instead of writing one, and the judge takes its labels. It lives
outside both stage packages so that neither stage's version holds the other's code.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

import polars as pl

from .formats import FormatError, iter_json_objects
from .logs import get_logger

__all__ = ["ReuseFile", "read_reuse_file", "split_reused", "JUDGED_SCHEMA", "PREFIX", "MODE"]

log = get_logger("judge.reuse")

PREFIX = "imported:"
MODE = "imported"
JUDGED_SCHEMA = {"query_id": pl.String, "query_text": pl.String, "image_id": pl.String,
                 "relevance_label": pl.Int64, "rationale": pl.String, "judge": pl.String}


@dataclass
class _Query:
    text: str | None = None
    judge: str | None = None
    labels: dict[str, object] = field(default_factory=dict)
    problem: str | None = None


@dataclass
class ReuseFile:
    path: str
    queries: dict[str, _Query]

    def check(self, query_id: str, image_ids: list[str], max_label: int) -> str | None:
        """None when the query can be answered from the file, else why not."""
        q = self.queries.get(query_id)
        if q is None:
            return "query id not in the file"
        if q.problem:
            return q.problem
        missing = sum(1 for i in image_ids if i not in q.labels)
        if missing:
            return "not every planned candidate has a label"
        for i in image_ids:
            v = q.labels[i]
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= max_label:
                return f"a label is not an integer in 0..{max_label} (judge.labels)"
        if not q.text or not q.text.strip():
            return "no query text"
        return None

    def judge_name(self, query_id: str) -> str:
        j = self.queries[query_id].judge or "file"
        return j if j.startswith(PREFIX) else PREFIX + j


def read_reuse_file(path: str, columns: Mapping[str, str] | None = None) -> ReuseFile:
    cols = dict(columns or {})
    names = {k: cols.get(k, k) for k in ("query_id", "query_text", "image_id", "relevance_label")}
    queries: dict[str, _Query] = {}
    for ln, row in iter_json_objects(path, "paths.judge_reuse_file"):
        get = {k: row.get(c, row.get(k)) for k, c in names.items()}
        if get["query_id"] in (None, "") or get["image_id"] in (None, ""):
            raise FormatError(f"{path} (paths.judge_reuse_file): line {ln} has no query_id or image_id")
        q = queries.setdefault(str(get["query_id"]), _Query())
        if q.text is None and isinstance(get["query_text"], str) and get["query_text"].strip():
            q.text = get["query_text"].strip()
        if q.judge is None and isinstance(row.get("judge"), str) and row["judge"]:
            q.judge = row["judge"]
        iid, label = str(get["image_id"]), get["relevance_label"]
        if iid in q.labels and q.labels[iid] != label:
            q.problem = f"conflicting labels for image {iid}"
        q.labels.setdefault(iid, label)
    return ReuseFile(str(path), queries)


def _pools(plan: pl.DataFrame) -> Iterator[tuple[str, list[str]]]:
    for qid, cands in plan.select("query_id", "candidates").iter_rows():
        yield qid, list(dict.fromkeys(c["image_id"] for c in cands))


def reusable(reuse: ReuseFile, pools: Iterable[tuple[str, list[str]]], max_label: int
             ) -> tuple[list[str], Counter]:
    """(query ids answered from the file, Counter of why the others are not)."""
    ok, why = [], Counter()
    for qid, ids in pools:
        reason = reuse.check(qid, ids, max_label)
        if reason is None:
            ok.append(qid)
        else:
            why[reason] += 1
    return ok, why


def split_reused(plan: pl.DataFrame, path: str | None, *, graded: bool,
                 columns: Mapping[str, str] | None = None) -> tuple[pl.DataFrame, pl.DataFrame, list[dict]]:
    """(the plan of the queries still to judge, the reused judgments, their $0 cost rows)."""
    empty = pl.DataFrame(schema=JUDGED_SCHEMA)
    if not path:
        return plan, empty, []
    reuse = read_reuse_file(path, columns)
    ok, why = reusable(reuse, _pools(plan), 3 if graded else 1)
    rows, costs = [], []
    keep = set(ok)
    for qid, ids in _pools(plan):
        if qid not in keep:
            continue
        q, name = reuse.queries[qid], reuse.judge_name(qid)
        rows += [{"query_id": qid, "query_text": q.text, "image_id": i, "relevance_label": int(q.labels[i]),
                  "rationale": None, "judge": name} for i in ids]
        costs.append({"stage": "judge", "item_id": qid, "model": name, "mode": MODE, "input_tokens": 0,
                      "cached_input_tokens": 0, "output_tokens": 0, "reasoning_tokens": 0, "cost_usd": 0.0,
                      "attempt": 0, "cached": True})
    log.info("reused labels (%s): %d of %d planned queries (%d pairs) answered from the file, no request sent; "
             "%d go to the judge%s", path, len(ok), plan.height, len(rows), plan.height - len(ok),
             "".join(f"; {n} because {r}" for r, n in sorted(why.items())))
    if graded and rows and max(r["relevance_label"] for r in rows) <= 1:
        log.warning("judge.labels is graded (0..3) but the %d reused queries' labels from %s are all 0 or 1: "
                    "binary labels (upstream's are) would read as 'partly relevant'; remove "
                    "paths.judge_reuse_file to judge them on the graded scale", len(ok), path)
    rest = plan.filter(~pl.col("query_id").is_in(ok))
    return rest, pl.DataFrame(rows, schema=JUDGED_SCHEMA), costs

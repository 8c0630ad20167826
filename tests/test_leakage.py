"""Seed leakage (#31 item 4, docs/evaluate.md "Seed leakage"): per system how often the seed is the top
result and its mean rank among the relevant images, and the share of queries whose only relevant image
is the seed; worked by hand, then through the evaluate aggregate into the report and the card."""

from __future__ import annotations

import json

import polars as pl
import pytest
from test_evaluate import bench  # noqa: F401  (the fixture)

from benchmaker.evaluate import leakage, leakage_view, stage
from benchmaker.evaluate.runs import write_run

QRELS = [  # (query, image, label, is_seed)
    ("q1", "s1", 1, True), ("q1", "a", 1, False), ("q1", "b", 1, False), ("q1", "n", 0, False),
    ("q2", "s2", 1, True), ("q2", "c", 1, False),
    ("q3", "s3", 1, True), ("q3", "m", 0, False),
    ("q4", "s4", 1, True), ("q4", "d", 1, False), ("q4", "e", 1, False),
]


def _frame(rows, cols):
    return pl.DataFrame(rows, schema=cols, orient="row")


def test_leakage_worked_by_hand():
    """q1 [s1 a n b]: seed first, rank 1 among 3 relevant (expected 2 if ranked like the others);
    q2 [c s2]: rank 2 (expected 1.5); q3: the seed is the only relevant image (no rank; counted in the
    benchmark's share); q4 [d]: the seed and e unranked: 1 + 1 ranked other + 1 unranked / 2 = 2.5
    (expected 2)."""
    q = _frame(QRELS, ["query_id", "image_id", "relevance_label", "is_seed"])
    run = _frame([("q1", "s1", 4.0), ("q1", "a", 3.0), ("q1", "n", 2.0), ("q1", "b", 1.0),
                  ("q2", "c", 2.0), ("q2", "s2", 1.0), ("q3", "m", 1.0), ("q4", "d", 1.0)],
                 ["query_id", "image_id", "score"])
    queries = ["q1", "q2", "q3", "q4"]
    row = leakage.system_rows(run, q, queries, "A", "corpus")
    assert row["queries"] == 4 and row["seed_first"] == 1 and row["seed_top_share"] == 0.25
    assert row["rank_queries"] == 3
    assert row["seed_mean_rank"] == pytest.approx((1 + 2 + 2.5) / 3)
    assert row["seed_expected_rank"] == pytest.approx((2 + 1.5 + 2) / 3)
    doc = leakage.document([row], q, queries)
    assert doc["only_seed_relevant"] == 1 and doc["only_seed_relevant_share"] == 0.25
    assert doc["meets_target"] is False and "ABOVE the aim of at most 10%" in leakage_view.headline(doc)
    # ties in score: by image id, as judged@k orders them (a < s1: a is first)
    tie = _frame([("q1", "s1", 1.0), ("q1", "a", 1.0)], ["query_id", "image_id", "score"])
    assert leakage.system_rows(tie, q, ["q1"], "T", "pool")["seed_first"] == 0


def test_aggregate_writes_it_and_report_and_card_show_it(bench, tmp_path):  # noqa: F811
    from benchmaker.pages.report import Section

    q = pl.read_ndjson(bench / "qrels.jsonl")
    ids = sorted(set(q["image_id"]))
    seed_of = dict(q.filter(pl.col("is_seed")).select("query_id", "image_id").iter_rows())
    # "seedy" ranks each query's seed first, then the rest; "late" puts it last
    for name, first in (("seedy", True), ("late", False)):
        rows = []
        for qid, seed in sorted(seed_of.items()):
            order = sorted(ids, key=lambda i: (i != seed) == first)
            rows += [(qid, i, float(len(order) - n)) for n, i in enumerate(order)]
        write_run(pl.DataFrame(rows, schema=["query_id", "image_id", "score"], orient="row"),
                  bench / "runs" / f"{name}.trec", name)
        (bench / "runs" / f"{name}.json").write_text(json.dumps(
            {"name": name, "kind": "trec_run", "scopes": ["pool", "corpus"], "depth": 100, "sees_judge_text": False}))
    d = bench / "evaluate"
    stage.run(qrels=str(bench / "qrels.jsonl"), images=str(bench / "images.jsonl"),
              annotations=str(bench / "annotations.jsonl"),
              runs=[str(bench / "runs" / f"{n}.trec") for n in ("seedy", "late")],
              metas=[str(bench / "runs" / f"{n}.json") for n in ("seedy", "late")],
              leaderboard_csv=str(d / "leaderboard.csv"), leaderboard_json=str(d / "leaderboard.json"),
              drilldown=str(d / "drilldown.csv"), significance_csv=str(d / "significance.csv"),
              per_query=str(d / "per_query.csv"), settings={"k": [5]}, leakage=str(d / "leakage.json"))
    doc = leakage.load(d / "leakage.json")
    rows = {(r["system"], r["scope"]): r for r in doc["systems"]}
    assert set(rows) == {(s, sc) for s in ("seedy", "late") for sc in ("pool", "corpus")}
    assert doc["queries_evaluated"] == 3 and doc["only_seed_relevant"] == 0
    assert rows[("seedy", "corpus")]["seed_top_share"] == 1.0 and rows[("late", "corpus")]["seed_top_share"] == 0.0
    assert rows[("seedy", "pool")]["seed_mean_rank"] == 1.0
    late = rows[("late", "pool")]   # last among n relevant: rank n = 2 * expected - 1
    assert late["seed_mean_rank"] == pytest.approx(2 * late["seed_expected_rank"] - 1)
    assert late["seed_mean_rank"] > late["seed_expected_rank"]
    sec = leakage_view.summary_section(d / "leakage.json", tmp_path / "summary")
    assert isinstance(sec, Section) and sec.table.height == 4 and (tmp_path / "summary/evaluate/leakage.json").is_file()
    md = leakage_view.card_markdown(d / "leakage.json", tmp_path / "ds" / "evaluate")
    assert "### Seed leakage" in md and "seedy" in md and "0 of 3 evaluated queries" in md
    assert (tmp_path / "ds" / "evaluate" / "leakage.json").read_bytes() == (d / "leakage.json").read_bytes()
    (d / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a leakage file"):
        leakage.load(d / "bad.json")

"""Change -> evaluate -> compare: `benchmaker compare OLD NEW --fail-on-regression` on real evaluations."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from test_evaluate import _aggregate, _run_system, bench  # noqa: F401 - the shared fixture

from benchmaker.cli import main
from benchmaker.errors import UserError
from benchmaker.evaluate.compare import compare, load_evaluation, paired_p
from benchmaker.formats import write_table
from benchmaker.ids import trec_id

N_QUERIES = 24


@pytest.fixture()
def big(bench):  # noqa: F811
    """The bench's images with 24 queries (3 relevant images in a pool of 10 each)."""
    ids = sorted(pl.read_ndjson(bench / "images.jsonl")["image_id"].to_list())
    rnd = random.Random(0)
    rows = []
    for q in range(N_QUERIES):
        pool = rnd.sample(ids, 10)
        for j, iid in enumerate(pool):
            rows.append({"query_id": f"q{q:02d}", "query_text": f"query {q}", "image_id": iid,
                         "relevance_label": int(j < 3), "pool": "seed" if j == 0 else ("positive" if j < 3 else "hard"),
                         "is_seed": j == 0, "seed_not_relevant": False, "judge": "test"})
    write_table(pl.DataFrame(rows), "qrels", bench / "qrels.jsonl")
    return bench


def _trec(path: Path, qrels: pl.DataFrame, quality: float, seed: int) -> Path:
    """A run ranking each pool: relevant images first with probability ``quality`` per query."""
    rnd = random.Random(seed)
    lines = []
    for (qid,), g in sorted(qrels.group_by("query_id"), key=lambda x: x[0]):
        imgs = g.sort("relevance_label", "image_id", descending=[True, False])["image_id"].to_list()
        if rnd.random() > quality:
            imgs = imgs[3:] + imgs[:3]      # the relevant ones last
        lines += [f"{trec_id(qid)} Q0 {trec_id(i)} {n + 1} {100 - n} x\n" for n, i in enumerate(imgs)]
    path.write_text("".join(lines))
    return path


def _evaluate(folder: Path, prod_quality: float, version: str, dest: Path) -> Path:
    qrels = pl.read_ndjson(folder / "qrels.jsonl")
    sys_list = [{"name": "prod", "kind": "trec_run", "version": version, "scope": "pool",
                 "path": str(_trec(folder / f"prod-{version}.trec", qrels, prod_quality, 1))},
                {"name": "base", "kind": "trec_run", "version": "b1", "scope": "pool",
                 "path": str(_trec(folder / "base.trec", qrels, 0.5, 2))}]
    for s in sys_list:
        _run_system(folder, s, sys_list)
    _aggregate(folder, ["base", "prod"])
    shutil.copytree(folder / "evaluate", dest)
    return dest


def test_paired_p_is_scipys():
    from scipy import stats

    a = np.array([0.1, 0.5, 0.3, 0.9, 0.2])
    b = np.array([0.2, 0.4, 0.6, 0.95, 0.1])
    assert paired_p(a, b) == pytest.approx(stats.ttest_rel(b, a).pvalue)
    assert paired_p(a, a) == 1.0
    assert paired_p(a, b, "wilcoxon") == pytest.approx(stats.wilcoxon(b - a, zero_method="zsplit").pvalue)
    assert 0 < paired_p(a, b, "fisher") <= 1


def test_compare_flags_a_regression_and_gates_the_exit(big, tmp_path, capsys):
    hist = tmp_path / "history"
    old = _evaluate(big, 1.0, "v1", tmp_path / "old")
    assert json.loads((old / "leaderboard.json").read_text())["qrels_sha256"]
    assert main(["keep-evaluation", str(old), str(hist), "--tag", "deploy-v1"]) == 0
    assert (hist / "deploy-v1" / "per_query.csv").is_file()
    # v2 ranks the relevant images last on most queries; base is unchanged
    new = _evaluate(big, 0.25, "v2", tmp_path / "new")
    capsys.readouterr()
    assert main(["compare", str(hist), str(new), "--out", str(tmp_path / "cmp")]) == 0   # report only
    assert main(["compare", str(hist), str(new), "--fail-on-regression"]) == 1
    out = capsys.readouterr()
    assert "REGRESSION" in out.out and "regression(s)" in out.err
    t = pl.read_csv(tmp_path / "cmp" / "comparison.csv")
    prod = t.filter((pl.col("system") == "prod") & (pl.col("metric") == "ndcg@5"))
    assert prod["regression"].to_list() == [True] and prod["old_version"][0] == "v1" \
        and prod["new_version"][0] == "v2" and prod["queries"][0] == N_QUERIES
    assert prod["delta"][0] < 0 and prod["p_adjusted"][0] <= 0.05
    # the same numbers as a paired t-test over per_query.csv of both sides
    a = pl.read_csv(old / "per_query.csv").filter((pl.col("system") == "prod") & (pl.col("scope") == "pool"))
    b = pl.read_csv(new / "per_query.csv").filter((pl.col("system") == "prod") & (pl.col("scope") == "pool"))
    from scipy import stats

    j = a.join(b, on="query_id", suffix="_n")
    assert prod["p_value"][0] == pytest.approx(stats.ttest_rel(j["ndcg@5_n"], j["ndcg@5"]).pvalue)
    assert not t.filter(pl.col("system") == "base")["regression"].any()  # unchanged: no verdict
    assert "deploy-v1" in (tmp_path / "cmp" / "comparison.md").read_text()
    # gating on one system that did not change passes
    assert main(["compare", str(hist), str(new), "--fail-on-regression", "--system", "base"]) == 0
    # a big enough min-delta ignores it; a fix is an improvement, not a regression
    assert main(["compare", str(hist), str(new), "--fail-on-regression", "--min-delta", "0.9"]) == 0
    res = compare(load_evaluation(new), load_evaluation(old))
    assert res["regressions"] == 0 and res["improvements"] >= 1


def test_compare_refuses_a_metric_both_evaluations_lack(big, tmp_path, capsys):
    """--metric with a typo (or a cutoff evaluate.k did not compute) compared and gated nothing, so
    --fail-on-regression passed silently: it is a usage error naming the columns both have."""
    from benchmaker.errors import EXIT_USAGE
    from benchmaker.evaluate.compare import RANX_PREFIXES
    from benchmaker.evaluate_settings import CUTOFF_METRICS, WHOLE_METRICS

    assert set(RANX_PREFIXES) == {f"{m}@" for m in CUTOFF_METRICS} | set(WHOLE_METRICS)
    old = _evaluate(big, 1.0, "v1", tmp_path / "old")
    new = _evaluate(big, 0.25, "v2", tmp_path / "new")
    capsys.readouterr()
    for typo, why in [("ndgc@5", "not a metric the evaluate stage writes"), ("ndcg@7", "evaluate.k is"),
                      ("ndcg@05", "write ndcg@5")]:
        assert main(["compare", str(old), str(new), "--fail-on-regression", "--metric", typo]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert f"--metric {typo}" in err and why in err and "ndcg@5" in err, err
    with pytest.raises(UserError, match="mapp"):
        compare(load_evaluation(old), load_evaluation(new), metrics=["mapp"])
    # an evaluation without the column (an older baseline), named as the workflow's setting
    o = load_evaluation(old)
    o.per_query = o.per_query.drop("mrr")
    with pytest.raises(UserError, match=r"evaluate.compare.metrics: mrr: 'mrr' is a column of .*new's per_query"):
        compare(o, load_evaluation(new), metrics=["mrr"], metrics_key="evaluate.compare.metrics:")
    assert main(["compare", str(old), str(new), "--fail-on-regression", "--metric", "ndcg@5"]) == 1


def test_compare_refuses_other_judgments_and_names_missing_folders(big, tmp_path, capsys):
    old = _evaluate(big, 1.0, "v1", tmp_path / "old")
    qrels = pl.read_ndjson(big / "qrels.jsonl")
    write_table(qrels.with_columns(pl.when(pl.col("query_id") == "q00").then(1 - pl.col("relevance_label"))
                                   .otherwise(pl.col("relevance_label")).alias("relevance_label")),
                "qrels", big / "qrels.jsonl")
    new = _evaluate(big, 1.0, "v1", tmp_path / "new")
    assert main(["compare", str(old), str(new)]) == 1
    assert "different judgments" in capsys.readouterr().err
    assert main(["compare", str(old), str(new), "--allow-different-judgments"]) == 0
    assert main(["compare", str(tmp_path / "nothing"), str(new)]) == 1
    assert "no evaluation here" in capsys.readouterr().err


def test_evaluate_with_a_baseline_flags_regressions_in_the_report(big, tmp_path):
    from benchmaker.evaluate import stage
    from benchmaker.evaluate.report import summary_sections
    from benchmaker.pages.report import md_table

    hist = tmp_path / "history"
    old = _evaluate(big, 1.0, "v1", tmp_path / "old")
    assert main(["keep-evaluation", str(old), str(hist), "--tag", "deploy-v1"]) == 0
    _evaluate(big, 0.25, "v2", tmp_path / "new")
    d = big / "evaluate"
    names = ["base", "prod"]

    def aggregate(**kw):
        return stage.run(qrels=str(big / "qrels.jsonl"), images=str(big / "images.jsonl"),
                           annotations=str(big / "annotations.jsonl"),
                           runs=[str(d / "runs" / f"{n}.trec") for n in names],
                           metas=[str(d / "runs" / f"{n}.json") for n in names],
                           leaderboard_csv=str(d / "leaderboard.csv"), leaderboard_json=str(d / "leaderboard.json"),
                           drilldown=str(d / "drilldown.csv"), significance_csv=str(d / "significance.csv"),
                           per_query=str(d / "per_query.csv"),
                           settings={"k": [5], "compare": {"baseline": str(hist), "min_delta": 0.05}}, **kw)

    from benchmaker.evaluate.compare import baseline_files

    aggregate(baseline=baseline_files(hist), comparison=[str(d / "comparison.csv")])
    t = pl.read_csv(d / "comparison.csv")
    assert t.filter((pl.col("system") == "prod") & (pl.col("metric") == "ndcg@5"))["regression"].to_list() == [True]
    doc = json.loads((d / "comparison.json").read_text())
    assert doc["old"] == "deploy-v1" and doc["new"] == "this evaluation" and str(tmp_path) not in json.dumps(doc)
    sections = summary_sections(d / "leaderboard.csv", tmp_path / "report")
    sec = sections[-1]
    assert sec.title == "Compared with the baseline" and "REGRESSION(S)" in sec.text
    assert "| REGRESSION | prod |" in md_table(sec.table, max_rows=80)
    assert (tmp_path / "report" / "evaluate" / "comparison.md").is_file()
    # without a baseline no stale comparison stays behind, and the report has no such section
    aggregate()
    assert not (d / "comparison.csv").exists()
    assert all(s.title != "Compared with the baseline" for s in summary_sections(d / "leaderboard.csv",
                                                                                  tmp_path / "report2"))


def test_baseline_in_the_workflow(tmp_path, tiny_cfg, big):
    import support

    hist = tmp_path / "history"
    assert main(["keep-evaluation", str(_evaluate(big, 1.0, "v1", tmp_path / "old")), str(hist), "--tag", "t1"]) == 0
    tiny_cfg["evaluate"] = {"systems": [{"name": "bm25", "kind": "bm25"}], "compare": {"baseline": str(hist)}}
    r = support.snakemake(["-n", "-c1", "-p", "evaluate"], tmp_path, support.write_config(tmp_path / "c.yaml",
                                                                                             tiny_cfg))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "evaluate/comparison.csv" in out and str(hist / "t1" / "per_query.csv") in out
    # the run's own evaluate/ folder cannot be its baseline
    res = Path(tiny_cfg["paths"]["results"]) / tiny_cfg["benchmark"]["name"] / "evaluate"
    shutil.copytree(hist / "t1", res)
    tiny_cfg["evaluate"]["compare"]["baseline"] = str(res)
    r = support.snakemake(["-n", "-c1", "evaluate"], tmp_path, support.write_config(tmp_path / "c2.yaml", tiny_cfg))
    assert r.returncode != 0 and "keep-evaluation" in r.stdout + r.stderr

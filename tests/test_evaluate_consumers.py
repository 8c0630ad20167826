"""What a user of another system brings to the evaluate stage (a TREC run file) and what the tools that read
the published benchmark report on it: the leaderboard must give trec_eval's numbers on the user's own file."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from openai_helpers import images_frame

from benchmaker.evaluate import systems
from benchmaker.evaluate.runs import read_run
from benchmaker.formats import FormatError, write_table
from benchmaker.ids import trec_id


@pytest.fixture()
def bench(tmp_path, tiny_corpus) -> Path:
    """The tiny corpus's images, two queries whose pools hold half of them (every third relevant)."""
    imgs = images_frame(tiny_corpus).drop("caption")
    write_table(imgs, "images", tmp_path / "images.jsonl")
    ids = imgs["image_id"].to_list()
    rows = []
    for n in range(2):
        for j, iid in enumerate(ids[n::2]):
            rows.append({"query_id": f"q{n}", "query_text": f"query {n}", "image_id": iid,
                         "relevance_label": int(j % 3 == 0), "pool": "seed" if j == 0 else "hard",
                         "is_seed": j == 0, "seed_not_relevant": False, "judge": "test"})
    write_table(pl.DataFrame(rows), "qrels", tmp_path / "qrels.jsonl")
    return tmp_path


def _external(bench: Path, path: Path, name: str = "other") -> dict:
    out = bench / "evaluate" / "runs"
    out.mkdir(parents=True, exist_ok=True)
    system = {"name": name, "kind": "trec_run", "path": str(path)}
    systems.run(system=system, systems=[system], qrels=str(bench / "qrels.jsonl"), images=str(bench / "images.jsonl"),
                run_file=str(out / f"{name}.trec"), meta=str(out / f"{name}.json"),
                losses=str(bench / "losses" / f"{name}.jsonl"), costs=str(bench / "costs" / f"{name}.jsonl"))
    return out / f"{name}.trec"


def _qrels_dict(bench: Path) -> dict:
    q = pl.read_ndjson(bench / "qrels.jsonl")
    out: dict = {}
    for a, b, c in q.select("query_id", "image_id", "relevance_label").iter_rows():
        out.setdefault(trec_id(a), {})[trec_id(b)] = int(c)
    return out


def _trec_eval(qrels: dict, run_file: Path) -> dict:
    """trec_eval's numbers (pytrec_eval is trec_eval's code: its tie rule is trec_eval's) on a run file."""
    import pytrec_eval

    run: dict = {}
    for line in run_file.read_text().splitlines():
        q, _, d, _, s, _ = line.split()
        run.setdefault(q, {})[d] = float(s)
    per = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "map", "recip_rank", "P.5"}).evaluate(run)
    return {m: float(np.mean([per[q][m] for q in per])) for m in ("ndcg_cut_10", "map", "recip_rank", "P_5")}


def test_ties_in_a_users_run_are_broken_as_trec_eval_breaks_them(bench):
    """A user's run with tied scores (4 score levels over the whole corpus): the run the evaluate stage
    writes, and so the leaderboard, rank the tied images as trec_eval ranks the user's own file (by
    document id, descending), not by image id ascending."""
    ids = pl.read_ndjson(bench / "images.jsonl")["image_id"].to_list()
    rng = random.Random(7)
    user = bench / "user.trec"
    with open(user, "w") as fh:
        for q in ("q0", "q1"):
            scored = sorted(((round(rng.random() * 3) / 3, d) for d in ids), key=lambda x: -x[0])
            fh.writelines(f"{q} Q0 {trec_id(d)} {i} {s:.4f} user\n" for i, (s, d) in enumerate(scored, 1))
    ours = _external(bench, user)
    qrels = _qrels_dict(bench)
    want, got = _trec_eval(qrels, user), _trec_eval(qrels, ours)
    assert got == pytest.approx(want, abs=1e-9)
    # the order itself: within a tie, the larger document id first
    first = read_run(ours).filter(pl.col("query_id") == "q0").sort("score", descending=True)
    user_q0 = [ln.split() for ln in user.read_text().splitlines() if ln.startswith("q0 ")]
    top = max(float(x[4]) for x in user_q0)
    tied = sorted((x[2] for x in user_q0 if float(x[4]) == top), reverse=True)
    assert [trec_id(x) for x in first["image_id"].to_list()[:len(tied)]] == tied


def _user_run(bench: Path, path: Path, qmap=lambda q: q, dmap=trec_id) -> Path:
    ids = pl.read_ndjson(bench / "images.jsonl")["image_id"].to_list()
    with open(path, "w") as fh:
        for q in ("q0", "q1"):
            fh.writelines(f"{qmap(q)} Q0 {dmap(d)} {i} {1 - i / 100} user\n" for i, d in enumerate(ids, 1))
    return path


@pytest.mark.parametrize(("what", "qmap", "dmap", "match"), [
    ("query", lambda q: f"oldbench_{q}", trec_id, r"none of the 2 query ids .*'oldbench_q0'.*'q0'"),
    ("image", lambda q: q, lambda d: f"other/{d}", r"none of the \d+ image ids .*'other/"),
])
def test_a_run_for_another_benchmark_is_an_error_naming_the_ids(bench, what, qmap, dmap, match):
    """A run none of whose query (or image) ids is the benchmark's (made for another benchmark or version)
    would score 0 everywhere with a warning only: it is an error that shows both kinds of ids."""
    run = _user_run(bench, bench / "old.trec", qmap, dmap)
    with pytest.raises(FormatError, match=match):
        _external(bench, run)
    # a run with some unknown lines is a documented treatment: those lines are dropped and listed
    with open(run, "a") as fh:
        fh.write(_user_run(bench, bench / "ok.trec").read_text())
    _external(bench, bench / "old.trec", name="mixed")
    lost = pl.read_ndjson(bench / "losses" / "mixed.jsonl")
    assert lost.height and set(lost["reason"]) == {f"unknown_{what}"}


@pytest.mark.parametrize("sep", [" ", "\t"])  # the fast reader (single spaces) and the careful one
def test_a_nan_score_is_an_error_naming_the_line(tmp_path, sep):
    """A NaN score orders nothing (trec_eval's qsort then gives an arbitrary ranking, polars sorts NaN
    first): it is an error naming the file and line, never a document at rank 1."""
    path = tmp_path / "nan.trec"
    lines = ["q1 Q0 a 1 0.9 x", "q1 Q0 b 2 nan x", "q1 Q0 c 3 0.1 x"]
    path.write_text("".join(sep.join(x.split()) + "\n" for x in lines))
    with pytest.raises(FormatError, match=r"nan\.trec:2: .*score.*NaN"):
        read_run(path)


def test_a_duplicate_image_is_an_error_naming_the_fix(tmp_path):
    """trec_eval refuses a run that lists an image twice for a query ("duplicate docs"); so do we, saying
    which image, which query and what to do."""
    path = tmp_path / "dup.trec"
    path.write_text("q1 Q0 a 1 0.9 x\nq1 Q0 b 2 0.5 x\nq1 Q0 a 3 0.4 x\n")
    with pytest.raises(FormatError, match=r"'a' appears twice for query 'q1'.*keep one line per \(query, image\)"):
        read_run(path)


def test_significance_gives_the_difference_and_its_interval_as_scipy_does(numba_cache):
    """significance.csv says by how much (delta = mean_a - mean_b) and how sure: the paired-t interval of
    the difference at 1 - max_p and the number of queries, equal to scipy's on per-query nDCG@3 that
    pytrec_eval (trec_eval's code) computes independently."""
    import pytrec_eval

    from benchmaker.evaluate.runs import set_numba_cache

    set_numba_cache(str(numba_cache))  # ranx loads its compiled functions (before it is first imported)
    from ranx import Qrels, Run
    from scipy import stats

    from benchmaker.evaluate.metrics import significance

    rng = np.random.default_rng(3)
    docs = [f"d{i}" for i in range(8)]
    qrels = {f"q{j}": {d: int(rng.random() < 0.4) for d in docs} for j in range(12)}
    for q in qrels.values():
        q["d0"] = 1
    runs = {n: {q: {d: float(rng.random() + bias * (qrels[q][d])) for d in docs} for q in qrels}
            for n, bias in (("good", 0.6), ("poor", 0.1), ("mid", 0.3))}
    sig = significance(Qrels(qrels), {n: Run(r, name=n) for n, r in runs.items()}, ["ndcg@3"], "student", "holm", 0.1)
    per = {n: pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.3"}).evaluate(r) for n, r in runs.items()}
    assert sig.height == 3
    for row in sig.iter_rows(named=True):
        a = np.array([per[row["system_a"]][q]["ndcg_cut_3"] for q in sorted(qrels)])
        b = np.array([per[row["system_b"]][q]["ndcg_cut_3"] for q in sorted(qrels)])
        t = stats.ttest_rel(a, b)
        ci = t.confidence_interval(0.9)
        assert row["queries"] == 12 and row["delta"] == pytest.approx(a.mean() - b.mean(), abs=1e-12)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((ci.low, ci.high), abs=1e-9)
        assert row["p_value"] == pytest.approx(t.pvalue, abs=1e-9)


def test_card_and_report_say_which_system_is_better_by_how_much_and_how_sure(tmp_path):
    """The card and the report answer the benchmark's question in words: per scope and pair, which system
    is better, by how much (with its interval) and how sure (p corrected over the pairs), and that a system
    reading the judge's text is not comparable."""
    from benchmaker.evaluate.report import card_markdown, verdict_section

    ev = tmp_path / "evaluate"
    ev.mkdir()
    board = (("bm25", "bm25", True, 0.97), ("clip", "clip", False, 0.72), ("clip2", "clip", False, 0.70))
    pl.DataFrame([{"system": s, "kind": k, "scope": "pool", "sees_judge_text": sees, "queries": 8, "ndcg@10": v,
                   "map": v, "mrr": v} for s, k, sees, v in board]).write_csv(ev / "leaderboard.csv")
    rows = [("ndcg@10", "bm25", "clip", 0.97, 0.72, 0.25, 0.10, 0.40, 0.0059, 0.0118, True),
            ("ndcg@10", "clip", "clip2", 0.72, 0.70, 0.02, -0.05, 0.09, 0.51, 0.51, False),
            ("ndcg@10", "bm25", "clip2", 0.97, 0.70, 0.27, 0.12, 0.42, 0.004, 0.012, True),
            ("map", "bm25", "clip", 0.9, 0.6, 0.3, 0.1, 0.5, 0.01, 0.01, True)]
    cols = ["metric", "system_a", "system_b", "mean_a", "mean_b", "delta", "ci_low", "ci_high", "p_value",
            "p_adjusted", "significant"]
    sig = pl.DataFrame([dict(zip(cols, r)) for r in rows]).with_columns(
        queries=pl.lit(8), test=pl.lit("student"), correction=pl.lit("holm"), scope=pl.lit("pool"))
    sig.write_csv(ev / "significance.csv")
    (ev / "leaderboard.json").write_text('{"max_p": 0.05}')
    for f in ("drilldown.csv", "sage_leaderboard.csv"):
        (ev / f).write_text("")
    md = card_markdown(ev / "leaderboard.csv")
    assert "### Which system is better" in md
    line = next(x for x in md.splitlines() if x.startswith("| pool | ndcg@10 | bm25 | clip |"))
    assert "0.25" in line and "0.1" in line and "0.4" in line and "0.0118" in line and "bm25 is better" in line
    assert "bm25 sees what the judge saw" in line
    tie = next(x for x in md.splitlines() if x.startswith("| pool | ndcg@10 | clip | clip2 |"))
    assert "no significant difference" in tie and "sees" not in tie
    assert not any(x.startswith("| pool | map |") for x in md.splitlines())  # the main metric only; all in the file
    verdict = verdict_section(ev / "leaderboard.csv")  # the report's section (summary_sections, after the board)
    assert verdict.title == "Which system is better" and "95% paired-t confidence interval" in verdict.text
    assert verdict.table.height == 3 and "bm25 is better" in verdict.table["verdict"].to_list()[0]


@pytest.mark.parametrize(("labels", "scale"), [
    ("binary", "1 = relevant, 0 = not relevant"),
    ("graded", "0 = not relevant, 1 = partially relevant, 2 = relevant, 3 = highly relevant")])
def test_card_says_what_a_relevance_label_means_and_how_the_tools_count_it(labels, scale):
    """A reader of the card (who sees neither the config schema nor docs/judge-rules.md) learns the scale of
    this benchmark's labels and that ranx / trec_eval / BEIR / mteb count every label >= 1 as relevant."""
    from benchmaker.export.card import render_card
    from benchmaker.formats import FacetModel

    fm = FacetModel.from_config({"taxonomy": {}, "boolean": [], "tags": {"min": 0, "max": 3, "vocabulary": []}})
    counts = {"rows": 5, "queries": 2, "images": 5, "positive_pairs": 2,
              "positives_per_query": {"mean": 1.0, "min": 1, "max": 1}, "queries_without_positives": 0,
              "relevance_distribution": {"0": 3, "1": 2}, "seed_not_relevant_queries": 0, "pairs_without_clip_score": 0}
    from datasets import Features, Value

    no_losses = pl.DataFrame(schema={"stage": pl.String, "item_type": pl.String, "reason": pl.String})
    md = render_card(meta={"name": "x", "title": "X"}, features=Features({"relevance_label": Value("int64")}),
                     files=[], split="test", counts=counts, checks={}, losses=no_losses,
                     quarantine=pl.DataFrame(schema={"reason": pl.String}), costs=None,
                     config={"judge": {"adapter": "rules", "labels": labels}}, similarity={}, summary={}, columns={},
                     image_col="image", facets=fm, repo_id=None, config_digest="0" * 64, version="v")
    counts_part = md[md.index("Relevance labels"):md.index("## How it was built")]
    assert scale in counts_part and "every label of 1 or more as relevant" in counts_part
    column = next(x for x in md.splitlines() if x.startswith("| `relevance_label` |"))
    assert scale in column and f"judge.labels: {labels}" in column


def _mteb_folder(root: Path, split: str = "test") -> Path:
    """The mteb view of an export (docs/export.md), two images and one query, written as the export does."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = {"corpus": pa.table({"id": ["a.jpg", "b.jpg"], "image": [{"bytes": b"x", "path": "a.jpg"},
                                                                     {"bytes": b"y", "path": "b.jpg"}]}),
              "queries": pa.table({"id": ["q1"], "text": ["red"]}),
              "qrels": pa.table({"query-id": ["q1", "q1"], "corpus-id": ["a.jpg", "b.jpg"],
                                 "score": pa.array([1, 0], pa.int64())})}
    for name, t in tables.items():
        (root / "mteb" / name).mkdir(parents=True, exist_ok=True)
        pq.write_table(t, root / "mteb" / name / f"{split}-00000-of-00001.parquet")
    return root


def test_benchmaker_mteb_checks_the_exported_folder_and_names_the_fix(tmp_path):
    """`benchmaker mteb` on a folder without the mteb view (an export from before it, a copy that lost a
    file) said mteb's "The split names could not be parsed from the dataset config."; it now checks the
    documented files, columns and ids first and says what is wrong and what to do."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchmaker.evaluate.mteb_task import check_export, run

    folder = _mteb_folder(tmp_path / "ok")
    check_export(folder, "test")  # the documented layout passes
    with pytest.raises(ValueError, match=r"split 'train'.*has 'test'"):
        check_export(folder, "train")
    gone = _mteb_folder(tmp_path / "gone")
    shutil.rmtree(gone / "mteb" / "qrels")
    with pytest.raises(ValueError, match=r"mteb/qrels/test-\*\.parquet.*missing.*snakemake .*export"):
        run(dataset=str(gone), model="unused")
    bad = _mteb_folder(tmp_path / "bad")
    pq.write_table(pa.table({"query-id": ["q1"], "corpus-id": ["c.jpg"], "score": ["1"]}),
                   bad / "mteb" / "qrels" / "test-00000-of-00001.parquet")
    with pytest.raises(ValueError, match=r"mteb/qrels.*score.*int"):
        check_export(bad, "test")
    pq.write_table(pa.table({"query-id": ["q1"], "corpus-id": ["c.jpg"], "score": pa.array([1], pa.int64())}),
                   bad / "mteb" / "qrels" / "test-00000-of-00001.parquet")
    with pytest.raises(ValueError, match=r"'c\.jpg'.*not in mteb/corpus"):
        check_export(bad, "test")

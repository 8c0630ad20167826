"""Summary stage: every output exists, PNGs are images, numbers equal hand counts."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import polars as pl
import pytest
from support import TINY_FACETS

from benchmaker.formats import FacetModel, write_table

COLORS = ("red", "green", "blue", "yellow", "gray")


def _images(corpus: Path) -> list[dict]:
    from PIL import Image

    rows = []
    for p in sorted(corpus.rglob("*")):
        if not p.is_file() or p.parent.name == "broken":
            continue
        rel = p.relative_to(corpus).as_posix()
        with Image.open(p) as im:
            w, h = im.size
        data = p.read_bytes()
        rows.append({
            "image_id": rel, "image_url": None, "mime_type": "image/jpeg" if p.suffix == ".jpg" else "image/png",
            "width": w, "height": h, "file_size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "phash": "0" * 16, "license": "CC-BY-4.0" if rel.startswith("red/") else "CC0-1.0",
            "doi": "10.0000/red" if rel.startswith("red/") else None,
            "original_dataset_name": "reds" if rel.startswith("red/") else "tiny",
        })
    return rows


def build_inputs(tmp: Path, corpus: Path, columns: dict | None = None, with_costs: bool = True) -> dict:
    """Hand-made canonical inputs of every kind, written with write_table; returns run() kwargs + truth."""
    fm = FacetModel.from_config(TINY_FACETS)
    d = tmp / "results"
    d.mkdir(parents=True, exist_ok=True)
    imgs = _images(corpus)
    ids = [r["image_id"] for r in imgs]
    write_table(pl.DataFrame(imgs), "images", d / "images.jsonl", columns=columns)
    write_table(pl.DataFrame({"path": ["broken/truncated.jpg", "broken/not_an_image.jpg", "broken/empty.png"],
                              "reason": ["truncated", "not_an_image", "empty_file"], "detail": ["x", None, None]}),
                "quarantine", d / "quarantine.jsonl")
    ann = []
    for i in ids[:-1]:  # the last image is not annotated (lost by vision)
        color, shape = i.split("/")[0], i.split("/")[1].split("_")[0]
        ann.append({"image_id": i, "summary": f"a {color} {shape}", "tags": [color, shape],
                    "confidence": {"color": 0.9, "shape": 0.8, "is_bright": 0.5}, "annotator": "hand",
                    "color": color, "shape": shape, "is_bright": color in ("yellow", "red")})
    write_table(pl.DataFrame(ann), "annotations", d / "annotations.jsonl", columns=columns, facets=fm)
    lost_vision = ids[-1]

    # 4 queries; seeds: red/circle_0, green/square_0, blue/stripes_0, gray/circle_0
    def img(color, shape, i):
        return next(x for x in ids if x.startswith(f"{color}/{shape}_{i}."))

    queries = [
        ("tiny_q0001", "a red circle", img("red", "circle", 0),
         [(img("red", "circle", 1), "positive", 1), (img("red", "square", 0), "hard", 1),
          (img("blue", "circle", 0), "nearmiss", 0), (img("gray", "stripes", 1), "easy", 0)], 0.9),
        ("tiny_q0002", "a green square", img("green", "square", 0),
         [(img("green", "square", 1), "positive", 1), (img("yellow", "square", 0), "hard", 0),
          (img("blue", "square", 1), "nearmiss", 0)], 0.8),
        ("tiny_q0003", "blue stripes", img("blue", "stripes", 0),
         [(img("blue", "stripes", 1), "positive", 1), (img("red", "circle", 1), "easy", 0),
          (img("green", "circle", 0), "neutral", 0), (img("yellow", "circle", 1), "hard", 0)], 0.7),
        # the seed is judged not relevant and no other candidate is: a query with 0 positives
        ("tiny_q0004", "a gray circle", img("gray", "circle", 0),
         [(img("gray", "square", 0), "hard", 0), (img("yellow", "stripes", 0), "easy", 0)], 0.6),
    ]
    plan_rows, qrels = [], []
    for n, (qid, text, seed, cands, base) in enumerate(queries):
        cand_structs = [{"image_id": seed, "pool": "seed", "reason": "seed"}] + [
            {"image_id": c, "pool": p, "reason": "r"} for c, p, _ in cands]
        plan_rows.append({
            "query_id": qid, "seed_image_ids": [seed], "candidate_image_ids": [c["image_id"] for c in cand_structs],
            "candidates": cand_structs, "difficulty": "hard" if n % 2 else "easy",
            "shortfall": ([{"pool": "nearmiss", "wanted": 2, "got": 0, "reason": "no candidates"}] if n == 3 else []),
        })
        seed_rel = 0 if n == 3 else 1
        judge = "imported:imsearch_benchmaker" if n == 3 else "hand"    # labels reused from paths.judge_reuse_file
        rows = [{"query_id": qid, "query_text": text, "image_id": seed, "relevance_label": seed_rel, "pool": "seed",
                 "is_seed": True, "seed_not_relevant": seed_rel == 0, "judge": judge}]
        rows += [{"query_id": qid, "query_text": text, "image_id": c, "relevance_label": r, "pool": p,
                  "is_seed": False, "seed_not_relevant": seed_rel == 0, "judge": judge} for c, p, r in cands]
        for k, row in enumerate(rows):
            # positives score higher, except query 3 where a negative outranks the positive
            row["clip_score"] = round(base - 0.05 * k + (0.2 if row["relevance_label"] else 0.0), 4)
        if n == 2:
            rows[2]["clip_score"] = 2.0  # easy negative ranked first
        if n == 1:
            rows[-1]["clip_score"] = None  # one pair without a score
        if n == 0:
            rows = rows[1:] + rows[:1]  # seed row not first in the file: export must reorder
        qrels += rows
    qdf = pl.DataFrame(qrels).with_columns(
        pl.col("clip_score").rank("ordinal", descending=True).over("query_id").cast(pl.Int64).alias("clip_rank"))
    write_table(pl.DataFrame(plan_rows), "query_plan", d / "query_plan.jsonl", columns=columns)
    write_table(qdf, "qrels_with_score", d / "qrels_with_score.jsonl", columns=columns)
    (d / "losses").mkdir(exist_ok=True)
    from benchmaker.losses import Losses

    lv = Losses("vision")
    lv.add("image", lost_vision, "refusal", "the model refused")
    lv.write(d / "losses/vision.jsonl")
    lp = Losses("plan")
    lp.add("query", "tiny_q0005", "no_candidates", "seed had no neighbours")
    lp.add("query", "tiny_q0006", "no_candidates", None)
    lp.write(d / "losses/plan.jsonl")
    lj = Losses("judge")
    lj.add("pair", "blue/square_0.png", "invalid_answer", "bad json", attempts=3, query_id="tiny_q0002")
    lj.write(d / "losses/judge.jsonl")
    Losses("similarity").write(d / "losses/similarity.jsonl")
    kw = dict(
        images=str(d / "images.jsonl"), quarantine=str(d / "quarantine.jsonl"),
        annotations=str(d / "annotations.jsonl"), plan=str(d / "query_plan.jsonl"),
        scored=str(d / "qrels_with_score.jsonl"),
        losses=[str(d / f"losses/{s}.jsonl") for s in ("vision", "plan", "judge", "similarity")],
        facets=TINY_FACETS, columns=columns or {}, image_root=str(corpus),
        benchmark_meta={"name": "tiny", "title": "Tiny bench", "description": "tiny test benchmark",
                        "authors": [{"name": "Ada Lovelace", "affiliation": "Analytical"}],
                        "license": "cc-by-4.0", "citation": None, "version": "0.1"},
        version="abc123", threads=2,
    )
    if with_costs:
        write_table(pl.DataFrame({
            "stage": ["vision", "vision", "judge"], "item_id": ["a", "b", "tiny_q0001"],
            "model": ["gpt-5-mini"] * 3, "mode": ["batch", "batch", "sync"], "input_tokens": [100, 200, 300],
            "cached_input_tokens": [0, 50, 0], "output_tokens": [10, 20, 30], "reasoning_tokens": [1, 2, 3],
            "cost_usd": [0.001, 0.002, 0.004], "cached": [False, True, False]}), "costs", d / "costs_vision.jsonl")
        kw["costs"] = [str(d / "costs_vision.jsonl")]
        # a recorded estimate (`benchmaker estimate --record`): the bill of vision falls in its range, the judge's not
        entry = {"model": "gpt-5-mini", "mode": "batch", "pilot_requests": 0, "pilot_usd": 0.0, "calibrated_on": 0,
                 "output_from": "answer schema + reasoning allowance", "assumes": ["x"], "source": "plan quotas"}
        (d / "estimate").mkdir(exist_ok=True)
        (d / "estimate" / "estimate.json").write_text(json.dumps({"version": 1, "stages": {
            "vision": {**entry, "requests": 2, "usd": 0.0025, "low_usd": 0.001, "high_usd": 0.005},
            "judge": {**entry, "requests": 1, "usd": 0.01, "low_usd": 0.006, "high_usd": 0.02}}}))
        kw["estimate"] = str(d / "estimate" / "estimate.json")
    kw["_truth"] = {"qrels": qdf, "queries": queries, "image_ids": ids, "annotated": len(ann)}
    return kw


EXPECTED_FILES = [
    "summary.json", "report.html", "report.md", "dataset_summary_stats.csv", "relevance_overview.csv",
    "relevance_overview.png", "query_relevancy_stats.csv", "queries_without_positives.csv", "positives_per_query.png",
    "facet_distribution.csv", "facet_distributions.png", "relevance_by_facet.csv", "relevance_by_color.png",
    "relevance_by_shape.png", "relevance_by_is_bright.png", "top_tags.csv", "clip_score_stats_by_relevance.csv",
    "clip_score_overall_stats.csv", "clip_score_histogram.csv", "clip_score_by_query_stats.csv",
    "clip_score_analysis.png", "clip_ranking_metrics.csv", "clip_ranking_by_query.csv", "clip_ranking_by_query.png",
    "pool_mix.csv", "pool_mix.png", "plan_shortfalls.csv", "plan_shortfalls.png", "difficulty_distribution.csv",
    "difficulty_distribution.png", "losses_by_stage.csv", "quarantine_by_reason.csv", "losses.png",
    "cost_summary.csv", "estimate_vs_bill.csv",
    "query_text_length.csv", "query_text_length_distribution.png", "random_image_sample.png",
]


@pytest.fixture(scope="module")
def summary_run(tmp_path_factory, tiny_corpus):
    from benchmaker.summary.stage import run

    tmp = tmp_path_factory.mktemp("summary")
    kw = build_inputs(tmp, tiny_corpus)
    truth = kw.pop("_truth")
    out = tmp / "results" / "summary"
    numbers = run(summary=str(out), settings={"sample_grid": 6, "scale_factor": 1.0}, **kw)
    return out, numbers, truth, kw


def _csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_output_exists_and_pngs_are_images(summary_run):
    from PIL import Image

    out, _, _, _ = summary_run
    missing = [f for f in EXPECTED_FILES if not (out / f).is_file()]
    assert not missing, missing
    for png in out.glob("*.png"):
        with Image.open(png) as im:
            im.verify()
        with Image.open(png) as im:
            assert im.format == "PNG" and im.width > 50 and im.height > 30, png
    # every file the stage writes is documented
    doc = (Path(__file__).resolve().parents[1] / "docs" / "summary.md").read_text()
    undocumented = [p.name for p in out.iterdir()
                    if p.name not in doc and not p.name.startswith("relevance_by_")]
    assert not undocumented, undocumented
    # no temporary folders left behind
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".summary")]
    html = (out / "report.html").read_text()
    for png in out.glob("*.png"):
        assert png.name in html
    assert "| queries with reused labels (paths.judge_reuse_file, not judged again) | 1 (3 pairs) |" in (
        out / "report.md").read_text()


def test_estimate_beside_the_bill(summary_run):
    """The recorded estimate per stage beside the spend to date (issue 34): vision billed 0.003 (its
    cached row's cost included, as the totals count it) inside 0.001..0.005; the judge 0.004 below its
    range."""
    out, n, _, _ = summary_run
    rows = {r["stage"]: r for r in _csv(out / "estimate_vs_bill.csv")}
    assert float(rows["vision"]["billed_usd"]) == pytest.approx(0.003) and rows["vision"]["within_range"] == "true"
    assert rows["vision"]["billed_requests"] == "1" and rows["vision"]["estimated_requests"] == "2"
    assert float(rows["judge"]["bill_over_estimate"]) == pytest.approx(0.4) and rows["judge"]["within_range"] == "false"
    assert {r["stage"] for r in n["estimate_vs_bill"]} == {"vision", "judge"}
    assert "Estimate vs bill" in (out / "report.md").read_text()


def test_numbers_equal_hand_counts(summary_run):
    _, n, truth, _ = summary_run
    q = truth["qrels"]
    assert n["pairs"] == q.height == 17
    assert n["queries"] == 4
    assert n["images_in_pairs"] == q["image_id"].n_unique()
    assert n["images_in_corpus"] == 30 and n["annotated_images"] == 29
    assert n["relevance_distribution"] == {"0": 10, "1": 7}
    assert n["positive_pairs"] == 7
    assert n["positives_per_query"] == {"mean": 1.75, "median": 2.0, "min": 0, "max": 3}
    assert n["queries_without_positives"] == 1
    assert n["queries_without_positives_ids"] == ["tiny_q0004"]
    assert n["seed_not_relevant_queries"] == 1 and n["seed_not_relevant_pairs"] == 3
    assert n["clip_score"]["missing"] == 1
    assert n["losses"] == {"judge": {"invalid_answer": 1}, "plan": {"no_candidates": 2}, "vision": {"refusal": 1}}
    assert n["losses_total"] == 4
    assert n["quarantine"] == {"empty_file": 1, "not_an_image": 1, "truncated": 1} and n["quarantine_total"] == 3
    assert n["shortfall"] == {"queries": 1, "missing_candidates": 2}
    assert n["pools"]["seed"] == {"planned_candidates": 4, "judged_pairs": 4, "positives": 3}
    assert n["pools"]["hard"]["judged_pairs"] == 4 and n["pools"]["hard"]["positives"] == 1
    c = n["costs"]
    assert c["requests"] == 3 and c["cached_requests"] == 1 and abs(c["cost_usd"] - 0.007) < 1e-9
    assert c["by_stage"]["vision"]["input_tokens"] == 300 and c["by_stage"]["judge"]["output_tokens"] == 30
    assert len(n["sample_images"]) == 6
    assert n["judges"] == {"hand": {"queries": 3, "pairs": 14},
                           "imported:imsearch_benchmaker": {"queries": 1, "pairs": 3}}
    from benchmaker.export.card import _reused_labels

    assert _reused_labels(n).startswith(", except for 1 queries (3 pairs) whose query text and labels were reused")
    assert "`imsearch_benchmaker`" in _reused_labels(n) and _reused_labels({"judges": {"hand": {}}}) == ""


def test_ranking_quality_by_hand(summary_run):
    out, n, _, _ = summary_run
    rk = n["clip_ranking"]
    # q1, q2: positives ranked on top -> MRR 1; q3: a negative first, the 2 positives next -> RR 1/2;
    # q4 has no positive and is left out
    assert rk["evaluated_queries"] == 3 and rk["skipped_queries_without_positive"] == 1
    assert rk["mrr"] == pytest.approx((1 + 1 + 0.5) / 3, abs=1e-6)
    per = {r["query_id"]: r for r in _csv(out / "clip_ranking_by_query.csv")}
    assert float(per["tiny_q0003"]["mrr"]) == pytest.approx(0.5)
    assert float(per["tiny_q0001"]["ndcg@10"]) == pytest.approx(1.0)
    import math
    # q3: relevant at ranks 2 and 3 of 5 -> DCG = 1/log2(3) + 1/log2(4), IDCG = 1 + 1/log2(3)
    exp = (1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3))
    assert float(per["tiny_q0003"]["ndcg@10"]) == pytest.approx(exp, abs=1e-6)


def test_csv_contents(summary_run):
    out, _, truth, _ = summary_run
    stats = _csv(out / "dataset_summary_stats.csv")[0]
    assert stats["Total Qrel Rows"] == "17" and stats["Unique Queries"] == "4"
    assert stats["Relevant Pairs"] == "7" and stats["Not Relevant Pairs"] == "10"
    assert stats["Relevance Rate"] == f"{100 * 7 / 17:.2f}%"
    assert stats["Queries Without Positives"] == "1"
    qs = {r["query_id"]: r for r in _csv(out / "query_relevancy_stats.csv")}
    assert qs["tiny_q0001"]["positives"] == "3" and qs["tiny_q0001"]["count"] == "5"
    assert qs["tiny_q0004"]["no_positives"] == "true"
    assert [r["query_id"] for r in _csv(out / "queries_without_positives.csv")] == ["tiny_q0004"]
    facets = {(r["facet"], r["value"]): int(r["images"]) for r in _csv(out / "facet_distribution.csv")}
    assert facets[("color", "red")] == 6 and facets[("color", "unknown")] == 0
    # yellow/stripes_1.png (last id) is not annotated
    assert facets[("shape", "circle")] == 10 and facets[("shape", "stripes")] == 9 and facets[("color", "yellow")] == 5
    assert facets[("is_bright", "true")] == 11 and facets[("is_bright", "false")] == 18
    by_rel = {r["Relevance Label"]: r for r in _csv(out / "clip_score_stats_by_relevance.csv")}
    pos_scores = truth["qrels"].filter(pl.col("relevance_label") == 1)["clip_score"]
    assert float(by_rel["1"]["Mean"]) == pytest.approx(pos_scores.mean())
    assert by_rel["0"]["Missing"] == "1"
    short = _csv(out / "plan_shortfalls.csv")
    assert short == [{"pool": "nearmiss", "reason": "no candidates", "queries": "1", "wanted": "2", "got": "0",
                      "missing": "2"}]
    losses = {(r["stage"], r["reason"]): int(r["count"]) for r in _csv(out / "losses_by_stage.csv")}
    assert losses == {("judge", "invalid_answer"): 1, ("plan", "no_candidates"): 2, ("vision", "refusal"): 1}
    diff = {r["value"]: int(r["queries"]) for r in _csv(out / "difficulty_distribution.csv")}
    assert diff == {"easy": 2, "hard": 2}
    cost = _csv(out / "cost_summary.csv")
    assert {(r["stage"], r["mode"]): int(r["requests"]) for r in cost} == {("judge", "sync"): 1, ("vision", "batch"): 2}


def test_rerun_replaces_output_and_refuses_foreign_folder(summary_run, tmp_path):
    from benchmaker.summary.stage import run

    out, n, _, kw = summary_run
    again = run(summary=str(out), settings={"sample_grid": 4, "scale_factor": 0.5}, **{**kw, "costs": None})
    assert again["costs"] is None and again["pairs"] == n["pairs"]
    assert len(json.loads((out / "summary.json").read_text())["sample_images"]) == 4
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("user file")
    with pytest.raises(FileExistsError):
        run(summary=str(foreign), settings={"sample_grid": 2, "scale_factor": 0.5}, **kw)
    assert (foreign / "keep.txt").read_text() == "user file"


def test_configured_column_names(tmp_path, tiny_corpus):
    from benchmaker.summary.stage import run

    cols = {"query_id": "qid", "relevance_label": "rel", "image_id": "img_id", "clip_score": "score"}
    kw = build_inputs(tmp_path, tiny_corpus, columns=cols, with_costs=False)
    kw.pop("_truth")
    raw = (tmp_path / "results" / "qrels_with_score.jsonl").read_text()
    assert '"qid"' in raw and '"query_id"' not in raw
    n = run(summary=str(tmp_path / "s"), settings={"sample_grid": 0, "scale_factor": 0.5}, **kw)
    assert n["pairs"] == 17 and n["positive_pairs"] == 7 and n["sample_images"] == []


def test_ranking_metrics_equal_ranx():
    """The polars metrics match ranx on random graded pools with missing scores (ranx is the reference)."""
    import random

    from ranx import Qrels, Run, evaluate

    from benchmaker.summary.stats import RANKING_METRICS, clip_ranking

    rnd = random.Random(7)
    rows = []
    for q in range(40):
        for i in range(rnd.randint(3, 25)):
            rows.append({"query_id": f"q{q:03d}", "image_id": f"img{i:03d}",
                         "relevance_label": rnd.choice([0, 0, 0, 1, 2, 3]) if q % 9 else 0,
                         "clip_score": None if rnd.random() < 0.1 else rnd.random()})
    df = pl.DataFrame(rows)
    per, overall, info = clip_ranking(df)
    qrels = {}
    run = {}
    for r in rows:
        if r["relevance_label"] > 0:
            qrels.setdefault(r["query_id"], {})[r["image_id"]] = r["relevance_label"]
        if r["clip_score"] is not None and r["query_id"] in {x["query_id"] for x in rows if x["relevance_label"] > 0}:
            run.setdefault(r["query_id"], {})[r["image_id"]] = r["clip_score"]
    for q in qrels:
        run.setdefault(q, {})
    ref_run = Run.from_dict(run)
    means = evaluate(Qrels.from_dict(qrels), ref_run, list(RANKING_METRICS), make_comparable=True,
                     save_results_in_run=True)
    assert info["evaluated_queries"] == len(qrels) == per.height
    mine = dict(zip(overall["metric"], overall["value"]))
    for m in RANKING_METRICS:
        assert mine[m] == pytest.approx(float(means[m]), abs=1e-9), m
        ref = ref_run.scores[m]
        for qid, v in per.select("query_id", m).iter_rows():
            assert v == pytest.approx(float(ref[qid]), abs=1e-9), (m, qid)


def test_shortfalls_grouped_by_cause_not_per_query_detail():
    """The planner's reason carries per-query search counts after ': '; the summary groups by the cause."""
    from benchmaker.summary.stats import shortfalls

    sf = lambda pool, w, g, r: {"pool": pool, "wanted": w, "got": g, "reason": r}  # noqa: E731
    plan = pl.DataFrame({
        "query_id": ["q1", "q2", "q3"],
        "shortfall": [
            [sf("neutral", 1, 0, "too few neutral images: searched 2 images; excluded 1"),
             sf("hard", 2, 1, "too few core-matching images: searched 9 images")],
            [sf("neutral", 1, 0, "too few neutral images: searched 12 images; excluded 3")],
            [sf("neutral", 2, 1, "no colon at all")],
        ],
    }, schema={"query_id": pl.String, "shortfall": pl.List(pl.Struct(
        {"pool": pl.String, "wanted": pl.Int64, "got": pl.Int64, "reason": pl.String}))})
    got = {(r["pool"], r["reason"]): r for r in shortfalls(plan).iter_rows(named=True)}
    assert set(got) == {("neutral", "too few neutral images"), ("hard", "too few core-matching images"),
                        ("neutral", "no colon at all")}
    n = got[("neutral", "too few neutral images")]
    assert (n["queries"], n["wanted"], n["got"], n["missing"]) == (2, 2, 0, 2)
    assert got[("neutral", "no colon at all")]["missing"] == 1


def _md_tables(md: str) -> list[list[str]]:
    tables, cur = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            tables.append(cur)
            cur = []
    return tables


def test_report_has_no_header_only_tables_and_says_why(tmp_path, tiny_corpus):
    """Empty tables (no queries without positives, no losses, no API costs) become a sentence."""
    from benchmaker.losses import Losses
    from benchmaker.summary.stage import run

    kw = build_inputs(tmp_path, tiny_corpus, with_costs=False)
    kw.pop("_truth")
    for p in kw["losses"]:
        Losses(Path(p).stem).write(p)  # no losses at all
    empty_costs = tmp_path / "costs_empty.jsonl"
    empty_costs.write_text("")
    out = tmp_path / "summary"
    run(summary=str(out), settings={"sample_grid": 4, "scale_factor": 0.5}, **{**kw, "costs": [str(empty_costs)]})
    md = (out / "report.md").read_text()
    for table in _md_tables(md):
        assert len(table) > 2, f"header-only table in report.md: {table[0]}"
    assert "No stage lost an image, query or pair." in md
    assert "No API request was recorded" in md
    assert "3 file(s) quarantined by preprocess" in md
    html = (out / "report.html").read_text()
    assert "<tbody></tbody>" not in html


@pytest.mark.parametrize("block_bytes", [150, 1000, 64 << 20])
def test_corpus_counts_read_in_blocks_equal_the_whole_table(tmp_path, block_bytes):
    """The summary reads images/annotations block by block (memory bounded by a block and the pairs):
    the facet distribution, top tags and corpus counts equal those of the whole tables."""
    import random

    from benchmaker.summary import stats
    from benchmaker.summary.inputs import corpus_profile

    facets = {"taxonomy": {"color": ["red", "green", "blue"], "shape": ["round", "square"]},
              "boolean": ["bright"], "tags": {"min": 0, "max": 4, "vocabulary": []}}
    fm = FacetModel.from_config(facets)
    rnd = random.Random(3)
    n = 57
    ann = pl.DataFrame({
        "image_id": [f"d/im {k}.jpg" for k in range(n)], "summary": ["s"] * n,
        "tags": [rnd.sample(["a", "b", "c", "d", "e"], rnd.randint(0, 3)) for _ in range(n)],
        "confidence": [{"color": 0.5, "shape": 0.5, "bright": 0.5}] * n, "annotator": ["t"] * n,
        "color": [rnd.choice(["red", "green"]) for _ in range(n)],  # blue never appears: a zero count
        "shape": [rnd.choice(["round", "square"]) for _ in range(n)],
        "bright": [rnd.choice([True, False]) for _ in range(n)],
    })
    imgs = pl.DataFrame({
        "image_id": [f"d/im {k}.jpg" for k in range(n + 3)], "image_url": [None] * (n + 3),
        "mime_type": ["image/jpeg"] * (n + 3), "width": [4] * (n + 3), "height": [4] * (n + 3),
        "file_size": [9] * (n + 3), "sha256": [f"{k:064x}" for k in range(n + 3)], "phash": [None] * (n + 3),
        "license": ["CC0-1.0"] * (n + 3), "doi": [None] * (n + 3), "original_dataset_name": ["t"] * (n + 3),
    }, schema_overrides={"image_url": pl.String, "phash": pl.String, "doi": pl.String})
    cols = {"image_id": "file"}
    write_table(ann, "annotations", tmp_path / "a.jsonl", columns=cols, facets=fm)
    write_table(imgs, "images", tmp_path / "i.jsonl", columns=cols)
    c = corpus_profile(images=str(tmp_path / "i.jsonl"), annotations=str(tmp_path / "a.jsonl"), facets=fm,
                       columns=cols, block_bytes=block_bytes)
    assert (c.images, c.annotations) == (n + 3, n)
    assert stats.facet_distribution_counts(c.facet_counts, c.annotations, fm).equals(
        stats.facet_distribution(ann, fm))
    assert stats.top_tags_counts(c.tag_counts).equals(stats.top_tags(ann))
    assert {f: c.unique_values(f) for f in fm.names} == {f: ann[f].n_unique() for f in fm.names}
    # the same single pass keeps the rows of the scored images (what the summary holds in memory)
    from benchmaker.formats import read_table
    from benchmaker.summary.inputs import scan_corpus

    keep = pl.Series(["d/im 3.jpg", "d/im 40.jpg", "d/im 58.jpg", "not there"])
    c2, kept_imgs, kept_ann = scan_corpus(images=str(tmp_path / "i.jsonl"), annotations=str(tmp_path / "a.jsonl"),
                                          facets=fm, columns=cols, keep=keep, block_bytes=block_bytes)
    assert (c2.images, c2.annotations) == (c.images, c.annotations) and c2.tag_counts.sort("Tag").equals(
        c.tag_counts.sort("Tag"))
    assert kept_imgs.equals(read_table("images", tmp_path / "i.jsonl", columns=cols).filter(
        pl.col("image_id").is_in(keep.implode())))
    assert kept_ann.equals(read_table("annotations", tmp_path / "a.jsonl", columns=cols, facets=fm).filter(
        pl.col("image_id").is_in(keep.implode())))


def test_charts_render_in_the_helper_process_as_altair_saves_them(tmp_path):
    """benchmaker.chart_png renders the summary's charts beside the stage: the same PNG bytes as
    altair's Chart.save (same vl-convert call), in the helper process and in this one."""
    import altair as alt

    from benchmaker.chart_png import PngProcess
    from benchmaker.pages.charts import NEUTRAL, VL_VERSION, save
    from benchmaker.summary import charts

    overview = pl.DataFrame({"relevance_label": [0, 1], "pairs": [3, 5], "share": [0.375, 0.625]})
    pools = pl.DataFrame({"pool": ["seed", "easy"], "judged_pairs": [2, 4], "positives": [2, 1],
                          "relevance_rate": [1.0, 0.25]})
    chart = charts.relevance_overview(overview, pools)
    altair_png = tmp_path / "altair.png"
    chart.configure_view(stroke=None).configure_title(anchor="start", fontSize=14).configure_bar(
        color=NEUTRAL).configure_point(color=NEUTRAL).save(str(altair_png), format="png", scale_factor=1.5)
    assert alt.SCHEMA_VERSION.startswith("v" + VL_VERSION[1:].replace("_", ".") + ".")
    save(chart, tmp_path / "here.png", 1.5)
    with PngProcess() as png:
        save(chart, tmp_path / "helper.png", 1.5, png)
        save(chart, tmp_path / "helper_small.png", 0.5, png)
    assert (tmp_path / "here.png").read_bytes() == altair_png.read_bytes()
    assert (tmp_path / "helper.png").read_bytes() == altair_png.read_bytes()
    assert (tmp_path / "helper_small.png").read_bytes() != altair_png.read_bytes()  # scale reaches the helper


def test_a_chart_the_helper_cannot_render_fails_the_stage_naming_it(tmp_path):
    from benchmaker.chart_png import PngProcess

    with pytest.raises(RuntimeError, match=r"broken\.png: .*") as err:
        with PngProcess() as png:
            png.submit({"mark": "bar", "data": {"values": [{"a": 1}]}}, "v6_4", 1.0, tmp_path / "fine.png")
            png.submit({"mark": {"type": "no-such-mark"}}, "v6_4", 1.0, tmp_path / "broken.png")
    assert "fine.png" not in str(err.value)
    assert (tmp_path / "fine.png").is_file() and not (tmp_path / "broken.png").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left

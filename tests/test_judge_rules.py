"""The offline `rules` query writer and judge: hand-worked labels, query texts and narratives, losses,
finalize, and the two stages run one after the other (queries.run, then judge.run on queries.jsonl)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from benchmaker.formats import CANDIDATE, SHORTFALL, FacetModel, read_table, write_table
from benchmaker.judge import finalize, run
from benchmaker.judge.base import get_judge
from benchmaker.judge.rules import RulesJudge
from benchmaker.losses import Losses, read_losses
from benchmaker.queries import run as write_queries
from benchmaker.queries.rules import RulesWriter, compose_narrative, compose_text

FACETS = {
    "taxonomy": {"subject": ["cat", "dog", "car"], "setting": ["indoor", "outdoor"]},
    "boolean": ["person_present"],
    "tags": {"min": 0, "max": 10, "vocabulary": []},
}
FM = FacetModel.from_config(FACETS)

# Jaccard with s1 {cat, saucer, sofa, window} in the comments
ANN = [
    ("s1", "cat", "indoor", False, ["cat", "saucer", "sofa", "window"]),
    ("s2", "cat", "indoor", False, ["cat", "saucer", "sofa", "window"]),  # same annotation as s1
    ("c1", "cat", "indoor", False, ["cat", "sofa", "window", "rug"]),      # 3/5 = .60, core 2/2
    ("c2", "cat", "outdoor", False, ["cat", "grass", "tree", "window"]),   # 2/6 = .33, core 1/2
    ("c3", "cat", "indoor", True, ["cat", "rug", "lamp", "tv"]),           # 1/7 = .14, core 2/2
    ("c4", "dog", "outdoor", False, ["dog", "grass", "ball", "tree"]),     # 0/8 = 0,   core 0/2
    ("c5", "cat", "indoor", False, ["cat", "sofa", "lamp", "tv", "rug"]),  # 2/7 = .29, core 2/2
]


def ann_frame() -> pl.DataFrame:
    return pl.DataFrame({
        "image_id": [a[0] for a in ANN], "summary": [f"image {a[0]}" for a in ANN],
        "tags": [a[4] for a in ANN],
        "confidence": [{"subject": 1.0, "setting": 1.0, "person_present": 1.0} for _ in ANN],
        "annotator": ["hand"] * len(ANN),
        "subject": [a[1] for a in ANN], "setting": [a[2] for a in ANN], "person_present": [a[3] for a in ANN],
    })


def plan_row(qid, seeds, cands, profile=None):
    c = [{"image_id": s, "pool": "seed", "reason": "seed"} for s in seeds]
    c += [{"image_id": i, "pool": "hard", "reason": "hand"} for i in cands]
    row = {"query_id": qid, "seed_image_ids": seeds, "candidate_image_ids": [x["image_id"] for x in c],
           "candidates": c, "difficulty": {"seed": len(seeds), "hard": len(cands)}, "shortfall": []}
    if profile is not None:
        row["profile"] = profile
    return row


def plan_frame(rows, with_profile=True) -> pl.DataFrame:
    schema = {
        "query_id": pl.String, "seed_image_ids": pl.List(pl.String), "candidate_image_ids": pl.List(pl.String),
        "candidates": pl.List(CANDIDATE), "difficulty": pl.Struct({"seed": pl.Int64, "hard": pl.Int64}),
        "shortfall": pl.List(SHORTFALL),
    }
    if with_profile:
        schema["profile"] = pl.Struct({"subject": pl.String, "setting": pl.String})
    return pl.DataFrame(rows, schema=schema, orient="row")


CAT_INDOOR = {"subject": "cat", "setting": "indoor"}
Q1 = plan_row("q1", ["s1"], ["c1", "c2", "c3", "c4", "c5"], CAT_INDOOR)


def judge(settings=None, rows=(Q1,), with_profile=True):
    j = RulesJudge(facets=FM, settings={**(settings or {})}, image_root=".", cache_dir=None)
    loss = Losses("judge")
    plan = plan_frame(list(rows), with_profile)
    return plan, j.judge(plan, ann_frame(), pl.DataFrame(), loss), loss


def labels(df, qid="q1"):
    d = df.filter(pl.col("query_id") == qid)
    return dict(zip(d["image_id"].to_list(), d["relevance_label"].to_list()))


def test_binary_labels_by_hand():
    _, out, loss = judge()
    # relevant = all core facets agree and J >= .25: s1 (1.0), c1 (.60), c5 (.29)
    assert labels(out) == {"s1": 1, "c1": 1, "c2": 0, "c3": 0, "c4": 0, "c5": 1}
    assert out["image_id"].to_list() == ["s1", "c1", "c2", "c3", "c4", "c5"]  # plan order
    assert set(out["judge"]) == {"rules"} and "rationale" not in out.columns and len(loss) == 0


def test_graded_labels_and_rationale():
    _, out, _ = judge({"labels": "graded", "rationale": True})
    # 3: core 2/2 and J >= .5; 2: core 2/2 and J >= .25; 1: core 2/2 and J >= .1, or J >= .25; else 0
    assert labels(out) == {"s1": 3, "c1": 3, "c2": 1, "c3": 1, "c4": 0, "c5": 2}
    why = dict(zip(out["image_id"], out["rationale"]))
    assert why["c1"] == "core facets 2/2, jaccard 0.60"
    assert why["c2"] == "core facets 1/2, jaccard 0.33"
    assert why["c4"] == "core facets 0/2, jaccard 0.00"


def test_thresholds_are_settings():
    _, out, _ = judge({"relevant_min_core_match": 0.5})
    assert labels(out)["c2"] == 1  # half the core facets agree and J .33 >= .25
    _, out, _ = judge({"relevant_min_jaccard": 0.5})
    assert labels(out) == {"s1": 1, "c1": 1, "c2": 0, "c3": 0, "c4": 0, "c5": 0}


def test_no_profile_means_tags_only():
    rows = [plan_row("q1", ["s1"], ["c1", "c2", "c3", "c4", "c5"])]
    _, out, _ = judge({"rationale": True}, rows=rows, with_profile=False)
    assert labels(out) == {"s1": 1, "c1": 1, "c2": 1, "c3": 0, "c4": 0, "c5": 1}
    assert out.filter(pl.col("image_id") == "c2")["rationale"][0] == "no core facets, jaccard 0.33"


def written(plan, settings=None):
    """(the plan with the rules writer's query_text and narrative joined, the writer's losses)."""
    loss = Losses("queries")
    q = RulesWriter(facets=FM, settings=settings or {}).write(plan, ann_frame(), pl.DataFrame(), loss)
    return plan.join(q.drop("writer"), on="query_id", how="inner", maintain_order="left"), loss


def test_query_text_distinctive_tags_and_uniqueness():
    rows = [Q1, plan_row("q2", ["s2"], ["c1", "c4"], CAT_INDOOR), plan_row("q3", ["s1"], ["c2"], CAT_INDOOR)]
    out, loss = written(plan_frame(rows))
    t = dict(out.select("query_id", "query_text").iter_rows())
    assert len(loss) == 0 and out["query_id"].to_list() == ["q1", "q2", "q3"]
    # s1's tags by IDF: saucer (in 2 images), then sofa and window (4 each; by name) -> "saucer and sofa"
    assert t["q1"] == "a photo of a cat, indoor setting, with saucer and sofa"
    # q2 and q3 would collide with q1 (and each other): one more distinctive tag each time
    assert t["q2"] == "a photo of a cat, indoor setting, with saucer, sofa and window"
    assert t["q3"] == "a photo of a cat, indoor setting, with saucer, sofa, window and cat"
    assert len(set(t.values())) == 3


def test_compose_text_phrasing():
    assert compose_text([("subject", "cat", False), ("setting", "indoor", False), ("person_present", True, True),
                         ("is_grayscale", False, True)], ["coffee_cup"]) == \
        "a photo of a cat, indoor setting, person present, not grayscale, with coffee cup"
    assert compose_text([("viewpoint", "fixed_long_range", False), ("confounder_type", "none", False),
                         ("lighting", "unknown", False)], []) == \
        "a photo of a fixed long range viewpoint, no confounder"
    assert compose_text([], ["a", "b", "c"]) == "a photo, with a, b and c"
    assert compose_narrative([("subject", "cat", False), ("setting", "indoor", False)], ["saucer", "sofa"]) == (
        "A relevant image shows a cat as its main content, with indoor setting; saucer and sofa are visible. "
        "An image that shows these only as a background detail, or shows something else, is not relevant.")


def test_the_writer_sees_only_the_seeds():
    """The same seeds and profile give the same query whatever the pool (the candidates are not read)."""
    a, _ = written(plan_frame([Q1]))
    b, _ = written(plan_frame([plan_row("q1", ["s1"], ["c4"], CAT_INDOOR)]))
    assert a.select("query_text", "narrative").rows() == b.select("query_text", "narrative").rows()
    assert a["narrative"][0].startswith("A relevant image shows a cat as its main content")

def test_losses_and_finalize():
    rows = [Q1, plan_row("q2", ["ghost"], ["c1"], CAT_INDOOR), plan_row("q3", ["s2"], ["c1", "nope"], CAT_INDOOR)]
    plan, wloss = written(plan_frame(rows))
    assert [(r["item_id"], r["reason"]) for r in wloss.rows] == [("q2", "seed_not_annotated")]
    assert plan["query_id"].to_list() == ["q1", "q3"]      # q2 is lost writing its query: never labelled
    loss = Losses("judge")
    out = RulesJudge(facets=FM, settings={"labels": "graded", "rationale": True}).judge(plan, ann_frame(),
                                                                                          pl.DataFrame(), loss)
    assert "query_text" not in out.columns                 # the judge labels; it does not write the query
    q = finalize(plan, out, loss, judge_name="rules", graded=True)
    assert q["query_id"].unique(maintain_order=True).to_list() == ["q1"]  # q3 misses a candidate's label
    assert {(r["item_id"], r["reason"]) for r in loss.rows} == {("q3", "incomplete_judgment")}
    assert set(q["narrative"]) == {plan["narrative"][0]} and set(q["query_text"]) == {plan["query_text"][0]}
    assert q["image_id"].to_list()[0] == "s1" and q["is_seed"].to_list() == [True] + [False] * 5
    assert q["seed_not_relevant"].sum() == 0 and q["relevance_label"].max() == 3
    assert q["rationale"].null_count() == 0


def write_inputs(tmp_path, plan_rows, cols):
    """plan, annotations (ANN) and images files under configured column names; returns their paths."""
    plan_p, ann_p, img_p = tmp_path / "plan.jsonl", tmp_path / "ann.jsonl", tmp_path / "img.jsonl"
    write_table(plan_frame(plan_rows), "query_plan", plan_p, columns=cols)
    write_table(ann_frame(), "annotations", ann_p, columns=cols, facets=FM)
    n = len(ANN)
    write_table(pl.DataFrame({
        "image_id": [a[0] for a in ANN], "image_url": [None] * n, "mime_type": ["image/jpeg"] * n,
        "width": [1] * n, "height": [1] * n, "file_size": [1] * n, "sha256": [a[0] for a in ANN],
        "phash": [None] * n, "license": [None] * n, "doi": [None] * n, "original_dataset_name": ["x"] * n,
    }, schema_overrides={"image_url": pl.String, "phash": pl.String, "license": pl.String, "doi": pl.String}),
        "images", img_p, columns=cols)
    return plan_p, ann_p, img_p


def test_get_judge_and_run(tmp_path):
    assert get_judge("rules", facets=FM, settings={}, image_root=".", cache_dir=None).name == "rules"
    cols = {"image_id": "img", "query_text": "text"}
    plan_p, ann_p, img_p = write_inputs(tmp_path, [Q1], cols)
    q_p, l_p, w_p = tmp_path / "qrels.jsonl", tmp_path / "losses.jsonl", tmp_path / "queries.jsonl"
    write_queries(plan=str(plan_p), annotations=str(ann_p), images=str(img_p), queries=str(w_p),
                  losses=str(tmp_path / "wl.jsonl"), costs=str(tmp_path / "wc.jsonl"), adapter="rules",
                  settings={"query_tags": 1}, facets=FACETS, image_root=".", columns=cols)
    assert read_table("queries", w_p, columns=cols).rows() == [
        ("q1", "a photo of a cat, indoor setting, with saucer",
         "A relevant image shows a cat as its main content, with indoor setting; saucer is visible. An image that "
         "shows these only as a background detail, or shows something else, is not relevant.", "rules")]
    assert (tmp_path / "wc.jsonl").read_text() == "" and read_losses(tmp_path / "wl.jsonl").height == 0
    run(plan=str(plan_p), queries=str(w_p), annotations=str(ann_p), images=str(img_p), qrels=str(q_p),
        losses=str(l_p), adapter="rules", settings={"adapter": "rules", "labels": "binary", "rationale": True,
                                                    "adapter_settings": {"relevant_min_jaccard": 0.25}},
        facets=FACETS, image_root=".", columns=cols)
    first = json.loads(q_p.read_text().splitlines()[0])
    assert first["text"] == "a photo of a cat, indoor setting, with saucer" and first["img"] == "s1"
    assert first["narrative"].startswith("A relevant image shows a cat")
    qrels = read_table("qrels", q_p, columns=cols)
    assert dict(zip(qrels["image_id"], qrels["relevance_label"])) == labels(judge()[1])
    assert read_losses(l_p).height == 0


@pytest.mark.parametrize("labels_mode", ["binary", "graded"])
def test_deterministic(labels_mode):
    a = judge({"labels": labels_mode, "rationale": True})[1]
    b = judge({"labels": labels_mode, "rationale": True})[1]
    assert a.equals(b)


# ---- reused labels (paths.judge_reuse_file, benchmaker.judge.reuse) ---------------------------------

def _reuse_file(tmp_path, rows):
    p = tmp_path / "reuse.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


def _labelled(qid, text, labels, judge="imsearch_benchmaker", cols=None):
    c = cols or {}
    return [{c.get("query_id", "query_id"): qid, c.get("query_text", "query_text"): text,
             c.get("image_id", "image_id"): i, c.get("relevance_label", "relevance_label"): v, "judge": judge}
            for i, v in labels.items()]


def test_reuse_selection(tmp_path):
    from benchmaker.reuse import split_reused

    full = {"s1": 1, "c1": 0, "c2": 1}
    rows = [plan_row("qa", ["s1"], ["c1", "c2"]), plan_row("qb", ["s1"], ["c1", "c2"]),
            plan_row("qc", ["s1"], ["c1", "c2"]), plan_row("qd", ["s1"], ["c1", "c2"]),
            plan_row("qe", ["s1"], ["c1", "c2"]), plan_row("qf", ["s1"], ["c1"])]
    path = _reuse_file(tmp_path, [
        *_labelled("qa", "red circles", full),                       # covered: reused
        *_labelled("qb", "blue", {"s1": 1, "c1": 0}),                # c2 has no label: judged
        *_labelled("qc", "graded", {"s1": 3, "c1": 0, "c2": 2}),     # outside binary: judged (graded: reused)
        *_labelled("qd", "", full),                                  # no text: judged
        *_labelled("qe", "x", full), *_labelled("qe", "x", {"c1": 1}),  # conflicting labels: judged
        *_labelled("qf", "extra labels are fine", {"s1": 1, "c1": 1, "c9": 0}, judge=None),
        *_labelled("qz", "not planned", full),
    ])
    plan = plan_frame(rows, with_profile=False)
    rest, reused, costs = split_reused(plan, path, graded=False)
    assert rest["query_id"].to_list() == ["qb", "qc", "qd", "qe"]
    assert reused.filter(pl.col("query_id") == "qa").select("image_id", "relevance_label", "query_text",
                                                            "judge").rows() == [
        ("s1", 1, "red circles", "imported:imsearch_benchmaker"), ("c1", 0, "red circles",
                                                                   "imported:imsearch_benchmaker"),
        ("c2", 1, "red circles", "imported:imsearch_benchmaker")]
    assert set(reused.filter(pl.col("query_id") == "qf")["judge"]) == {"imported:file"}
    assert [(c["item_id"], c["mode"], c["cost_usd"], c["cached"]) for c in costs] == [
        ("qa", "imported", 0.0, True), ("qf", "imported", 0.0, True)]
    rest, reused, _ = split_reused(plan, path, graded=True)
    assert rest["query_id"].to_list() == ["qb", "qd", "qe"]
    assert split_reused(plan, None, graded=False)[0].height == plan.height


def test_run_answers_reused_queries_from_the_file(tmp_path):
    """run(): a fully labelled query keeps the file's text and labels (the rules judge would label it
    otherwise); the other is judged; the cost file has one $0 'imported' row; configured column names."""
    cols = {"image_id": "img", "query_text": "text"}
    plan_p, ann_p, img_p = write_inputs(tmp_path, [Q1, plan_row("q2", ["s2"], ["c4", "c5"], CAT_INDOOR)], cols)
    upstream = {"s1": 1, "c1": 0, "c2": 0, "c3": 1, "c4": 0, "c5": 0}     # not what the rules judge says
    reuse = _reuse_file(tmp_path, _labelled("q1", "an upstream query", upstream, cols=cols)
                        + _labelled("q2", "partial", {"s2": 1}, cols=cols))
    q_p, l_p, c_p = tmp_path / "qrels.jsonl", tmp_path / "losses.jsonl", tmp_path / "costs.jsonl"
    w_p = tmp_path / "queries.jsonl"
    write_queries(plan=str(plan_p), annotations=str(ann_p), images=str(img_p), queries=str(w_p),
                  losses=str(tmp_path / "wl.jsonl"), costs=str(tmp_path / "wc.jsonl"), adapter="rules",
                  settings={}, facets=FACETS, image_root=".", columns=cols, reuse=reuse, reuse_labels="binary")
    w = read_table("queries", w_p, columns=cols)
    # the imported query keeps the file's text (no narrative); the other is written
    assert w.select("query_id", "query_text", "writer").rows()[0] == ("q1", "an upstream query",
                                                                       "imported:imsearch_benchmaker")
    assert w["narrative"][0] is None and w["writer"][1] == "rules" and w["narrative"][1]
    run(plan=str(plan_p), queries=str(w_p), annotations=str(ann_p), images=str(img_p), qrels=str(q_p),
        losses=str(l_p), costs=str(c_p), adapter="rules",
        settings={"adapter": "rules", "labels": "binary", "rationale": False, "adapter_settings": {}},
        facets=FACETS, image_root=".", columns=cols, reuse=reuse)
    qrels = read_table("qrels", q_p, columns=cols)
    assert qrels["query_id"].to_list() == ["q1"] * 6 + ["q2"] * 3          # plan order kept
    q1 = qrels.filter(pl.col("query_id") == "q1")
    assert dict(zip(q1["image_id"], q1["relevance_label"])) == upstream
    assert set(q1["query_text"]) == {"an upstream query"} and set(q1["judge"]) == {"imported:imsearch_benchmaker"}
    assert set(qrels.filter(pl.col("query_id") == "q2")["judge"]) == {"rules"}
    costs = read_table("costs", c_p)
    assert costs.select("stage", "item_id", "mode", "cost_usd", "cached").rows() == [
        ("judge", "q1", "imported", 0.0, True)]
    assert read_losses(l_p).height == 0

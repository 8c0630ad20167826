"""Judge audit: sample determinism and strata, labelling files, label import validation, agreement
statistics against hand-worked values and reference libraries, second judge, ranking comparison, report."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import audit_support
import numpy as np
import polars as pl
import pytest

from benchmaker.audit import agreement as A
from benchmaker.audit import labelling as L
from benchmaker.audit import render as R
from benchmaker.audit import statistics as S
from benchmaker.audit.files import Scale, read_sample, read_sample_meta
from benchmaker.audit.labels import LabelImportError, import_labels
from benchmaker.audit.sample import allocate, draw_sample
from benchmaker.formats import FacetModel, read_table
from benchmaker.ids import trec_id


@pytest.fixture()
def bench(tmp_path):
    return audit_support.make_bench(tmp_path / "bench")


def _tables(paths):
    fm = FacetModel.from_config(audit_support.FACETS)
    return (read_table("qrels", paths["qrels"]), read_table("query_plan", paths["plan"]),
            read_table("annotations", paths["annotations"], facets=fm), fm)


# ---- sample --------------------------------------------------------------------------------------------

def test_allocate_hand_worked():
    # floor of 2 each (7), the other 13 in proportion 100:10:5:1 -> 11.2, 1.1, 0.6, 0.1 -> 11 + 1 + the
    # largest remainder (stratum 0) = 12 + 1
    assert allocate([100, 10, 5, 1, 0], 20, min_per_stratum=2) == [14, 3, 2, 1, 0]
    assert allocate([100, 10, 5, 1, 0], 20, allocation="equal") == [7, 7, 5, 1, 0]
    assert allocate([3, 3, 3], 20) == [3, 3, 3]  # everything when the sample is larger than the population
    assert allocate([100, 50], 5, min_per_stratum=5) == [3, 2]  # floor too large: equal shares
    with pytest.raises(ValueError, match="audit.allocation"):
        allocate([1], 1, allocation="neyman")


def test_sample_is_deterministic_stratified_and_weighted(bench):
    q, p, a, fm = _tables(bench)
    kw = dict(sample_size=40, seed=7, strata=["pool", "judge_label"], min_per_stratum=2)
    s1 = draw_sample(q, p, a, fm, **kw)
    s2 = draw_sample(q.sample(fraction=1.0, shuffle=True, seed=1), p, a, fm, **kw)  # row order is irrelevant
    assert s1.equals(s2)
    assert s1.height == 40 and s1["item_id"].n_unique() == 40
    other = draw_sample(q, p, a, fm, **(kw | {"seed": 8}))
    assert set(other["item_id"]) != set(s1["item_id"])
    # every stratum of the population is present (seed rows included), with at least min_per_stratum
    pop = q.with_columns(pl.concat_str([pl.lit("pool="), "pool", pl.lit("|judge_label="),
                                        pl.col("relevance_label").cast(pl.String)]).alias("stratum"))
    sizes = dict(pop.group_by("stratum").len().iter_rows())
    got = dict(s1.group_by("stratum").len().iter_rows())
    assert set(got) == set(sizes)
    assert all(got[k] >= min(2, sizes[k]) for k in sizes)
    assert s1.filter(pl.col("is_seed")).height >= 2
    for r in s1.iter_rows(named=True):
        assert r["stratum_size"] == sizes[r["stratum"]] and r["stratum_sample"] == got[r["stratum"]]
        assert r["weight"] == pytest.approx(sizes[r["stratum"]] / got[r["stratum"]])
    # within a stratum, the drawn pairs are the lowest priorities (bottom-k)
    from benchmaker.audit.sample import priority

    pr = pop.with_columns(pl.struct("query_id", "image_id").map_elements(
        lambda r: priority(7, r["query_id"], r["image_id"]), return_dtype=pl.Int64).alias("pr"))
    for stratum, k in got.items():
        want = set(pr.filter(pl.col("stratum") == stratum).sort("pr").head(k)
                   .select(pl.concat_str("query_id", "image_id", separator="\x1f")).to_series())
        have = set(s1.filter(pl.col("stratum") == stratum)
                   .select(pl.concat_str("query_id", "image_id", separator="\x1f")).to_series())
        assert want == have
    # the judge's labels and pools cannot be read from the order: queries are grouped, pairs shuffled
    assert s1["order"].to_list() == list(range(1, 41))
    firsts = s1.group_by("query_id", maintain_order=True).first()
    assert not firsts["is_seed"].all()


def test_sample_strata_by_facet_and_difficulty(bench):
    q, p, a, fm = _tables(bench)
    s = draw_sample(q, p, a, fm, sample_size=30, seed=1, strata=["difficulty", "color"], min_per_stratum=1)
    assert set(s["difficulty"]) <= {"low", "medium", "high"}
    assert "low" in set(s["difficulty"])  # every third query has no hard/near-miss negatives
    assert all(st.startswith("difficulty=") and "|color=" in st for st in s["stratum"])
    assert s.select(pl.col("facets").struct.field("color")).to_series().n_unique() == 3
    with pytest.raises(ValueError, match="audit.strata"):
        draw_sample(q, p, a, fm, sample_size=5, seed=1, strata=["colour"])


def test_more_queries_keep_the_sample_of_unchanged_strata(tmp_path):
    """Bottom-k: with the same allocation, adding pairs only ever swaps in pairs of lower priority."""
    a = audit_support.make_bench(tmp_path / "a", n_queries=12, images=False)
    q, p, ann, fm = _tables(a)
    s_all = draw_sample(q, p, ann, fm, sample_size=1000, seed=3, strata=[])
    assert s_all.height == q.height  # sample_size above the population: every pair
    small = draw_sample(q.head(50), p, ann, fm, sample_size=10, seed=3, strata=[])
    big = draw_sample(q, p, ann, fm, sample_size=10, seed=3, strata=[])
    kept = set(small["item_id"]) & set(big["item_id"])
    new = set(big["item_id"]) - kept
    worst_kept_small = small["priority"].max()
    added = big.filter(pl.col("item_id").is_in(list(new)))
    assert all(r["priority"] < worst_kept_small for r in added.iter_rows(named=True))


# ---- labelling files -------------------------------------------------------------------------------------

def test_labelling_files(bench, tmp_path):
    sample, meta = audit_support.draw(bench, tmp_path / "audit")
    out = tmp_path / "audit" / "labelling"
    info = L.run(sample=str(sample), sample_meta=str(meta), images=str(bench["images"]), labelling=str(out),
                 settings={"thumbnail_max_side": 64}, image_root=str(bench["image_root"]),
                 benchmark_meta={"name": "syn"})
    s = read_sample(sample)
    assert info["items"] == s.height
    html = (out / "label.html").read_text()
    assert html.count("data:image/jpeg;base64,") == s.height
    assert "http://" not in html and "https://" not in html and "<script src" not in html
    assert '"j":' not in html  # blind by default
    csv = pl.read_csv(out / "sample.csv")
    assert csv.columns == ["item_id", "query_id", "query_text", "image_id", "label", "rater"]
    assert csv["item_id"].to_list() == s["item_id"].to_list()
    cfg = ET.fromstring((out / "label_studio_config.xml").read_text())
    choices = [c.get("value") for c in cfg.iter("Choice")]
    assert choices == ["not relevant (0)", "relevant (1)"]
    assert [c.get("hotkey") for c in cfg.iter("Choice")] == ["0", "1"]
    tasks = json.loads((out / "label_studio_tasks.json").read_text())
    blind = json.loads((out / "label_studio_tasks_blind.json").read_text())
    assert len(tasks) == len(blind) == s.height and all("predictions" not in t for t in blind)
    for t, r in zip(tasks, s.iter_rows(named=True)):
        res = t["predictions"][0]["result"][0]
        assert res["from_name"] == cfg.find("Choices").get("name") and res["to_name"] == cfg.find("Image").get("name")
        assert res["value"]["choices"] == [Scale("binary").choice(r["judge_label"])]
        assert t["data"]["image"] == "/data/local-files/?d=" + r["image_id"].replace(" ", "%20")
    # shown on request
    L.run(sample=str(sample), sample_meta=str(meta), images=str(bench["images"]), labelling=str(out),
          settings={"show_judge_label": True, "thumbnail_max_side": 64}, image_root=str(bench["image_root"]))
    assert '"j":' in (out / "label.html").read_text()
    assert "judge_label" in pl.read_csv(out / "sample.csv").columns


# ---- import --------------------------------------------------------------------------------------------------

def _csv(path, rows, header="item_id,label"):
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return {"path": str(path)}


def test_import_formats_and_validation(bench, tmp_path):
    sample_p, meta_p = audit_support.draw(bench, tmp_path / "audit", sample_size=10)
    s = read_sample(sample_p)
    sid = read_sample_meta(meta_p)["sample_id"]
    scale = Scale("binary")
    ids = s["item_id"].to_list()
    ok = _csv(tmp_path / "bob.csv", [(i, k % 2) for k, i in enumerate(ids)])
    got = import_labels([ok], s, scale)
    assert got["rater"].unique().to_list() == ["bob"] and got.height == 10  # rater from the file name
    # query_id + image_id instead of item_id, and label names instead of numbers
    by_pair = tmp_path / "pairs.csv"
    pl.DataFrame({"query_id": s["query_id"], "image_id": s["image_id"],
                  "label": ["relevant" if k % 2 else "not relevant" for k in range(10)],
                  "rater": ["carol"] * 10}).write_csv(by_pair)
    got = import_labels([{"path": str(by_pair)}], s, scale)
    assert got["rater"].unique().to_list() == ["carol"] and got["label"].to_list() == [k % 2 for k in range(10)]
    # Label Studio export, two annotators in one file
    ls = [{"id": k, "data": {"item_id": i, "query_id": q, "image_id": im, "query_text": t},
           "annotations": [{"completed_by": {"email": "x@lab"}, "was_cancelled": False, "result": [
               {"from_name": "relevance", "to_name": "image", "type": "choices",
                "value": {"choices": [scale.choice(k % 2)]}}]},
               {"completed_by": 7, "result": [{"from_name": "relevance", "type": "choices",
                                                "value": {"choices": [scale.choice(1)]}}]}]}
          for k, (i, q, im, t) in enumerate(s.select("item_id", "query_id", "image_id", "query_text").iter_rows())]
    (tmp_path / "ls.json").write_text(json.dumps(ls))
    got = import_labels([{"path": str(tmp_path / "ls.json"), "rater": "lab"}], s, scale)
    assert sorted(got["rater"].unique().to_list()) == ["lab:7", "lab:x@lab"]
    # the page's export
    page = {"format": "benchmaker-audit-labels", "version": 1, "sample_id": sid, "rater": "dana",
            "labels": [{"item_id": i, "label": 1} for i in ids]}
    (tmp_path / "page.json").write_text(json.dumps(page))
    assert import_labels([{"path": str(tmp_path / "page.json")}], s, scale)["rater"][0] == "dana"

    def err(rows, match, header="item_id,label", **kw):
        with pytest.raises(LabelImportError, match=match):
            import_labels([_csv(tmp_path / "bad.csv", rows, header)], s, scale, **kw)

    err([(i, 0) for i in ids] + [("ffffffffffffffff", 1)],
        r"bad.csv: row 12: item 'ffffffffffffffff' is not in the audit sample")
    err([(i, 2 if k == 3 else 0) for k, i in enumerate(ids)], r"bad.csv: row 5: label '2' is not on the binary scale")
    err([(i, 0) for i in ids[:-1]], r"bad.csv: rater 'bad' has no label for 1 of 10 sample pair\(s\), first: item "
        + ids[-1])
    assert import_labels([_csv(tmp_path / "part.csv", [(i, 0) for i in ids[:4]] + [(i, "") for i in ids[4:]])],
                         s, scale, require_complete=False).height == 4
    err([(i, 0) for i in ids] + [(ids[0], 1)], r"row 12: rater 'bad' labelled item .* twice \(first at .*row 2\)")
    err([("q", "img", 1)], r"row 2: pair \(query 'q', image 'img'\) is not in the audit sample",
        header="query_id,image_id,label")
    err([(ids[0], s["query_id"][0], "another text", 1)], r"row 2: the query text 'another text' differs",
        header="item_id,query_id,query_text,label")
    with pytest.raises(LabelImportError, match="no 'label' column"):
        import_labels([_csv(tmp_path / "nolabel.csv", [(ids[0],)], "item_id")], s, scale)
    with pytest.raises(LabelImportError, match="human label file not found"):
        import_labels([{"path": str(tmp_path / "nope.csv")}], s, scale)
    with pytest.raises(LabelImportError, match="called 'judge'"):
        import_labels([{"path": ok["path"], "rater": "judge"}], s, scale)


def test_label_studio_csv_export(bench, tmp_path):
    """Label Studio's CSV export of the project's labelling config, as label-studio-converter's csv2 writes it
    (columns sorted, non-numeric values quoted, one row per annotation, the task's data as columns, the
    choice under the Choices name): one rater per annotator, cancelled annotations left out."""
    import csv

    sample_p, meta_p = audit_support.draw(bench, tmp_path / "audit", sample_size=10)
    s = read_sample(sample_p)
    scale = Scale("binary")
    rows = []
    for k, r in enumerate(s.iter_rows(named=True)):
        data = {"image": "/data/local-files/?d=" + r["image_id"], "query_text": r["query_text"],
                "item_id": r["item_id"], "query_id": r["query_id"], "image_id": r["image_id"], "sample_id": "x"}
        for n, (who, lab) in enumerate((("x@lab", k % 2), ("7", 1))):
            rows.append({**data, "id": k + 1, L.LS_FROM: scale.choice(lab), "annotator": who,
                         "annotation_id": 2 * k + n + 1, "created_at": "2026-11-28T10:00:00Z",
                         "updated_at": "2026-11-28T10:00:00Z", "lead_time": 3.5, "was_cancelled": False})
    rows.append({**rows[0], "annotator": "x@lab", L.LS_FROM: scale.choice(1), "annotation_id": 99,
                 "was_cancelled": True})  # a cancelled second try: not a label, not a duplicate
    path = tmp_path / "project-1-at-2026-11-28.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=sorted(rows[0]), quoting=csv.QUOTE_NONNUMERIC)
        w.writeheader()
        w.writerows(rows)
    got = import_labels([{"path": str(path), "rater": "lab"}], s, scale)
    assert sorted(got["rater"].unique().to_list()) == ["lab:7", "lab:x@lab"] and got.height == 20
    alice = got.filter(pl.col("rater") == "lab:x@lab").sort("item_id")
    assert alice["label"].to_list() == [k % 2 for k, _ in sorted(enumerate(s["item_id"]), key=lambda t: t[1])]
    one = tmp_path / "one.csv"
    pl.read_csv(path, infer_schema=False).filter(pl.col("annotator") == "x@lab").write_csv(one)
    assert import_labels([{"path": str(one)}], s, scale)["rater"].unique().to_list() == ["labelstudio:x@lab"]
    # a Label Studio CSV without the tasks' ids (tasks not made from label_studio_tasks*.json): pointed to JSON
    pl.read_csv(one, infer_schema=False).drop("item_id", "query_id").write_csv(tmp_path / "noid.csv")
    with pytest.raises(LabelImportError, match=r"needs an 'item_id' column.*Export → JSON"):
        import_labels([{"path": str(tmp_path / "noid.csv")}], s, scale)


def _json_min(tasks: list[dict]) -> str:
    """Label Studio's JSON-MIN export of ``tasks`` (the full JSON export's shape), written as label-studio-sdk's
    converter writes it (``Converter.convert_to_json_min``, src/label_studio_sdk/converter/converter.py): per
    task, one record per annotation not cancelled (newest first), a task without annotations one record
    without a choice; a record is the task's data, ``id``, the Choices value made plain (``prettify_result``:
    the one choice as a string, else ``{"choices": [...]}``), ``annotator`` (``get_annotator``: the email of
    a user object, else the id), ``annotation_id``, ``created_at``, ``updated_at``, ``lead_time``."""
    records = []
    for task in tasks:
        anns = [a for a in task.get("annotations") or [] if not (a.get("skipped") or a.get("was_cancelled"))]
        for ann in (sorted(anns, key=lambda a: a.get("created_at", 0), reverse=True) if task["annotations"]
                    else [{}]):
            rec = json.loads(json.dumps(task["data"]))
            rec["id"] = task["id"]
            for r in ann.get("result") or []:
                picked = r["value"]["choices"]
                rec[r["from_name"]] = picked[0] if len(picked) == 1 else {"choices": picked}
            who = ann.get("completed_by", {})
            rec["annotator"] = who.get("email") if isinstance(who, dict) else who
            for k in ("annotation_id", "created_at", "updated_at", "lead_time"):
                rec[k] = ann.get("id" if k == "annotation_id" else k)
            records.append(rec)
    return "[\n" + ",\n".join(json.dumps(r, indent=2, ensure_ascii=False) for r in records) + "\n]"


def test_label_studio_json_min_export(bench, tmp_path):
    """Label Studio's JSON-MIN export (Export → JSON-MIN): one flat record per annotation, read as the full JSON
    export is (one rater per annotator, cancelled annotations absent, an unlabelled task not a label), validated."""
    sample_p, meta_p = audit_support.draw(bench, tmp_path / "audit", sample_size=10)
    s = read_sample(sample_p)
    scale = Scale("binary")

    def ann(n, who, lab, cancelled=False):
        return {"id": n, "completed_by": who, "was_cancelled": cancelled, "lead_time": 4.2,
                "created_at": f"2026-11-28T10:{n:02d}:00Z", "updated_at": f"2026-11-28T10:{n:02d}:00Z",
                "result": [{"from_name": L.LS_FROM, "to_name": L.LS_TO, "type": "choices",
                            "value": {"choices": [scale.choice(lab)]}}]}

    tasks = []
    for k, r in enumerate(s.iter_rows(named=True)):
        data = {"image": "/data/local-files/?d=" + r["image_id"], "query_text": r["query_text"],
                "item_id": r["item_id"], "query_id": r["query_id"], "image_id": r["image_id"], "sample_id": "x"}
        tasks.append({"id": k + 1, "data": data, "annotations": [
            ann(3 * k + 1, {"id": 1, "email": "x@lab"}, k % 2), ann(3 * k + 2, 7, 1),
            ann(3 * k + 3, 7, 0, cancelled=True)]})
    path = tmp_path / "project-1-at-2026-11-28-json-min.json"
    path.write_text(_json_min(tasks), encoding="utf-8")
    assert json.loads(path.read_text())[0]["relevance"] == scale.choice(1)  # the newest annotation first
    got = import_labels([{"path": str(path), "rater": "lab"}], s, scale)
    assert sorted(got["rater"].unique().to_list()) == ["lab:7", "lab:x@lab"] and got.height == 20
    x = dict(got.filter(pl.col("rater") == "lab:x@lab").select("item_id", "label").iter_rows())
    assert x == {r["item_id"]: k % 2 for k, r in enumerate(s.iter_rows(named=True))}
    # one annotator, one task not labelled yet: a record without a choice is no label
    one = [{**t, "annotations": t["annotations"][:1] if k else []} for k, t in enumerate(tasks)]
    path.write_text(_json_min(one), encoding="utf-8")
    got = import_labels([{"path": str(path)}], s, scale, require_complete=False)
    assert got["rater"].unique().to_list() == ["labelstudio:x@lab"] and got.height == 9
    with pytest.raises(LabelImportError, match="rater 'labelstudio:x@lab' has no label for 1 of 10"):
        import_labels([{"path": str(path)}], s, scale)

    def refused(recs, match):
        (tmp_path / "bad.json").write_text(json.dumps(recs))
        with pytest.raises(LabelImportError, match=match):
            import_labels([{"path": str(tmp_path / "bad.json")}], s, scale)

    rec = json.loads(_json_min(tasks[:1]))[0]
    refused([rec, {**rec, "relevance": {"choices": ["a", "b"]}}], r"bad.json: record \[1\]: expected one choice")
    refused([{k: v for k, v in rec.items() if k not in ("item_id", "query_id")}],
            r"record \[0\]: needs the task's item_id .*label_studio_tasks")
    refused([{k: v for k, v in rec.items() if k != "relevance"}],
            r"record \[0\]: annotation 2 has no 'relevance' choice .*label_studio_config.xml")
    refused([rec, "x"], r"record \[1\] is not an object")
    refused([{**rec, "relevance": "very relevant"}], r"record \[0\]: label 'very relevant' is not on the binary")


# ---- statistics ------------------------------------------------------------------------------------------------

A_LAB = [0, 0, 1, 1, 0, 1, 0, 0, 1, 1]
B_LAB = [0, 1, 1, 1, 0, 0, 0, 0, 1, 1]


def test_kappa_alpha_fleiss_hand_worked():
    # 8 of 10 agree; each rater says 1 five times: p_o = 0.8, p_e = 0.5*0.5 + 0.5*0.5 = 0.5 -> (0.8-0.5)/0.5
    assert A.cohen(A_LAB, B_LAB, [0, 1]) == pytest.approx(0.6)
    assert A.kappa_from_counts(A.confusion(A_LAB, B_LAB, [0, 1])) == pytest.approx(0.6)
    assert A.confusion(A_LAB, B_LAB, [0, 1]).tolist() == [[4, 1], [1, 4]]
    # Krippendorff (nominal, 2 raters, no missing): coincidences o_01 = o_10 = 2, n_0 = n_1 = 10, n = 20:
    # alpha = 1 - (n - 1) * o_01 / (n_0 * n_1) = 1 - 19 * 2 / 100 = 0.62
    assert A.krippendorff_alpha(np.array([A_LAB, B_LAB], float), "nominal") == pytest.approx(0.62)
    # Fleiss: mean P_i = 0.8, p_0 = p_1 = 0.5 -> P_e = 0.5 -> (0.8 - 0.5) / 0.5
    assert A.fleiss(np.array([A_LAB, B_LAB], float), [0, 1]) == (pytest.approx(0.6), 10)
    # missing ratings: alpha uses the pairable values only; Fleiss the complete items only
    m = np.array([A_LAB + [1], B_LAB + [np.nan]], float)
    assert A.krippendorff_alpha(m, "nominal") == pytest.approx(0.62)
    assert A.fleiss(m, [0, 1])[1] == 10
    # undefined: both raters always say 0
    assert A.cohen([0, 0, 0], [0, 0, 0], [0, 1]) is None
    assert A.krippendorff_alpha(np.zeros((2, 3)), "nominal") is None


def test_statistics_match_reference_libraries():
    from sklearn.metrics import cohen_kappa_score
    from statsmodels.stats.inter_rater import aggregate_raters, cohens_kappa, fleiss_kappa

    rng = np.random.default_rng(0)
    for graded in (False, True):
        labels = [0, 1, 2, 3] if graded else [0, 1]
        a = rng.integers(0, len(labels), 300)
        b = np.where(rng.random(300) < 0.7, a, rng.integers(0, len(labels), 300))
        cm = A.confusion(a, b, labels)
        assert A.kappa_from_counts(cm) == pytest.approx(cohen_kappa_score(a, b))
        assert A.kappa_from_counts(cm) == pytest.approx(cohens_kappa(cm, return_results=False))
        assert A.kappa_from_counts(cm, "quadratic") == pytest.approx(cohen_kappa_score(a, b, weights="quadratic"))
        c = np.where(rng.random(300) < 0.6, a, rng.integers(0, len(labels), 300))
        mat = np.vstack([a, b, c]).astype(float)
        assert A.fleiss(mat, labels)[0] == pytest.approx(fleiss_kappa(aggregate_raters(mat.T.astype(int))[0]))


def test_bootstrap_intervals():
    a, b = np.array(A_LAB * 10), np.array(B_LAB * 10)
    strata = np.array(["x", "y"] * 50)
    ci = A.bootstrap_pair(a, b, [0, 1], strata=strata, reps=500, seed=1, confidence=0.95)
    lo, hi = ci["kappa"].bounds
    assert lo < 0.6 < hi and hi - lo < 0.5
    assert ci["kappa"].replicates == 500 and ci["kappa"].undefined == 0 and not ci["kappa"].degenerate
    lo, hi = ci["agreement"].bounds
    assert lo < 0.8 < hi
    assert A.bootstrap_pair(a, b, [0, 1], strata=strata, reps=500, seed=1, confidence=0.95) == ci
    assert A.bootstrap_pair(a, b, [0, 1], strata=strata, reps=500, seed=2, confidence=0.95) != ci
    # within-strata resampling keeps every replicate's stratum counts
    idx = A.bootstrap_indices(strata, 100, 20, np.random.default_rng(0))
    assert all((strata[row] == "x").sum() == 50 for row in idx)
    # one replicate equals scikit-learn on the resampled pairs
    from sklearn.metrics import cohen_kappa_score

    one = A.bootstrap_indices(None, 100, 1, np.random.default_rng(5))[0]
    cm = A.confusion(a[one], b[one], [0, 1])
    assert A.kappa_from_counts(cm) == pytest.approx(cohen_kappa_score(a[one], b[one]))


def test_degenerate_bootstrap_is_said_so():
    """Rater a says 1 twenty times; rater b 1 nineteen times and 0 once. kappa = 0 (p_o = p_e = 0.95); a
    replicate without the one 0 has both raters on one label, so kappa is undefined there: about
    (19/20)^20 = 36 % of the replicates. Every defined replicate gives exactly 0: the interval [0, 0] has
    width zero and must be reported as degenerate, with the count of undefined replicates."""
    a, b = np.ones(20, int), np.array([1] * 19 + [0])
    assert A.cohen(a, b, [0, 1]) == 0.0
    iv = A.bootstrap_pair(a, b, [0, 1], strata=None, reps=1000, seed=4, confidence=0.95)["kappa"]
    # the undefined replicates are exactly those that never draw the one 0 (the same index streams)
    streams = np.random.SeedSequence(4).spawn(1000 // A.BLOCK + 1)
    idx = np.vstack([A.bootstrap_indices(None, 20, min(A.BLOCK, 1000 - k * A.BLOCK), np.random.default_rng(ss))
                     for k, ss in enumerate(streams) if k * A.BLOCK < 1000])
    assert iv.undefined == int((~(idx == 19).any(axis=1)).sum())
    assert 300 < iv.undefined < 420 and iv.replicates == 1000
    assert iv.bounds == (0.0, 0.0) and iv.degenerate
    # the report says so, next to the interval
    s = pl.DataFrame({"item_id": [f"i{k}" for k in range(20)], "query_id": ["q"] * 20,
                      "image_id": [f"m{k}" for k in range(20)], "judge_label": [1] * 20, "stratum": ["all"] * 20,
                      "weight": [1.0] * 20, "pool": ["positive"] * 20, "difficulty": ["low"] * 20,
                      "judge": ["rules"] * 20})
    humans = pl.DataFrame({"rater": ["ann"] * 20, "item_id": s["item_id"], "label": b.tolist()})
    meta = {"sample_id": "x", "population_pairs": 20, "population_queries": 1, "sample_pairs": 20,
            "sample_queries": 1, "settings": {}}
    info = S.compute(s, meta, humans, Scale("binary"), settings={"bootstrap": 1000, "seed": 9})
    c = info["comparisons"][0]
    assert c["kappa"] == 0.0 and c["kappa_ci"] == [0.0, 0.0] and 300 < c["kappa_undefined"] < 420
    cell = R.key_table(info)["Cohen's kappa"][0]
    assert cell == f"0.00 [0.00, 0.00] (degenerate: every defined replicate gives the same value; " \
                   f"{c['kappa_undefined']} of 1000 replicates undefined)"
    assert "replicates on which a statistic is undefined are left out and counted" in R.render_markdown(info)
    assert info["tables"]["agreement"]["kappa_undefined"][0] == c["kappa_undefined"]
    # a well-behaved interval carries no note
    assert R._with_ci(0.6, [0.4, 0.8], 0, 1000) == "0.60 [0.40, 0.80]"


def test_alpha_uses_the_replicates_the_report_states():
    m = np.array([A_LAB * 3, B_LAB * 3], float)
    iv = A.bootstrap_alpha(m, "nominal", strata=None, reps=1500, seed=0, confidence=0.95)
    assert iv.replicates == 1500 and iv.undefined == 0 and iv.lo < 0.62 < iv.hi


# ---- second judge, report, ranking --------------------------------------------------------------------------------

def test_restrict_plan_to_sample(bench, tmp_path):
    from benchmaker.audit.judge2 import restrict_plan

    sample_p, _ = audit_support.draw(bench, tmp_path / "audit", sample_size=15)
    s = read_sample(sample_p)
    p = read_table("query_plan", bench["plan"])
    sub = restrict_plan(p, s)
    pairs = sub.select("query_id", pl.col("candidates")).explode("candidates").select(
        "query_id", pl.col("candidates").struct.field("image_id"))
    assert set(pairs.iter_rows()) == set(s.select("query_id", "image_id").iter_rows())
    assert sub.columns == p.columns
    assert all(r["candidate_image_ids"] == [c["image_id"] for c in r["candidates"]] for r in sub.iter_rows(named=True))


def _write_run(path, name, scores):
    lines = []
    for q, docs in scores.items():
        for rank, (d, sc) in enumerate(sorted(docs.items(), key=lambda x: -x[1]), start=1):
            lines.append(f"{trec_id(q)} Q0 {trec_id(d)} {rank} {sc:.6f} {name}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_report_people_second_judge_and_rankings(bench, tmp_path):
    from scipy.stats import kendalltau

    from benchmaker.audit.judge2 import run as judge2_run
    from benchmaker.judge import run as judge_run

    sample_p, meta_p = audit_support.draw(bench, tmp_path / "audit", sample_size=30)
    s = read_sample(sample_p)
    ids, judge = s["item_id"].to_list(), s["judge_label"].to_list()
    rng = np.random.default_rng(3)
    alice = [j if rng.random() < 0.85 else 1 - j for j in judge]
    bob = [j if rng.random() < 0.7 else 1 - j for j in judge]
    f1 = _csv(tmp_path / "alice.csv", zip(ids, alice))
    page = {"format": "benchmaker-audit-labels", "version": 1, "sample_id": "x", "rater": "bob",
            "labels": [{"item_id": i, "label": v} for i, v in zip(ids, bob)]}
    (tmp_path / "bob.json").write_text(json.dumps(page))
    # the second judge: the rules judge with other thresholds, on the sample (through the judge stage)
    j2 = tmp_path / "audit" / "judge2" / "strict"
    settings = {"labels": "binary", "rationale": False, "adapter_settings": {"relevant_min_jaccard": 0.0,
                                                                              "relevant_min_core_match": 0.5}}
    judge2_run(plan=str(bench["plan"]), queries=str(bench["queries"]), annotations=str(bench["annotations"]),
               images=str(bench["images"]), sample=str(sample_p), sub_plan=str(j2 / "plan.jsonl"),
               qrels=str(j2 / "qrels.jsonl"), losses=str(j2 / "losses.jsonl"), costs=str(j2 / "costs.jsonl"),
               adapter="rules",
               settings=settings, scope="sample", facets=audit_support.FACETS, image_root=str(bench["image_root"]))
    j2q = read_table("qrels", j2 / "qrels.jsonl")
    assert set(j2q.select("query_id", "image_id").iter_rows()) == set(s.select("query_id", "image_id").iter_rows())
    # systems: one follows the people's labels, one the judge's, one is random
    qrels = read_table("qrels", bench["qrels"])
    runs = {}
    people = dict(zip(ids, [round((x + y) / 2 - 0.01) for x, y in zip(alice, bob)]))
    item_of = {(q, i): it for it, q, i in s.select("item_id", "query_id", "image_id").iter_rows()}
    for name, fn in (("humanlike", lambda q, i, j: people.get(item_of.get((q, i)), j)),
                     ("judgelike", lambda q, i, j: j), ("random", lambda q, i, j: rng.random())):
        scores: dict = {}
        for q, i, j in qrels.select("query_id", "image_id", "relevance_label").iter_rows():
            scores.setdefault(q, {})[i] = float(fn(q, i, j)) + rng.random() * 0.1
        runs[name] = _write_run(tmp_path / f"{name}.trec", name, scores)
    out = tmp_path / "audit" / "report"
    info = S.run(sample=str(sample_p), sample_meta=str(meta_p), qrels=str(bench["qrels"]), report=str(out),
                 settings={"seed": 1, "bootstrap": 200, "confidence": 0.9, "metrics": ["ndcg@10", "map"],
                           "require_complete": True},
                 human_labels=[f1, {"path": str(tmp_path / "bob.json")}], judge2=str(j2 / "qrels.jsonl"),
                 judge2_name="strict", runs=list(runs.values()), systems=list(runs), labels="binary",
                 facets=audit_support.FACETS)
    assert info["status"] == "audited"
    comps = {c["comparison"]: c for c in info["comparisons"]}
    assert set(comps) == {"judge vs alice", "judge vs bob", "judge vs people (majority)", "judge vs strict",
                          "strict vs alice", "strict vs bob", "alice vs bob"}
    c = comps["judge vs alice"]
    assert c["pairs"] == 30
    assert c["agreement"] == pytest.approx(np.mean(np.array(alice) == np.array(judge)))
    assert c["kappa"] == pytest.approx(A.cohen(judge, alice, [0, 1]))
    assert c["agreement_ci"][0] <= c["agreement"] <= c["agreement_ci"][1]
    w = np.array(s["weight"].to_list())
    assert c["agreement_benchmark"] == pytest.approx(np.sum(w * (np.array(alice) == np.array(judge))) / w.sum())
    multi = {m["raters"]: m for m in info["multi_rater"]}
    assert multi["people"]["krippendorff_alpha"] == pytest.approx(
        A.krippendorff_alpha(np.array([alice, bob], float), "nominal"))
    groups = pl.read_csv(out / "agreement_by_group.csv")
    assert {"pool", "difficulty", "facet:color", "facet:shape", "facet:is_bright"} <= set(groups["group_by"])
    by_pool = groups.filter((pl.col("comparison") == "judge vs alice") & (pl.col("group_by") == "pool"))
    assert by_pool["pairs"].sum() == 30
    conf = pl.read_csv(out / "confusion.csv").filter(pl.col("comparison") == "judge vs alice")
    assert conf["pairs"].sum() == 30
    assert conf.filter((pl.col("label_a") == 1) & (pl.col("label_b") == 1))["pairs"][0] == sum(
        1 for j, x in zip(judge, alice) if j == 1 and x == 1)
    rk = info["ranking"]
    assert rk["status"] == "ok" and len(rk["systems"]) == 3
    js = [r["ndcg@10_judge"] for r in rk["systems"]]
    hs = [r["ndcg@10_human"] for r in rk["systems"]]
    assert rk["kendall_tau"] == pytest.approx(kendalltau(js, hs).statistic)
    assert all(r["ndcg@10_diff"] == pytest.approx(r["ndcg@10_judge"] - r["ndcg@10_human"]) for r in rk["systems"])
    # a system that ranks by the judge's labels is perfect under them on every audited query with a
    # positive; ranx scores a query without one 0
    with_pos = s.group_by("query_id").agg((pl.col("judge_label") > 0).any())["judge_label"]
    assert {r["system"]: r for r in rk["systems"]}["judgelike"]["ndcg@10_judge"] == pytest.approx(with_pos.mean())
    md = (out / "audit.md").read_text()
    assert "Kendall's tau" in md and "judge vs alice" in md and "Krippendorff" in md
    assert f"every system on the same {s['query_id'].n_unique()} audited queries" in md
    assert "The audit's numbers and the imported human labels are in `audit/`" in R.card_markdown(str(out))
    hl = [json.loads(x) for x in (out / "human_labels.jsonl").read_text().splitlines()]
    assert len(hl) == 60 and set(hl[0]) == {"rater", "item_id", "query_id", "image_id", "label"}
    # the same judge twice (through the judge stage) agrees with itself completely: self-consistency
    again = tmp_path / "again"
    judge_run(plan=str(j2 / "plan.jsonl"), queries=str(bench["queries"]), annotations=str(bench["annotations"]),
              images=str(bench["images"]), qrels=str(again / "qrels.jsonl"), losses=str(again / "losses.jsonl"),
              adapter="rules",
              settings=settings, facets=audit_support.FACETS, image_root=str(bench["image_root"]), columns=None)
    info2 = S.compute(s, read_sample_meta(meta_p), import_labels([], s, Scale("binary")), Scale("binary"),
                      judge2=read_table("qrels", again / "qrels.jsonl"), judge2_name="strict-again",
                      settings={"bootstrap": 0})
    info3 = S.compute(s.with_columns(pl.Series("judge_label", j2q.join(s.select("query_id", "image_id", "order"),
                                                                       on=["query_id", "image_id"]).sort("order")
                                               ["relevance_label"])),
                      read_sample_meta(meta_p), import_labels([], s, Scale("binary")), Scale("binary"),
                      judge2=read_table("qrels", again / "qrels.jsonl"), judge2_name="strict-again",
                      settings={"bootstrap": 0})
    assert info2["status"] == "audited"
    self_c = [c for c in info3["comparisons"] if c["kind"] == "judge vs judge"][0]
    assert self_c["agreement"] == 1.0


def test_rankings_score_every_system_on_the_same_queries(tmp_path):
    """The issue's case: two audited queries; system A ranks q1 perfectly and no audited pair of q2,
    system B ranks both (q2 with the relevant image second). A query a system does not rank scores 0
    (as in evaluate), so A gets (1 + 0) / 2, not 1.0, and B wins: (1 + 1/log2(3)) / 2 = 0.815."""
    from benchmaker.audit.ranking import compare_rankings

    audited = pl.DataFrame({"query_id": ["q1", "q1", "q2", "q2"], "image_id": ["a", "b", "c", "d"],
                            "judge_label": [1, 0, 1, 0], "human_label": [1, 0, 1, 0]})
    runs = {"A": _write_run(tmp_path / "A.trec", "A", {"q1": {"a": 2.0, "b": 1.0}, "q2": {"x": 1.0}}),
            "B": _write_run(tmp_path / "B.trec", "B", {"q1": {"a": 2.0, "b": 1.0}, "q2": {"d": 2.0, "c": 1.0}})}
    rk = compare_rankings(audited, runs, ["ndcg@10"])
    by = {r["system"]: r for r in rk["systems"]}
    assert by["A"]["ndcg@10_judge"] == pytest.approx(0.5) and by["A"]["ndcg@10_human"] == pytest.approx(0.5)
    assert by["B"]["ndcg@10_judge"] == pytest.approx((1 + 1 / np.log2(3)) / 2)
    assert by["A"]["queries"] == by["B"]["queries"] == 2
    assert (by["A"]["queries_ranked"], by["B"]["queries_ranked"]) == (1, 2)
    assert rk["winner_judge"] == rk["winner_human"] == "B"
    # a system that ranks no audited pair at all scores 0 on every audited query (not "undefined")
    runs["C"] = _write_run(tmp_path / "C.trec", "C", {"q3": {"a": 1.0}})
    by = {r["system"]: r for r in compare_rankings(audited, runs, ["ndcg@10", "map"])["systems"]}
    assert by["C"]["ndcg@10_judge"] == 0.0 and by["C"]["map_human"] == 0.0 and by["C"]["queries"] == 2


def _raw_id_rankings(audited: pl.DataFrame, path: str, metrics: list[str]) -> dict[str, float]:
    """What the audit computed before it handed ranx codes: ranx on the raw ids, reading the file itself."""
    from ranx import Qrels, Run, evaluate

    from benchmaker.ids import from_trec_id

    run = {from_trec_id(q): {from_trec_id(d): s for d, s in docs.items()}
           for q, docs in Run.from_file(path, kind="trec").to_dict().items()}
    pairs = set(audited.select("query_id", "image_id").iter_rows())
    cut = {q: {d: s for d, s in docs.items() if (q, d) in pairs} for q, docs in run.items()}
    out = {}
    for side in ("judge", "human"):
        qrels: dict[str, dict[str, int]] = {}
        for q, i, lab in audited.select("query_id", "image_id", f"{side}_label").iter_rows():
            qrels.setdefault(q, {})[i] = lab
        res = evaluate(Qrels.from_dict(qrels), Run.from_dict({q: d for q, d in cut.items() if d}), metrics,
                       make_comparable=True)
        out |= {f"{m}_{side}": float(res[m]) for m in metrics}
    return out


def test_rankings_with_score_ties_as_ranx_on_the_raw_ids(tmp_path):
    """ranx gets the evaluate stage's fixed-width codes (one JIT cache); on runs full of score ties (in no
    order in the file, ids of several lengths) every metric is ranx's on the raw ids, bit for bit, and the
    run reads back in the order ranx's own reader gives. (The raw ids are at most as wide as the codes:
    ranx on them compiles nothing new.)"""
    import random

    from ranx import Run

    from benchmaker.audit.ranking import compare_rankings, read_run
    from benchmaker.ids import from_trec_id

    rnd = random.Random(11)
    imgs = [f"{'x' * (k % 7)} {k:02d}" for k in range(80)]  # as TREC ids ('x%2001'): 5 to 11 characters
    qids = [f"q{'z' * rnd.randint(0, 30)} {k}" for k in range(12)]
    rows, runs, lines = [], {}, []
    for q in qids:
        for i in rnd.sample(imgs, 30):
            rows.append((q, i, rnd.choice([0, 1, 2]), rnd.choice([0, 1, 2])))
    audited = pl.DataFrame(rows, schema=["query_id", "image_id", "judge_label", "human_label"], orient="row")
    for q in qids:  # 40 images a query, four distinct scores: ties beyond ranx's insertion-sort size
        lines += [f"{trec_id(q)} Q0 {trec_id(i)} 1 {rnd.randint(0, 3) / 4} s" for i in rnd.sample(imgs, 40)]
    rnd.shuffle(lines)
    (tmp_path / "s.trec").write_text("\n".join(lines) + "\n")
    runs["s"] = str(tmp_path / "s.trec")
    metrics = ["ndcg@5", "ndcg@10", "precision@3", "recall@5", "map", "mrr", "hit_rate@1"]
    row = compare_rankings(audited, runs, metrics)["systems"][0]
    want = _raw_id_rankings(audited, runs["s"], metrics)
    assert {k: row[k] for k in want} == want
    raw = Run.from_file(runs["s"], kind="trec").to_dict()
    assert [(q, list(d.items())) for q, d in read_run(runs["s"]).items()] == [
        (from_trec_id(q), [(from_trec_id(i), s) for i, s in d.items()]) for q, d in raw.items()]


def test_not_audited_yet_and_card_and_summary_sections(bench, tmp_path):
    sample_p, meta_p = audit_support.draw(bench, tmp_path / "audit", sample_size=10)
    out = tmp_path / "audit" / "report"
    info = S.run(sample=str(sample_p), sample_meta=str(meta_p), qrels=str(bench["qrels"]), report=str(out),
                 settings={"bootstrap": 10}, human_labels=[], labels="binary", facets=audit_support.FACETS)
    assert info["status"] == "not audited yet"
    card = R.card_markdown(str(out))
    assert card.startswith("## Judge audit") and "Not audited yet" in card and "10 of 108 judged pairs" in card
    assert "audit's numbers" not in card  # no numbers to point to
    sec = R.summary_section(str(out))
    assert sec.title == "Judge audit" and "Not audited yet" in sec.text and sec.table is None
    assert "Not audited yet" in R.card_markdown(None) and "audit.enabled is false" in R.card_markdown(None)


def test_a_listed_file_with_no_labels_is_named(bench, tmp_path, caplog):
    """sample.csv listed with its label cells still empty: an error naming the file and the count with
    require_complete, else a warning and the report and card saying so (it used to pass as an INFO line)."""
    sample_p, meta_p = audit_support.draw(bench, tmp_path / "audit", sample_size=10)
    s = read_sample(sample_p)
    empty = _csv(tmp_path / "empty.csv", [(i, "") for i in s["item_id"]])
    with pytest.raises(LabelImportError, match=r"empty.csv: no labels \(0 of 10 sample pairs labelled.*"
                                               r"audit.require_complete: false"):
        import_labels([empty], s, Scale("binary"))
    out = tmp_path / "audit" / "report"
    with caplog.at_level("WARNING"):
        info = S.run(sample=str(sample_p), sample_meta=str(meta_p), qrels=str(bench["qrels"]), report=str(out),
                     settings={"bootstrap": 10, "require_complete": False}, human_labels=[empty], labels="binary",
                     facets=audit_support.FACETS)
    assert info["status"] == "not audited yet"
    assert info["label_files"] == [{"path": "empty.csv", "format": "csv", "labels": 0, "pairs": 10}]
    assert any("empty.csv: no labels (0 of 10" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)
    for text in (R.card_markdown(str(out)), R.summary_section(str(out)).text):
        assert "holding no labels (0 of 10 sample pairs labelled): `empty.csv`" in text


def test_graded_report(tmp_path):
    bench = audit_support.make_bench(tmp_path / "g", graded=True, images=False)
    sample_p, meta_p = audit_support.draw(bench, tmp_path / "audit", sample_size=20)
    s = read_sample(sample_p)
    labs = [min(3, j + (k % 2)) for k, j in enumerate(s["judge_label"].to_list())]
    f = _csv(tmp_path / "eve.csv", zip(s["item_id"].to_list(), labs))
    info = S.run(sample=str(sample_p), sample_meta=str(meta_p), qrels=str(bench["qrels"]),
                 report=str(tmp_path / "rep"), settings={"bootstrap": 50}, human_labels=[f], labels="graded")
    c = info["comparisons"][0]
    assert c["kappa_quadratic"] == pytest.approx(A.cohen(s["judge_label"].to_list(), labs, [0, 1, 2, 3],
                                                         weights="quadratic"))
    assert "weighted kappa (quadratic)" in (tmp_path / "rep" / "audit.md").read_text()
    with pytest.raises(LabelImportError, match="label '4' is not on the graded scale"):
        import_labels([_csv(tmp_path / "bad.csv", [(s["item_id"][0], 4)])], s, Scale("graded"))


def test_second_judge_on_the_whole_benchmark(bench, tmp_path):
    """scope all: the judge stage over the whole plan; judge vs judge on every pair, no strata."""
    from benchmaker.audit.judge2 import run as judge2_run

    sample_p, meta_p = audit_support.draw(bench, tmp_path / "audit", sample_size=10)
    j2 = tmp_path / "j2"
    judge2_run(plan=str(bench["plan"]), queries=str(bench["queries"]), annotations=str(bench["annotations"]),
               images=str(bench["images"]), sub_plan=str(j2 / "plan.jsonl"), qrels=str(j2 / "qrels.jsonl"),
               losses=str(j2 / "losses.jsonl"), costs=str(j2 / "costs.jsonl"), adapter="rules",
               settings={"labels": "binary", "adapter_settings": {}}, scope="all", facets=audit_support.FACETS,
               image_root=str(bench["image_root"]))
    q = read_table("qrels", bench["qrels"])
    other = read_table("qrels", j2 / "qrels.jsonl")
    assert other.height == q.height
    info = S.run(sample=str(sample_p), sample_meta=str(meta_p), qrels=str(bench["qrels"]), report=str(tmp_path / "r"),
                 settings={"bootstrap": 20}, judge2=str(j2 / "qrels.jsonl"), judge2_name="judge2",
                 judge2_scope="all", labels="binary")
    whole = [c for c in info["comparisons"] if c.get("scope") == "all"]
    assert len(whole) == 1 and whole[0]["pairs"] == q.height
    joined = q.join(other, on=["query_id", "image_id"])
    assert whole[0]["agreement"] == pytest.approx((joined["relevance_label"] == joined["relevance_label_right"]).mean())
    assert "(all pairs)" in (tmp_path / "r" / "audit.md").read_text()


def test_same_inputs_same_bytes(bench, tmp_path):
    """Sample, labelling files and report are byte-identical when made again from the same inputs."""
    def make(d):
        sample_p, meta_p = audit_support.draw(bench, d)
        L.run(sample=str(sample_p), sample_meta=str(meta_p), images=str(bench["images"]), labelling=str(d / "lab"),
              settings={"thumbnail_max_side": 48}, image_root=str(bench["image_root"]))
        s = read_sample(sample_p)
        f = _csv(d / "zoe.csv", [(i, k % 2) for k, i in enumerate(s["item_id"].to_list())])
        S.run(sample=str(sample_p), sample_meta=str(meta_p), qrels=str(bench["qrels"]), report=str(d / "rep"),
              settings={"bootstrap": 100, "seed": 3}, human_labels=[f | {"rater": "zoe"}], labels="binary",
              facets=audit_support.FACETS)
        return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}

    first, second = make(tmp_path / "one"), make(tmp_path / "two")
    assert first.keys() == second.keys() and len(first) > 10
    assert [k for k in first if first[k] != second[k]] == []


def test_config_names_wrong_strata_and_facets():
    from benchmaker.config import ConfigError, validate_config

    cfg = {"benchmark": {"name": "x"}, "paths": {"image_root": "."}, "facets": audit_support.FACETS,
           "audit": {"strata": ["pool", "colour"], "facets": ["shape", "size"]}}
    with pytest.raises(ConfigError) as e:
        validate_config(cfg)
    assert "audit.strata: 'colour'" in str(e.value) and "audit.facets: 'size'" in str(e.value)
    # metrics: the evaluate stage's ranx names, checked when the config is read (a typo used to fail the
    # whole run's audit_report on ranx's ValueError as an "unexpected error")
    cfg["audit"] = {"metrics": ["ndcg@10", "mapp", "precision@0", "recall@5", "hit_rate@3", "mrr", "ndcg"]}
    with pytest.raises(ConfigError) as e:
        validate_config(cfg)
    bad = [line for line in str(e.value).splitlines() if "audit.metrics" in line]
    assert len(bad) == 3 and all("ndcg@k, precision@k, recall@k, hit_rate@k, map, mrr" in b for b in bad)
    assert ["'mapp'" in bad[0], "'precision@0'" in bad[1], "'ndcg' is" in bad[2]] == [True] * 3
    cfg["audit"] = {"strata": ["difficulty", "color", "is_bright"], "second_judge": {"judge": {}}}
    assert validate_config(cfg)["audit"]["second_judge"] == {"judge": {}, "name": "judge2", "scope": "sample"}


def _runs_of(q: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """Two systems' runs of every judged pair: one ranks by image id, one ties pairs in four groups."""
    base = q.select("query_id", "image_id").with_columns(
        pl.col("image_id").rank("ordinal").over("query_id").cast(pl.Float64).alias("r"))
    return {"up": base.select("query_id", "image_id", (-pl.col("r")).alias("score")),
            "down": base.select("query_id", "image_id", (-(pl.col("r") % 4)).alias("score"))}


def test_rank_stratum_bands_weights_and_over_sampling(bench):
    from benchmaker.audit.sample import rank_strata

    q, p, a, fm = _tables(bench)
    runs = _runs_of(q)
    bands = [{"max_rank": 2, "weight": 4}, {"max_rank": 5, "weight": 2}]  # pools of 9 pairs
    ranks = rank_strata(q, runs, bands)
    # the best rank over the systems in each query's judged pool, ties by image id
    qid = q["query_id"][0]
    best: dict[str, int] = {}
    for run in runs.values():
        rows = sorted(run.filter(pl.col("query_id") == qid).select("image_id", "score").iter_rows(),
                      key=lambda t: (-t[1], t[0]))
        for r, (i, _) in enumerate(rows, 1):
            best[i] = min(r, best.get(i, r))
    got = dict(ranks.filter(pl.col("query_id") == qid).select("image_id", "rank").iter_rows())
    assert got == {i: "1-2" if r <= 2 else "3-5" if r <= 5 else "6+" for i, r in best.items()}
    assert sorted(got.values()) == ["1-2"] * 4 + ["3-5"] * 3 + ["6+"] * 2
    kw = dict(sample_size=40, seed=7, strata=["judge_label", "rank"], min_per_stratum=2, ranks=ranks)
    s1 = draw_sample(q, p, a, fm, **kw)
    assert s1.equals(draw_sample(q.sample(fraction=1.0, shuffle=True, seed=2), p, a, fm, **kw))  # deterministic
    assert s1.height == 40 and all("|rank=" in st for st in s1["stratum"])
    # the design weights expand each stratum's sample to its size, and the sample to the population
    per = s1.group_by("stratum").agg(pl.col("weight").sum(), pl.col("stratum_size").first())
    assert per["weight"].to_list() == pytest.approx(per["stratum_size"].cast(pl.Float64).to_list())
    assert s1["weight"].sum() == pytest.approx(q.height)
    # the pairs a system ranks high are over-sampled: inclusion rate by band follows the weights
    rate = {b: 1 / s1.filter(pl.col("stratum").str.ends_with(f"rank={b}"))["weight"].mean() for b in
            ("1-2", "3-5", "6+")}
    assert rate["1-2"] > rate["3-5"] > rate["6+"]
    # without runs the rank stratum is left out: the judge-label sample
    assert draw_sample(q, p, a, fm, **(kw | {"ranks": None})).equals(
        draw_sample(q, p, a, fm, **(kw | {"ranks": None, "strata": ["judge_label"]})))


def test_pool_stratum_of_one_pool_draws_the_pairs_without_it(bench):
    """docs/trust.md's 1-pool row of the pool-strata comparison: with every pair in one pool, the strata
    [pool, judge_label, rank] draw the same pairs with the same weights as [judge_label, rank]; with
    several pools they do not (the floor per stratum moves pairs)."""
    from benchmaker.audit.sample import rank_strata

    q, p, a, fm = _tables(bench)
    ranks = rank_strata(q, _runs_of(q), [{"max_rank": 2, "weight": 4}, {"max_rank": 5, "weight": 2}])
    kw = dict(sample_size=40, seed=7, min_per_stratum=2, ranks=ranks)

    def drawn(qr, strata):
        return draw_sample(qr, p, a, fm, strata=strata, **kw).select("query_id", "image_id", "weight").sort(
            "query_id", "image_id")

    one = q.with_columns(pl.lit("random").alias("pool"))
    assert drawn(one, ["pool", "judge_label", "rank"]).equals(drawn(one, ["judge_label", "rank"]))
    assert q["pool"].n_unique() > 1
    assert not drawn(q, ["pool", "judge_label", "rank"]).equals(drawn(q, ["judge_label", "rank"]))


def test_sample_run_without_systems_is_the_sample_without_the_rank_stratum(bench, tmp_path):
    s_new, m_new = audit_support.draw(bench, tmp_path / "new", strata=["pool", "judge_label", "rank"])
    s_old, m_old = audit_support.draw(bench, tmp_path / "old")  # strata [pool, judge_label]
    assert s_new.read_bytes() == s_old.read_bytes() and m_new.read_bytes() == m_old.read_bytes()

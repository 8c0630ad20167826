"""The "How far to trust this benchmark" block's judge-agreement statement (docs/trust.md): a second judge
without any person's labels must still say what labelling the audit sample would buy."""

from __future__ import annotations

import json

from benchmaker.summary.trust import trust_items

PROJECTED = {"status": "ok", "sample_pairs": 60, "confidence": 0.95,
             "rows": [{"system": "a", "metric": "precision@10", "half_width": 0.04},
                      {"system": "b", "metric": "precision@10", "half_width": 0.06}]}
JUDGES = {"status": "ok", "primary_metric": "ndcg@10", "scope": "sample", "pairs": 60, "kendall_tau": 1.0,
          "same_winner": True}


def _agreement(tmp_path, audit: dict) -> str:
    (tmp_path / "audit.json").write_text(json.dumps(audit))
    return next(i for i in trust_items(None, tmp_path / "audit.json", None) if i.startswith("**Judge agreement"))


def test_second_judge_without_people_still_says_what_labelling_buys(tmp_path):
    # a second judge makes the audit "audited" with no judge-vs-people comparison: the statement used to
    # be "no person's labels" and the second judge only, dropping what labelling the sample would buy
    text = _agreement(tmp_path, {"status": "audited", "sample": {"sample_pairs": 60}, "projected": PROJECTED,
                                 "comparisons": [{"kind": "judge vs judge2", "comparison": "judge vs loose"}],
                                 "judges": JUDGES})
    assert "not audited yet: labelling the 60 sampled pairs" in text and "±0.060" in text
    assert "**Second judge**" in text and "Kendall τ 1.00" in text


def test_not_audited_and_audited_statements_unchanged(tmp_path):
    text = _agreement(tmp_path, {"status": "not audited", "sample": {"sample_pairs": 60}, "projected": PROJECTED})
    assert text == ("**Judge agreement**: not audited yet: labelling the 60 sampled pairs (audit/labelling/) gives "
                    "the judge's agreement with people; with them every system's precision@10 is reported "
                    "human-corrected, to within about ±0.060 (95 %, at worst; narrower as far as the judge agrees "
                    "with people).")
    text = _agreement(tmp_path, {"status": "audited", "comparisons": [
        {"kind": "judge vs people", "comparison": "judge vs people", "kappa": 0.5, "kappa_ci": [0.3, 0.7],
         "agreement": 0.8, "pairs": 60}]})
    assert "Cohen's κ 0.50 (0.30–0.70), raw agreement 0.80 on 60 pairs" in text


def test_one_system_power_and_reusability_read_as_sentences(tmp_path):
    import polars as pl

    from benchmaker.evaluate.trust import trust_doc

    per_query = pl.DataFrame({"scope": ["pool"] * 16, "system": ["bm25"] * 16,
                              "query_id": [f"q{i}" for i in range(16)], "ndcg@10": [0.5] * 16})
    doc, _ = trust_doc(per_query, [{"name": "bm25", "kind": "bm25", "settings": {}}], settings={},
                       models={"judge": None, "vision": None}, queries=16)
    (tmp_path / "trust.json").write_text(json.dumps(doc))
    (tmp_path / "deepen.json").write_text(json.dumps({"leave_one_out": {"min_kendall_tau": None, "systems_ranked": 1}}))
    power, *_, reuse = trust_items(tmp_path / "trust.json", None, tmp_path / "deepen.json")
    # the assumed MDDs were printed unrounded (0.11242, 0.187366) after "not measured: two or more ..."
    assert power.startswith("**Power**: not measured: it needs two or more evaluated systems")
    assert "about 0.112 at σ_d 0.15, 0.187 at σ_d 0.25" in power
    assert reuse == ("**Reusability**: leave-one-system-out τ not defined: it needs two or more ranked systems "
                     "(1 system ranked).")


def test_both_judges_table_names_the_judges(tmp_path):
    from benchmaker.summary.trust import tables

    (tmp_path / "audit.json").write_text(json.dumps({
        "status": "audited", "judge": "rules", "second_judge": {"name": "loose"},
        "judges": {**JUDGES, "rows": [{"system": "a", "metric": "ndcg@10", "judge": 0.91234, "judge2": 0.8,
                                       "queries": 15}]}}))
    (title, table), = tables(None, tmp_path / "audit.json")
    assert title == "Systems under both judges"
    assert table.columns == ["system", "metric", "judge (rules)", "second judge (loose)"]
    assert table.row(0) == ("a", "ndcg@10", 0.9123, 0.8)


def test_a_census_sample_is_exact_not_plus_minus_zero(tmp_path):
    # the example's audit sample holds every judged pair: no sampling error, said so instead of "±0.000"
    proj = PROJECTED | {"rows": [{"system": "a", "metric": "precision@10", "half_width": 0.0}]}
    text = _agreement(tmp_path, {"status": "not audited", "projected": proj,
                                 "sample": {"sample_pairs": 54, "population_pairs": 54}})
    assert "±" not in text and "the sample is every judged pair" in text
    assert "human-corrected exactly (no sampling error)" in text

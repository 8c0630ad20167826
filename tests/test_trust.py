"""How far to trust a benchmark (docs/trust.md): the power calculator, human-corrected scores, circularity and
the block that opens the report and the card. Library level and cheap; the statistical claims are shown by
the simulations benchmarks/trust_power.py and benchmarks/trust_ppi.py."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from benchmaker.audit.corrected import corrected_scores, estimate, projected
from benchmaker.cli import main
from benchmaker.errors import UserError
from benchmaker.evaluate.power import mdd, pair_alpha, power_doc, queries_needed, sd_from
from benchmaker.evaluate.trust import trust_doc
from benchmaker.families import circularity, family_of, pipeline_models
from benchmaker.summary.trust import TITLE, card_markdown


def test_queries_needed_matches_cohens_table():
    # Cohen (1988), Table 2.4.1 as used for a one-sample / paired t: d = 0.5, two-sided alpha 0.05,
    # power 0.80 -> n = 34; d = 0.2 -> 199; d = 0.8 -> 15 (the noncentral-t solution, rounded up)
    assert queries_needed(0.5, 1.0, alpha=0.05, power=0.8) == 34
    assert queries_needed(0.2, 1.0, alpha=0.05, power=0.8) == 199
    assert queries_needed(0.8, 1.0, alpha=0.05, power=0.8) == 15
    # the back of the envelope: sd 0.2, 100 queries -> ~0.057; 45 pairs corrected -> ~0.084
    assert mdd(0.2, 100, alpha=0.05) == pytest.approx(0.0566, abs=5e-4)
    assert mdd(0.2, 100, alpha=pair_alpha(0.05, 45, "holm")) == pytest.approx(0.0843, abs=5e-4)
    # the two directions agree: n queries detect their own MDD
    assert queries_needed(mdd(0.2, 100, alpha=0.01), 0.2, alpha=0.01) == 100
    assert pair_alpha(0.05, 6, "none") == 0.05 and pair_alpha(0.05, 6, "bonferroni") == pytest.approx(0.05 / 6)
    with pytest.raises(UserError):
        queries_needed(0.0, 0.2, alpha=0.05)


def _per_query(k: int, n: int = 40, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.2, 0.8, n)
    rows = [{"query_id": f"q{i}", "system": f"s{j}", "scope": "pool", "ndcg@10": float(base[i] + 0.1 * rng.normal()),
             "map": 0.5, "mrr": 0.5} for j in range(k) for i in range(n)]
    return pl.DataFrame(rows)


def test_power_doc_per_pair_and_fewer_than_two_systems(tmp_path):
    doc, table = power_doc(_per_query(3), alpha=0.05, correction="holm", stat_test="student")
    assert doc["status"] == "ok" and table.height == 3 * 3  # 3 pairs x (ndcg@10, map, mrr)
    row = next(r for r in doc["rows"] if r["metric"] == "ndcg@10")
    assert row["pairs_compared"] == 3 and row["alpha_pair"] == pytest.approx(0.05 / 3)
    assert row["mdd_min"] <= row["mdd"] <= row["mdd_max"]
    assert set(row["queries_needed"]) == {"0.02", "0.05"}
    one, _ = power_doc(_per_query(1), alpha=0.05, correction="holm", stat_test="student")
    assert one["status"] == "fewer than two systems" and "two or more evaluated systems" in one["needs"]
    assert one["assumed"]["0.15"] < one["assumed"]["0.25"]
    # sd_from reads a published trust.json and a per_query.csv alike
    (tmp_path / "trust.json").write_text(json.dumps({"power": doc}))
    _per_query(3).write_csv(tmp_path / "per_query.csv")
    sd_json, n_json, _ = sd_from(tmp_path / "trust.json", metric="ndcg@10")
    sd_csv, n_csv, _ = sd_from(tmp_path / "per_query.csv", metric="ndcg@10")
    assert sd_json == pytest.approx(sd_csv) and n_json == n_csv == 40
    with pytest.raises(UserError, match="no power row"):
        sd_from(tmp_path / "trust.json", metric="ndcg@5")


def test_power_command(tmp_path, capsys):
    _per_query(4).write_csv(tmp_path / "per_query.csv")
    assert main(["power", "--delta", "0.05", "--from", str(tmp_path), "--systems", "10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pairs"] == 45 and out["alpha_pair"] == pytest.approx(0.05 / 45)
    assert out["queries_needed"]["0.05"] == queries_needed(0.05, out["sd_diff"], alpha=0.05 / 45)
    assert main(["power", "--delta", "0.5", "--sd", "1", "--systems", "2", "--queries", "34"]) == 0
    assert "needs 34 queries" in capsys.readouterr().out
    assert main(["power", "--delta", "0.05", "--from", str(tmp_path / "missing")]) == 1


def test_estimate_exact_when_every_pair_is_labelled_and_judge_when_people_agree():
    y = np.array([1.0, 0, 1, 0, 1, 1])
    strata = np.array(["a"] * 3 + ["b"] * 3)
    N = {"a": 3, "b": 3}
    # census: the corrected value is the people's total, with a zero-width interval
    r = estimate(float(np.sum([0, 0, 0, 1, 1, 1])), y, np.array([0.0, 0, 0, 1, 1, 1]), strata, N, 2, z=1.96)
    assert r["corrected"] == pytest.approx(y.sum() / 2) and r["corrected_hi"] == pytest.approx(r["corrected_lo"])
    # half of each stratum labelled and the judge right on them: the judge's total is returned
    same = np.array([1.0, 0, 1, 0])
    r = estimate(3.0, same, same, np.array(["a", "a", "b", "b"]), {"a": 4, "b": 4}, 1, z=1.96)
    assert r["corrected"] == pytest.approx(3.0) and r["lambda"] == pytest.approx(1.0)
    assert r["human_only"] == pytest.approx(4.0) and r["corrected_hi"] == pytest.approx(3.0)


def _toy():
    qrels = pl.DataFrame({"query_id": ["q1"] * 4 + ["q2"] * 4, "image_id": ["a", "b", "c", "d"] * 2,
                          "relevance_label": [1, 1, 0, 0, 1, 0, 1, 0]})
    runs = {"x": {"q1": {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}, "q2": {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}},
            "y": {"q1": {"d": 4.0, "c": 3.0, "b": 2.0, "a": 1.0}, "q2": {"d": 4.0, "c": 3.0, "b": 2.0, "a": 1.0}}}
    return qrels, runs


def test_corrected_scores_census_equals_people_and_ranks():
    qrels, runs = _toy()
    human = [0, 1, 0, 0, 1, 0, 1, 0]  # people: q1/a is not relevant
    audited = qrels.select("query_id", "image_id", pl.col("relevance_label").alias("judge_label")).with_columns(
        pl.Series("human_label", human), pl.lit("all").alias("stratum"), pl.lit(8).alias("stratum_size"))
    doc = corrected_scores(qrels, audited, runs, ks=[2], confidence=0.95)
    got = {(r["system"], r["metric"]): r for r in doc["rows"]}
    assert got[("x", "precision@2")]["judge"] == pytest.approx(0.75)        # (2/2 + 1/2) / 2
    assert got[("x", "precision@2")]["corrected"] == pytest.approx(0.5)     # (1/2 + 1/2) / 2
    assert got[("y", "precision@2")]["corrected"] == pytest.approx(0.25)    # q2: c relevant
    assert got[("x", "dcg@2")]["corrected"] == pytest.approx((1 / np.log2(3) + 1) / 2)
    assert got[("x", "precision@2")]["rank_corrected"] == 1
    proj = projected(qrels, audited.head(4), runs, ks=[2], confidence=0.95)
    assert proj["status"] == "ok" and all(r["half_width"] >= 0 for r in proj["rows"])


def test_projection_bounds_the_people_only_interval_when_pools_fit_in_k():
    """Pools of 8 < k = 10 pairs, strata by the judge's label: the judge's labels standing in for people's
    projected ±0.000 (the bug). The projection is the worst case over people's labels: no labelling gives a
    wider people-only precision@k interval, and one labelling reaches it."""
    rng = np.random.default_rng(3)
    qs, imgs = [f"q{i}" for i in range(6) for _ in range(8)], [f"i{j}" for _ in range(6) for j in range(8)]
    judge = rng.integers(0, 2, len(qs))
    qrels = pl.DataFrame({"query_id": qs, "image_id": imgs, "relevance_label": judge})
    runs = {s: {q: {f"i{j}": float(rng.random()) for j in range(8)} for q in set(qs)} for s in ("x", "y")}
    strat = qrels.with_columns(pl.format("judge={}", "relevance_label").alias("stratum"))
    strat = strat.join(strat.group_by("stratum").len("stratum_size"), on="stratum")
    sample = strat.filter(pl.int_range(pl.len()).over("stratum") < 10).rename({"relevance_label": "judge_label"})
    stand_in = corrected_scores(qrels, sample.with_columns(pl.col("judge_label").alias("human_label")), runs,
                                ks=[10], confidence=0.95)
    assert {r["human_only_hi"] - r["human_only_lo"] for r in stand_in["rows"] if r["metric"] == "precision@10"} == {0}
    proj = projected(qrels, sample, runs, ks=[10], confidence=0.95)
    half = {r["system"]: r["half_width"] for r in proj["rows"]}
    assert proj["status"] == "ok" and min(half.values()) > 0.05 and "worst case" in proj["assumption"]

    def people_half(labels):
        doc = corrected_scores(qrels, sample.with_columns(pl.Series("human_label", labels)), runs, ks=[10],
                               confidence=0.95)
        return {r["system"]: (r["human_only_hi"] - r["human_only_lo"]) / 2 for r in doc["rows"]
                if r["metric"] == "precision@10"}

    for _ in range(200):
        got = people_half(rng.integers(0, 2, sample.height))
        assert all(got[s] <= half[s] + 1e-6 for s in half)
    worst = (pl.int_range(pl.len()).over("stratum") < pl.len().over("stratum") // 2).cast(pl.Int64)
    assert people_half(sample.select(worst.alias("w"))["w"]) == pytest.approx(half, abs=1e-6)


def test_families_and_circularity():
    assert family_of("ViT-B-32") == family_of("hf-hub:laion/CLIP-ViT-H-14-laion2B-s32B-b79K")
    assert family_of("hf-hub:timm/ViT-SO400M-14-SigLIP-384") == "SigLIP (Google)"
    assert family_of("gpt-5-mini") == family_of("gpt-4o") == "GPT (OpenAI)"
    assert family_of("gemini-2.5-flash") == "Gemini / Gemma (Google)"
    assert family_of("my-own-model") == "my-own-model" and family_of(None) is None
    cfg = {"judge": {"adapter": "openai", "openai": {"model": "gpt-5-mini"}},
           "vision": {"adapter": "clip", "clip": {"model": "ViT-B-32"}}}
    models = pipeline_models(cfg)
    assert models == {"judge": "gpt-5-mini", "vision": "ViT-B-32"}
    assert pipeline_models({"judge": {"adapter": "rules"}, "vision": {"adapter": "metadata"}}) == {
        "judge": None, "vision": None}
    systems = [{"name": "clip-l", "kind": "clip", "settings": {"model": "ViT-L-14"}},
               {"name": "bm25", "kind": "bm25", "settings": {}},
               {"name": "rr", "kind": "rerank", "settings": {"base": "bm25", "llm_model": "gpt-4.1"}},
               {"name": "prod", "kind": "trec_run", "settings": {}}]
    c = circularity(models, systems)
    by = {r["system"]: r for r in c["systems"]}
    assert by["clip-l"]["shares_family_with"] == ["vision"] and by["rr"]["shares_family_with"] == ["judge"]
    assert c["circular"] == ["clip-l", "rr"] and c["unknown"] == ["prod"]


def test_trust_block_opens_with_each_statement(tmp_path):
    empty = card_markdown(None, None, None)
    assert empty.startswith(f"## {TITLE}") and "not computed" in empty and "not measured" in empty
    doc, _ = trust_doc(_per_query(3), [{"name": f"s{j}", "kind": "clip", "settings": {"model": "ViT-B-32"}}
                                       for j in range(3)],
                       settings={}, models={"judge": None, "vision": "ViT-B-32"}, queries=40)
    (tmp_path / "trust.json").write_text(json.dumps(doc))
    (tmp_path / "deepen.json").write_text(json.dumps({"leave_one_out": {"min_kendall_tau": 0.93, "systems_ranked": 3,
                                                                        "tau_bar": 0.9, "reusable": True}}))
    text = card_markdown(tmp_path / "trust.json", None, tmp_path / "deepen.json")
    assert "differences in ndcg@10 (pool scope) below" in text
    assert "s0, s1, s2 share the vision annotator's family" in text
    assert "τ ≥ 0.93 over 3 systems (meets" in text


def test_imputed_ndcg_map_mrr_census_and_sample():
    from benchmaker.audit.imputed import imputed_rows

    qrels, runs = _toy()
    human = [0, 1, 0, 0, 1, 0, 1, 0]  # people: q1/a is not relevant
    audited = qrels.select("query_id", "image_id", pl.col("relevance_label").alias("judge_label")).with_columns(
        pl.Series("human_label", human), pl.lit("all").alias("stratum"), pl.lit(8).alias("stratum_size"))
    doc = corrected_scores(qrels, audited, runs, ks=[2], confidence=0.95, draws=50, seed=3)
    got = {(r["system"], r["metric"]): r for r in doc["rows"]}
    x = got[("x", "ndcg@2")]  # census: the people's values exactly, zero-width intervals
    d2 = 1 / np.log2(3)  # q2: a and c relevant, x ranks a, b: nDCG@2 = 1 / (1 + d2)
    assert x["judge"] == pytest.approx((1 + 1 / (1 + d2)) / 2) and x["method"] == "imputation"
    assert x["corrected"] == pytest.approx((d2 + 1 / (1 + d2)) / 2) and x["corrected"] == pytest.approx(
        x["corrected_hi"]) and x["corrected_lo"] == pytest.approx(x["corrected_hi"])
    assert got[("x", "mrr")]["corrected"] == pytest.approx((0.5 + 1) / 2)
    assert got[("x", "map")]["corrected"] == pytest.approx((0.5 + (1 + 2 / 3) / 2) / 2)
    assert got[("y", "mrr")]["corrected"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert got[("x", "precision@2")]["method"] == "ppi++" and got[("x", "ndcg@2")]["rank_corrected"] == 1
    # half the pairs audited: an interval around the estimate, same bytes for the same seed
    half = audited[[0, 2, 4, 6]].with_columns(pl.lit(8).alias("stratum_size"))
    rows = imputed_rows(qrels, half, runs, ["q1", "q2"], ks=[2], confidence=0.95, draws=50, seed=3)
    assert rows == imputed_rows(qrels, half, runs, ["q1", "q2"], ks=[2], confidence=0.95, draws=50, seed=3)
    assert all(r["corrected_lo"] <= r["corrected_hi"] and 0 <= r["corrected"] <= 1 for r in rows)


def test_imputed_replicate_weights_give_the_stratified_design_variance():
    """The design correction's replicates (Rao & Wu 1988): mean weight = the design weight, and the replicate
    variance of a weighted total = the stratified without-replacement variance, Σ N_h² (1 - f_h) s_h² / n_h."""
    from types import SimpleNamespace

    from benchmaker.audit.imputed import _replicate_weights

    rng = np.random.default_rng(0)
    strata = np.asarray(["a"] * 10 + ["b"] * 20 + ["c"], dtype=object)
    weight = np.asarray([8.0] * 10 + [3.0] * 20 + [5.0])  # N_h = 80, 60, 5; a lone pair keeps its weight
    y = rng.normal(size=31)
    w = _replicate_weights(SimpleNamespace(strata=strata, weight=weight), 20000, rng)
    assert np.allclose(w.mean(axis=0), weight, rtol=0.03) and np.all(w > 0) and np.all(w[:, 30] == 5.0)
    want = sum((n * wt) ** 2 * (1 - 1 / wt) * y[s].var(ddof=1) / n
               for s, n, wt in ((slice(0, 10), 10, 8.0), (slice(10, 30), 20, 3.0)))
    assert (w @ y).var() == pytest.approx(want, rel=0.05)

"""The audit rules in the real workflow (tiny corpus, tiny CLIP): sample -> labelling files -> labels ->
report -> summary and card sections; labels arriving never re-draw the sample; a second judge."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
import support

from benchmaker.audit.files import read_sample

ROOT = Path(__file__).resolve().parents[1]


job_stats = support.job_stats  # parse Snakemake's 'Job stats' table (tests/support.py)


def _cfg(tmp, tiny_corpus, tiny_clip, **audit):
    # one shard: the audit reads the merged pairs, whatever the shards
    return support.tiny_config(tmp, tiny_corpus, tiny_clip, n_shards=1,
                               audit={"sample_size": 12, "bootstrap": 50, **audit})


def _with_systems(cfg: dict, tiny_clip) -> dict:
    """Two cheap systems (bm25; the similarity stage's model, ranking its embeddings): the audit scores them
    under people's and the second judge's labels (docs/trust.md)."""
    return {**cfg, "evaluate": {"k": [5], "systems": [
        {"name": "bm25", "kind": "bm25"},
        {"name": "clip-same", "kind": "clip", "model": f"local-dir:{tiny_clip}", "pretrained": None,
         "device": "cpu", "num_workers": 0}]}}


@pytest.mark.slow
def test_audit_in_the_workflow(tmp_path, tiny_corpus, tiny_clip, numba_cache):
    cfg = _with_systems(_cfg(tmp_path, tiny_corpus, tiny_clip), tiny_clip)
    env = {"NUMBA_CACHE_DIR": str(numba_cache)}
    path = support.write_config(tmp_path / "config.yaml", cfg)
    r = support.snakemake(["-n", "-c1"], tmp_path, path)
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    assert stats["audit_sample"] == 1 and stats["audit_labelling"] == 1 and stats["audit_report"] == 1
    assert "audit_judge2" not in stats
    r = support.snakemake(["-c2", "--show-failed-logs"], tmp_path, path, timeout=1500, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    res = tmp_path / "results" / "tiny"
    sample = read_sample(res / "audit" / "sample.jsonl")
    assert 0 < sample.height <= 12
    # with systems the sample is stratified by the best rank any of them gives the pair (audit.rank_bands)
    assert all(re.search(r"\|rank=(1-3|4-10|11\+)$", s) for s in sample["stratum"])
    meta = json.loads((res / "audit" / "sample.json").read_text())
    assert meta["settings"]["systems"] == ["bm25", "clip-same"] and meta["settings"]["strata"][-1] == "rank"
    assert (res / "audit" / "labelling" / "label.html").is_file()
    assert "Not audited yet" in (res / "summary" / "report.md").read_text()
    card = (res / "hf_dataset" / "README.md").read_text()
    assert "## Judge audit" in card and "Not audited yet" in card
    # before any label: what labelling the sample would buy (docs/trust.md)
    assert json.loads((res / "audit" / "report" / "audit.json").read_text())["projected"]["status"] == "ok"
    assert "not audited yet: labelling the" in card
    sample_bytes = (res / "audit" / "sample.jsonl").read_bytes()

    # a person fills in sample.csv; listing the file reruns the report and what shows it, never the sample
    filled = pl.read_csv(res / "audit" / "labelling" / "sample.csv").with_columns(
        pl.Series("label", [k % 2 for k in range(sample.height)]), pl.lit("erin").alias("rater"))
    filled.write_csv(tmp_path / "erin.csv")
    cfg2 = _with_systems(_cfg(tmp_path, tiny_corpus, tiny_clip, human_labels=[{"path": str(tmp_path / "erin.csv")}],
                              second_judge={"name": "loose", "judge": {"rules": {"relevant_min_jaccard": 0.0}}}),
                         tiny_clip)
    path2 = support.write_config(tmp_path / "config2.yaml", cfg2)
    r = support.snakemake(["-n", "-c1"], tmp_path, path2)
    assert r.returncode == 0, r.stderr[-3000:]
    assert set(job_stats(r.stdout + r.stderr)) == {"audit_judge2", "audit_report", "summary", "export", "all"}
    r = support.snakemake(["-c2", "--show-failed-logs"], tmp_path, path2, timeout=1500, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    assert (res / "audit" / "sample.jsonl").read_bytes() == sample_bytes
    info = json.loads((res / "audit" / "report" / "audit.json").read_text())
    assert info["status"] == "audited" and info["people"] == [{"rater": "erin", "pairs": sample.height}]
    assert info["second_judge"]["name"] == "loose"
    assert {c["comparison"] for c in info["comparisons"]} == {"judge vs erin", "judge vs loose", "loose vs erin"}
    assert "judge vs erin" in (res / "summary" / "report.md").read_text()
    card = (res / "hf_dataset" / "README.md").read_text()
    assert "Not audited yet" not in card and "judge vs erin" in card
    assert (res / "hf_dataset" / "audit" / "human_labels.jsonl").is_file()
    # human-corrected scores of both systems (at the cutoff of audit.metrics: precision@10, dcg@10) and their
    # scores under both judges
    corrected = pl.read_csv(res / "audit" / "report" / "corrected.csv")
    assert info["corrected"]["status"] == "ok" and corrected.height == 10
    assert set(corrected["system"]) == {"bm25", "clip-same"}
    assert set(corrected["metric"]) == {"precision@10", "dcg@10", "ndcg@10", "map", "mrr"}
    assert (corrected["corrected_lo"] <= corrected["corrected"]).all()
    assert (corrected["corrected"] <= corrected["corrected_hi"]).all()
    assert info["judges"]["scope"] == "sample"
    assert {r["system"] for r in info["judges"]["rows"]} == {"bm25", "clip-same"}
    block = card[card.index("## How far to trust this benchmark"):card.index("## Load it")]
    assert "**Human-corrected scores** (ndcg@10" in block and "judge vs erin" in block

    # a bad label file stops the report with the file and row
    (tmp_path / "erin.csv").write_text(filled.with_columns(pl.lit(5).alias("label")).write_csv())
    r = support.snakemake(["-c1", "--show-failed-logs", str(res / "audit" / "report")], tmp_path, path2)
    assert r.returncode != 0
    assert "erin.csv: row 2: label '5' is not on the binary scale" in r.stdout + r.stderr


def test_bad_audit_settings_are_named(tmp_path, tiny_corpus, tiny_clip):
    path = support.write_config(tmp_path / "c.yaml", _cfg(tmp_path, tiny_corpus, tiny_clip, strata=["colour"]))
    r = support.snakemake(["-n", "-c1"], tmp_path, path)
    assert r.returncode != 0 and "audit.strata: 'colour'" in r.stdout + r.stderr
    path = support.write_config(tmp_path / "d.yaml", _cfg(tmp_path, tiny_corpus, tiny_clip,
                                                          second_judge={"judge": {"adapter": "nope"}}))
    r = support.snakemake(["-n", "-c1"], tmp_path, path)
    assert r.returncode != 0 and "audit.second_judge.judge" in r.stdout + r.stderr
    cfg = _cfg(tmp_path, tiny_corpus, tiny_clip)
    cfg["audit"]["enabled"] = False
    r = support.snakemake(["-n", "-c1"], tmp_path, support.write_config(tmp_path / "e.yaml", cfg))
    assert r.returncode == 0, r.stderr[-3000:]
    assert not any(k.startswith("audit") for k in job_stats(r.stdout + r.stderr))


def test_second_judge_scope_decides_its_inputs(tmp_path, tiny_corpus, tiny_clip):
    """scope sample: the second judge follows the sample; scope all: a new sample never reruns it. The
    sample reads the evaluated systems' runs (its rank stratum) and the evaluate stage nothing of the audit."""
    def edges(scope, systems=False):
        cfg = _cfg(tmp_path, tiny_corpus, tiny_clip, second_judge={"judge": {}, "scope": scope})
        cfg = _with_systems(cfg, tiny_clip) if systems else cfg
        r = support.snakemake(["--rulegraph"], tmp_path, support.write_config(tmp_path / f"{scope}.yaml", cfg))
        assert r.returncode == 0, r.stderr[-3000:]
        names = dict(re.findall(r'(\d+)\[label = "(\w+)"', r.stdout))
        return {(names[a], names[b]) for a, b in re.findall(r"(\d+) -> (\d+)", r.stdout)}

    sample = edges("sample", systems=True)
    assert ("audit_sample", "audit_judge2") in sample and ("audit_judge2", "audit_report") in sample
    whole = edges("all")
    assert ("audit_sample", "audit_judge2") not in whole and ("audit_judge2", "audit_report") in whole
    assert ("plan", "audit_judge2") in whole
    # the second judge's spend is in every total: its cost file is one of the summary's and the export's
    assert ("audit_judge2", "summary") in sample and ("audit_judge2", "summary") in whole
    assert ("evaluate_system", "audit_sample") in sample
    assert not any(a.startswith("audit") and b.startswith("evaluate") for a, b in sample)
    assert not any(a.startswith("evaluate") and b == "audit_sample" for a, b in whole)  # no systems

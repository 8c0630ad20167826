"""Pool deepening in the workflow with the offline (rules) judge: one job per system plus a merge,
off by default, provenance in deepen/qrels.jsonl, every run re-scored, the report and card sections,
deepened pairs marked in the published dataset, and a rerun has nothing to do."""

from __future__ import annotations

import json

import polars as pl
import pytest
import support
import support_runs
from test_workflow import job_stats

from benchmaker.formats import read_table


def _cfg(tmp_path, tiny_cfg, tiny_clip, **deepen):
    tiny_cfg["evaluate"] = {"depth": 20, "systems": [
        {"name": "tiny-clip", "kind": "clip", "model": f"local-dir:{tiny_clip}", "device": "cpu", "num_workers": 0},
        {"name": "bm25", "kind": "bm25"},
        {"name": "ext", "kind": "trec_run", "path": str(tmp_path / "ext.trec"), "scope": "pool"}]}
    (tmp_path / "ext.trec").write_text("")
    if deepen:
        tiny_cfg["deepen"] = deepen
    return support.write_config(tmp_path / "c.yaml", tiny_cfg)


def test_off_by_default_and_one_job_per_system_plus_merge(tmp_path, tiny_cfg, tiny_clip):
    r = support.snakemake(["-n", "-c1"], tmp_path, _cfg(tmp_path, tiny_cfg, tiny_clip))
    assert r.returncode == 0, r.stderr[-3000:]
    assert not {"deepen", "deepen_system"} & set(job_stats(r.stdout + r.stderr))
    r = support.snakemake(["-n", "-c1"], tmp_path, _cfg(tmp_path, tiny_cfg, tiny_clip, enabled=True, k=5))
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    # the two corpus-ranked systems (the pool-only trec_run has nothing to deepen), then one merge
    assert stats["deepen_system"] == 2 and stats["deepen"] == 1
    r = support.snakemake(["-n", "-c1"], tmp_path, _cfg(tmp_path, tiny_cfg, tiny_clip, enabled=True,
                                                         systems=["ext"]))
    assert r.returncode != 0 and "deepen.systems[0]" in r.stdout + r.stderr


@pytest.mark.slow
def test_deepen_offline_end_to_end(tmp_path, tiny_upstream, tiny_clip):
    # deepening reads the merged benchmark, whatever the shards: the one-shard tiny benchmark built once
    # (tiny_upstream), copied here; this run adds the evaluate, deepen, audit, summary and export jobs
    cfg = _cfg(tmp_path, support_runs.copy_upstream(tiny_upstream, tmp_path), tiny_clip, enabled=True, k=5)
    r = support.snakemake(["-c2"], tmp_path, cfg)
    assert r.returncode == 0, r.stderr[-4000:]
    support_runs.assert_upstream_not_rerun(r.stdout + r.stderr)
    res = tmp_path / "results" / "tiny"
    q = read_table("qrels", res / "qrels.jsonl")
    deep = read_table("deepened_qrels", res / "deepen" / "qrels.jsonl")
    # every judged pair kept, unmarked; the added pairs marked, with provenance
    old = deep.filter(~pl.col("deepened"))
    assert old.select("query_id", "image_id", "relevance_label").equals(q.select("query_id", "image_id",
                                                                                "relevance_label"))
    new = deep.filter(pl.col("deepened"))
    assert new.height > 0 and set(new["pool"]) == {"deepen"}
    assert set(new["deepen_system"]) <= {"tiny-clip", "bm25"} and new["deepen_depth"].is_between(1, 5).all()
    assert new.select(pl.col("deepen_systems").list.contains(pl.col("deepen_system"))).to_series().all()
    assert not new.join(q, on=["query_id", "image_id"], how="semi").height       # nothing judged twice
    rep = json.loads((res / "deepen" / "report.json").read_text())
    rows = {r["system"]: r for r in rep["per_system"]}
    assert set(rows) == {"tiny-clip", "bm25"}
    assert sum(r["pairs_added"] for r in rows.values()) == new.height == rep["pairs_added"]
    for r in rows.values():     # k=5 <= depth: every hole of a deepened system is judged now
        assert r["judged_before"] < r["judged_after"] == 1.0
        assert r["score_after"] is not None and r["score_before"] is not None
    assert rep["leave_one_out"]["systems_ranked"] == 2 and len(rep["leave_one_out"]["per_system"]) == 2
    after = pl.read_csv(res / "deepen" / "evaluate" / "leaderboard.csv")
    assert set(after["system"]) == {"tiny-clip", "bm25", "ext"}
    # the report and the card show it; the dataset publishes the deepened qrels, deepened pairs marked
    md = (res / "summary" / "report.md").read_text()
    assert "Pool deepening" in md and "leave-one-system-out" in md
    card = (res / "hf_dataset" / "README.md").read_text()
    assert "## Pool deepening" in card and "Kendall tau" in card and "deepened == false" in card
    pub = read_table("deepened_qrels", res / "hf_dataset" / "deepen" / "qrels.jsonl")
    assert pub.filter(pl.col("deepened")).height == new.height
    costs = res / "costs" / "deepen"
    assert sorted(p.name for p in costs.iterdir()) == ["bm25.jsonl", "tiny-clip.jsonl"]
    # a rerun: nothing to do
    r = support.snakemake(["-n", "-c1"], tmp_path, cfg)
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, r.stdout[-3000:]


def test_example_overlay_dry_run_from_repo_root():
    """The documented overlay on the example (docs/deepen.md): one deepen_system job per corpus-ranked
    system of config/offline.yaml plus the merge; the example's defaults alone have none."""
    import os
    import subprocess
    import sys

    root = support.ROOT
    base = [sys.executable, "-m", "snakemake", "-n", "-F", "-c2", "--workflow-profile", "none"]
    env = {**os.environ, "PATH": support.no_slurm_path(), "PYTHONPATH": str(root / "src")}
    r = subprocess.run(base, cwd=root, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not {"deepen", "deepen_system"} & set(job_stats(r.stdout + r.stderr))
    r = subprocess.run([*base, "--configfile", "config/config.yaml", "config/offline.yaml", "config/deepen.yaml"],
                       cwd=root, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    assert stats["deepen_system"] == 2 and stats["deepen"] == 1 and stats["summary"] == 1


@pytest.mark.slow
def test_workflow_openai_judge_through_the_fake_pays_each_new_pair_once(tmp_path, tiny_corpus, tiny_clip):
    """The workflow with the openai judge (sync) against the strict fake server: the deepen requests
    hold only pairs no judge labelled, each new pair once; forcing the deepen jobs again sends nothing."""
    import fake_openai

    from benchmaker.io import iter_jsonl

    fake = fake_openai.start(steps=2)
    try:
        llm = {"base_url": fake.base_url, "image_max_side": 64, "model": "gpt-5-mini", "mode": "sync",
               "concurrency": 2}
        cfg = support.tiny_config(tmp_path, tiny_corpus, tiny_clip, n_shards=1,  # deepening: after the merge
                                  judge={"adapter": "openai", "openai": llm},
                                  evaluate={"depth": 20, "systems": [{"name": "bm25", "kind": "bm25"},
                                                                     {"name": "bm25b", "kind": "bm25", "k1": 0.5,
                                                                      "fields": ["summary"]}]},
                                  deepen={"enabled": True, "k": 6})
        config = support.write_config(tmp_path / "c.yaml", cfg)
        env = {"OPENAI_API_KEY": "sk-test"}
        r = support.snakemake(["-c2", "deepen"], tmp_path, config, env=env)
        assert r.returncode == 0, r.stderr[-4000:]
        res = tmp_path / "results" / "tiny"
        bodies = [b for m, p, b in fake.log if m == "POST" and p == "/v1/responses"]
        # labelling requests (the query and its narrative given): the judge's first (deepening reads its
        # qrels), as many as it paid for, then the deepen jobs'; the query writer's are not labelling
        labelling = [b for b in bodies if "\nQUERY: " in fake_openai.request_text(b)]
        n_judge = sum(not c["cached"] for c in iter_jsonl(res / "costs" / "judge.jsonl"))
        deep = labelling[n_judge:]
        assert deep and len(deep) < len(bodies)
        q = read_table("qrels", res / "qrels.jsonl")
        dq = read_table("deepened_qrels", res / "deepen" / "qrels.jsonl")
        new = dq.filter(pl.col("deepened"))
        assert not new.join(q, on=["query_id", "image_id"], how="semi").height      # never a judged pair
        # each new pair in exactly one request: the keys sent equal the new pairs
        assert sum(len(fake_openai.data_keys(fake_openai.request_text(b))) for b in deep) == new.height > 0
        assert set(new["judge"]) == {"openai:gpt-5-mini"}
        texts = dict(q.select("query_id", "query_text").unique("query_id").iter_rows())
        sent_texts = {fake_openai.request_text(b).split("\nQUERY: ", 1)[1].split("\n", 1)[0] for b in deep}
        assert sent_texts <= set(texts.values())                                   # the published texts
        costs = [c for f in sorted((res / "costs" / "deepen").glob("*.jsonl")) for c in iter_jsonl(f)]
        assert {c["stage"] for c in costs} == {"deepen"} and sum(not c["cached"] for c in costs) == len(deep)
        n = len(bodies)
        r = support.snakemake(["-c2", "deepen", "--forcerun", "deepen_system"], tmp_path, config, env=env)
        assert r.returncode == 0, r.stderr[-4000:]
        assert sum(1 for m, p, _ in fake.log if m == "POST" and p == "/v1/responses") == n
    finally:
        fake_openai.stop(fake)

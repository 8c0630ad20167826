"""The evaluate target in the workflow: jobs per system, GPU only for model systems, the real run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
import support
import support_runs
from test_workflow import job_stats

from benchmaker.ids import trec_id


def _systems(clip_dir, ext=None):
    s = [{"name": "tiny-clip", "kind": "clip", "model": f"local-dir:{clip_dir}", "device": "cpu", "num_workers": 0},
         {"name": "bm25", "kind": "bm25"},
         {"name": "fused", "kind": "hybrid", "systems": ["tiny-clip", "bm25"]}]
    if ext:
        s.append({"name": "ext", "kind": "trec_run", "path": str(ext), "scope": "pool"})
    return s


def test_dry_run_one_job_per_system_and_all_only_with_systems(tmp_path, tiny_cfg, tiny_clip):
    cfg = support.write_config(tmp_path / "none.yaml", tiny_cfg)
    r = support.snakemake(["-n", "-c1"], tmp_path, cfg)
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    assert not {"evaluate", "evaluate_model", "evaluate_system"} & set(stats)
    r = support.snakemake(["-n", "-c1", "evaluate"], tmp_path, cfg)
    assert r.returncode == 0 and job_stats(r.stdout + r.stderr)["evaluate"] == 1
    # a batch-mode reranker: a local job on the controller like the API vision/judge rules (API keys, no
    # cluster time limit), no GPU; its cost file an input of the summary
    rerank = {"name": "vlm", "kind": "rerank", "base": "bm25", "k": 3,
              "llm": {"model": "gpt-5-mini", "mode": "batch", "poll_seconds": 5}}
    # tiny-clip has the similarity stage's model: it ranks that stage's embeddings (a CPU job, no
    # weights); the same model in fp32 (similarity.precision is auto) loads it (evaluate_model)
    other = {**_systems(tiny_clip)[0], "name": "tiny-clip-fp32", "precision": "fp32"}
    tiny_cfg["evaluate"] = {"systems": [*_systems(tiny_clip), rerank, other]}
    cfg = support.write_config(tmp_path / "with.yaml", tiny_cfg)
    r = support.snakemake(["-n", "-c1", "-p"], tmp_path, cfg)
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    assert stats["evaluate_model"] == 1 and stats["evaluate_system"] == 3 and stats["evaluate"] == 1
    assert stats["evaluate_api"] == 1
    out = r.stdout + r.stderr
    # the reranker is a local rule (on the controller, like the API vision/judge rules), the others not
    probe = ("import json, sys; from pathlib import Path; from snakemake.api import SnakemakeApi; "
             "from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings\n"
             "with SnakemakeApi(OutputSettings(quiet=None)) as api:\n"
             "    wf = api.workflow(resource_settings=ResourceSettings(cores=1), storage_settings=StorageSettings(),"
             " config_settings=ConfigSettings(configfiles=[Path(sys.argv[2])]), snakefile=Path(sys.argv[1]),"
             " workdir=Path(sys.argv[3]))\n"
             "    print(json.dumps(sorted(wf._workflow._localrules)))\n")
    import os
    import subprocess
    import sys

    rc = subprocess.run([sys.executable, "-c", probe, str(support.ROOT / "Snakefile"), str(cfg), str(tmp_path)],
                        capture_output=True, text=True, timeout=300,
                        env={**os.environ, "PYTHONPATH": str(support.ROOT / "src"), "PATH": support.no_slurm_path()})
    assert rc.returncode == 0, rc.stderr[-3000:]
    local = set(__import__("json").loads(rc.stdout.strip().splitlines()[-1]))
    assert "evaluate_api" in local and not {"evaluate_system", "evaluate_model"} & local, local
    summary = re.split(r"\n(?=(?:local)?rule \w+:)", out.split("rule summary:")[1])[0]
    assert "costs/evaluate/vlm.jsonl" in summary and "costs/judge.jsonl" in summary
    # GPU resources only on the model job
    blocks = re.split(r"\n(?=(?:local)?rule \w+:)", out)
    assert any(b.startswith("rule evaluate_model:") and "gpu=1" in b for b in blocks)
    model_job = next(b for b in blocks if b.startswith("rule evaluate_model:"))
    assert "system=tiny-clip-fp32" in model_job and "open_clip_config.json" in model_job
    reused = next(b for b in blocks if b.startswith("rule evaluate_system:") and "system=tiny-clip\n" in b)
    inputs = reused.split("input: ")[1].split("\n")[0].split(", ")
    shards = [f"{s:05d}" for s in range(tiny_cfg["n_shards"])]
    assert {Path(p).relative_to(Path(inputs[0]).parent).as_posix() for p in inputs} == {
        "qrels.jsonl", "images.jsonl", "embeddings/queries.parquet",
        *(f"embeddings/images/{s}.parquet" for s in shards), *(f"losses/embed/{s}.jsonl" for s in shards)}
    assert [b for b in blocks if b.startswith("rule evaluate_system:")]
    assert not any(b.startswith(("rule evaluate_system:", "localrule evaluate_api:")) and "gpu=" in b
                   for b in blocks)


def test_bad_system_names_the_key(tmp_path, tiny_cfg):
    tiny_cfg["evaluate"] = {"systems": [{"name": "h", "kind": "hybrid", "systems": ["x", "y"]}]}
    cfg = support.write_config(tmp_path / "c.yaml", tiny_cfg)
    r = support.snakemake(["-n", "-c1"], tmp_path, cfg)
    assert r.returncode != 0 and "evaluate.systems[0].systems" in r.stdout + r.stderr


@pytest.mark.slow
def test_evaluate_target_end_to_end(tmp_path, tiny_upstream, tiny_clip):
    ext = tmp_path / "ext.trec"
    # the systems rank the merged benchmark (shard inputs: the dry-run test above): the one-shard tiny
    # benchmark built once (tiny_upstream), copied here; this run adds the evaluate jobs only
    tiny_cfg = support_runs.copy_upstream(tiny_upstream, tmp_path,
                                          evaluate={"systems": _systems(tiny_clip, ext), "k": [5], "report": False})
    cfg = support.write_config(tmp_path / "c.yaml", tiny_cfg)
    res = tmp_path / tiny_cfg["paths"]["results"] / tiny_cfg["benchmark"]["name"]
    qrels = pl.read_ndjson(res / "qrels.jsonl")
    q0 = qrels["query_id"][0]
    pool = qrels.filter(pl.col("query_id") == q0)["image_id"].to_list()
    ext.write_text("".join(f"{trec_id(q0)} Q0 {trec_id(i)} {n + 1} {10 - n} ext\n" for n, i in enumerate(pool)))
    r = support.snakemake(["-c2", "--show-failed-logs", "evaluate"], tmp_path, cfg, timeout=1500)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    support_runs.assert_upstream_not_rerun(r.stdout + r.stderr)
    board = pl.read_csv(res / "evaluate" / "leaderboard.csv")
    assert set(board["system"]) == {"tiny-clip", "bm25", "fused", "ext"}
    assert board.filter(pl.col("system") == "ext")["scope"].to_list() == ["pool"]
    for name in ("tiny-clip", "bm25", "fused", "ext"):
        lines = (res / "evaluate" / "runs" / f"{name}.trec").read_text().splitlines()
        assert lines and all(len(x.split()) == 6 and x.split()[-1] == name for x in lines)
    doc = json.loads((res / "evaluate" / "leaderboard.json").read_text())
    assert {s["name"]: s["sees_judge_text"] for s in doc["systems"]} == {
        "tiny-clip": False, "bm25": True, "fused": True, "ext": False}
    for f in ("drilldown.csv", "significance.csv", "per_query.csv"):
        assert (res / "evaluate" / f).is_file()
    # how far to trust it (docs/trust.md): the MDD of every pair of the 4 systems (pool scope), circularity:
    # the tiny CLIP is the vision annotator's model, the hybrid fuses it, the external run names no model
    trust = json.loads((res / "evaluate" / "trust.json").read_text())
    assert trust["power"]["status"] == "ok"
    power = pl.read_csv(res / "evaluate" / "power.csv")
    assert power.filter((pl.col("scope") == "pool") & (pl.col("metric") == "ndcg@5")).height == 6
    assert trust["circularity"]["circular"] == ["fused", "tiny-clip"]
    assert trust["circularity"]["unknown"] == ["ext"]
    # the sage view (docs/evaluate.md): one file per corpus-ranked system, in imsearch_eval's columns
    from benchmaker.evaluate.sage import sage_columns

    assert sorted(p.name for p in (res / "evaluate" / "sage").iterdir()) == ["bm25.csv", "fused.csv", "tiny-clip.csv"]
    for name in ("tiny-clip", "bm25", "fused"):
        per = pl.read_csv(res / "evaluate" / "sage" / f"{name}.csv")
        assert per.columns[:15] == [*sage_columns(), "complete"] and per.height == qrels["query_text"].n_unique()
    sage = pl.read_csv(res / "evaluate" / "sage_leaderboard.csv")
    assert set(sage["system"]) == {"tiny-clip", "bm25", "fused"} and (sage["limit"] == 25).all()
    assert doc["sage"]["limit"] == 25
    # nothing left to do; a sage setting reruns the aggregate only; editing one system reruns it, what
    # fuses it and the aggregate only
    r = support.snakemake(["-n", "-c1", "evaluate"], tmp_path, cfg)
    assert "Nothing to be done" in r.stdout + r.stderr
    r = support.snakemake(["-n", "-c1", "evaluate"], tmp_path, support.write_config(
        tmp_path / "c_sage.yaml", {**tiny_cfg, "evaluate": {**tiny_cfg["evaluate"], "sage": {"limit": 50}}}))
    assert job_stats(r.stdout + r.stderr) == {"evaluate": 1}, (r.stdout + r.stderr)[-3000:]
    tiny_cfg["evaluate"]["systems"][1]["k1"] = 1.2
    cfg = support.write_config(tmp_path / "c1.yaml", tiny_cfg)
    r = support.snakemake(["-n", "-c1", "evaluate"], tmp_path, cfg)
    assert job_stats(r.stdout + r.stderr) == {"evaluate_system": 2, "evaluate": 1}, (r.stdout + r.stderr)[-3000:]
    # dropping every system leaves an empty leaderboard (not an error)
    tiny_cfg["evaluate"] = {"systems": []}
    cfg = support.write_config(tmp_path / "c0.yaml", tiny_cfg)
    r = support.snakemake(["-c1", "evaluate"], tmp_path, cfg)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert json.loads((res / "evaluate" / "leaderboard.json").read_text())["systems"] == []

"""The Snakemake workflow with the openai adapter against the fake server: vision in batch mode
(build -> submit -> collect per shard), judge in sync mode, then a rerun that sends nothing."""

from __future__ import annotations

import json

import fake_openai
import pytest
from support import snakemake, tiny_config, write_config

pytestmark = pytest.mark.slow


@pytest.fixture()
def fake():
    f = fake_openai.start(steps=2)
    yield f
    fake_openai.stop(f)


def test_workflow_vision_batch_judge_sync(fake, tmp_path, tiny_corpus, tiny_clip):
    llm = {"base_url": fake.base_url, "poll_seconds": 0.05, "image_max_side": 64, "model": "gpt-5-mini"}
    cfg = tiny_config(tmp_path, tiny_corpus, tiny_clip,
                      vision={"adapter": "openai", "openai": {**llm, "mode": "batch"}},
                      judge={"adapter": "openai", "labels": "binary", "rationale": True,
                             "openai": {**llm, "mode": "sync", "concurrency": 2}})
    config = write_config(tmp_path / "config.yaml", cfg)
    env = {"OPENAI_API_KEY": "sk-test"}
    target = f"{tmp_path}/results/tiny/qrels.jsonl"
    r = snakemake(["--cores", "2", target, f"{tmp_path}/results/tiny/costs/judge.jsonl"], tmp_path, config, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    res = tmp_path / "results" / "tiny"
    assert "vision_submit" in r.stderr and "vision_collect" in r.stderr
    n_batches = fake.count("POST", "/v1/batches")
    assert n_batches == 2                                # one per shard
    qrels = [json.loads(x) for x in (res / "qrels.jsonl").read_text().splitlines()]
    assert qrels and all(q["judge"] == "openai:gpt-5-mini" for q in qrels)
    assert all(q["rationale"] for q in qrels)
    costs = [json.loads(x) for f in sorted((res / "costs").rglob("*.jsonl")) for x in f.read_text().splitlines()]
    assert {c["stage"] for c in costs} == {"vision", "judge"}
    assert {c["mode"] for c in costs if c["stage"] == "vision"} == {"batch"}
    sent = fake.count("POST", "/v1/responses")
    for path in (tmp_path / "results").rglob("*"):     # nothing secret in any output or log
        if path.is_file() and path.stat().st_size < 5_000_000:
            assert b"sk-test" not in path.read_bytes(), path
    # forcing the API stages to run again pays nothing: every answer comes from the cache
    r2 = snakemake(["--cores", "2", target, "--forcerun", "vision_build", "judge"], tmp_path, config, env=env)
    assert r2.returncode == 0, r2.stderr[-4000:]
    assert fake.count("POST", "/v1/batches") == n_batches
    assert fake.count("POST", "/v1/responses") == sent
    vcosts = [json.loads(x) for f in sorted((res / "costs" / "vision").glob("*.jsonl"))
              for x in f.read_text().splitlines()]
    assert vcosts and all(c["cached"] and c["cost_usd"] == 0 for c in vcosts if c["last_run"])
    # the cost files keep the spend to date: the paid rows of the first run are still there
    before = sum(c["cost_usd"] for c in costs)
    after = [json.loads(x) for f in sorted((res / "costs").rglob("*.jsonl")) for x in f.read_text().splitlines()]
    assert sum(c["cost_usd"] for c in after) == pytest.approx(before)
    assert sum(c["cost_usd"] for c in after if c["last_run"]) == 0
    # a plan edit on the finished benchmark: `benchmaker estimate` plans the queries as the plan rule will
    # (the planner's own code on the annotations the run has) and counts exactly the requests the run
    # then sends (issue 34: it read the old query_plan.jsonl and counted none)
    from benchmaker.config import load_config
    from benchmaker.estimate import estimate

    lines = {ln["stage"]: ln for ln in estimate(load_config(str(config)))}
    assert lines["judge"]["requests"] == 0 and lines["vision"]["requests"] == 0
    cfg["plan"]["num_seeds"] = 6
    cfg["plan"]["pos_total"] = 2
    config = write_config(tmp_path / "config.yaml", cfg)
    lines = {ln["stage"]: ln for ln in estimate(load_config(str(config)))}
    assert lines["judge"]["source"].startswith("the planner's plan") and lines["vision"]["requests"] == 0
    r3 = snakemake(["--cores", "2", target], tmp_path, config, env=env)
    assert r3.returncode == 0, r3.stderr[-4000:]
    assert lines["judge"]["requests"] > 0
    assert fake.count("POST", "/v1/responses") - sent == lines["judge"]["requests"]
    assert fake.count("POST", "/v1/batches") == n_batches

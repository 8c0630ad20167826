"""The Snakemake workflow with the openai adapter against the fake server: vision in batch mode
(build -> submit -> collect per shard), query writing and judge in sync mode, then a rerun that sends
nothing, then the migration of a benchmark built before the queries stage (#31): it writes its
queries and labels once more, and pays for nothing else."""

from __future__ import annotations

import json
import shutil

import fake_openai
import pytest
from support import job_stats, snakemake, tiny_config, write_config

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
    targets = [target, f"{tmp_path}/results/tiny/costs/judge.jsonl", f"{tmp_path}/results/tiny/costs/queries.jsonl"]
    r = snakemake(["--cores", "2", *targets], tmp_path, config, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    res = tmp_path / "results" / "tiny"
    assert "vision_submit" in r.stderr and "vision_collect" in r.stderr
    n_batches = fake.count("POST", "/v1/batches")
    assert n_batches == 2                                # one per shard
    qrels = [json.loads(x) for x in (res / "qrels.jsonl").read_text().splitlines()]
    assert qrels and all(q["judge"] == "openai:gpt-5-mini" for q in qrels)
    assert all(q["rationale"] for q in qrels)
    costs = [json.loads(x) for f in sorted((res / "costs").rglob("*.jsonl")) for x in f.read_text().splitlines()]
    assert {c["stage"] for c in costs} == {"vision", "queries", "judge"}
    n_queries = len({q["query_id"] for q in qrels})
    # one writer's request per query (each seed's own pixels); the fake annotates every image alike, so
    # the judge's requests of pools of one size are the same bytes: sent once
    assert sum(c["stage"] == "queries" and not c["cached"] for c in costs) == n_queries
    n_judge = sum(c["stage"] == "judge" and not c["cached"] for c in costs)
    assert n_judge >= 1
    assert {c["mode"] for c in costs if c["stage"] == "vision"} == {"batch"}
    sent = fake.count("POST", "/v1/responses")
    for path in (tmp_path / "results").rglob("*"):     # nothing secret in any output or log
        if path.is_file() and path.stat().st_size < 5_000_000:
            assert b"sk-test" not in path.read_bytes(), path
    # forcing the API stages to run again pays nothing: every answer comes from the cache
    r2 = snakemake(["--cores", "2", target, "--forcerun", "vision_build", "queries", "judge"], tmp_path, config,
                   env=env)
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
    # migration: a benchmark built before the queries stage has no queries.jsonl (nor the writer's cache
    # and ledger), and its judge's cached answers are of the old one-request design (other request
    # keys: none is reused). The next run writes the queries and labels again, nothing else, and pays
    # for exactly those requests: the writer's and the judge's, no batch
    for name in ("queries.jsonl", "losses/queries.jsonl", "costs/queries.jsonl", ".ledger/queries"):
        p = res / name
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    for cache in ("queries", "judge"):
        shutil.rmtree(tmp_path / "results" / ".cache" / cache)
    r3 = snakemake(["--cores", "2", *targets], tmp_path, config, env=env)
    assert r3.returncode == 0, r3.stderr[-4000:]
    assert set(job_stats(r3.stdout + r3.stderr)) - {"total"} == {"queries", "judge"}
    assert fake.count("POST", "/v1/batches") == n_batches
    assert fake.count("POST", "/v1/responses") == sent + n_queries + n_judge
    sent = fake.count("POST", "/v1/responses")
    # a plan edit on the finished benchmark: `benchmaker estimate` plans the queries as the plan rule will
    # (the planner's own code on the annotations the run has) and counts exactly the requests the run
    # then sends (issue 34: it read the old query_plan.jsonl and counted none)
    from benchmaker.config import load_config
    from benchmaker.estimate import estimate

    lines = {ln["stage"]: ln for ln in estimate(load_config(str(config)))}
    assert lines["judge"]["requests"] == lines["queries"]["requests"] == lines["vision"]["requests"] == 0
    cfg["plan"]["num_seeds"] = 6
    cfg["plan"]["pos_total"] = 2
    config = write_config(tmp_path / "config.yaml", cfg)
    lines = {ln["stage"]: ln for ln in estimate(load_config(str(config)))}
    assert lines["judge"]["source"].startswith("the planner's plan") and lines["vision"]["requests"] == 0
    assert lines["queries"]["source"].startswith("the planner's plan")
    r4 = snakemake(["--cores", "2", target], tmp_path, config, env=env)
    assert r4.returncode == 0, r4.stderr[-4000:]
    assert lines["judge"]["requests"] > 0 and lines["queries"]["requests"] > 0
    qc = [json.loads(x) for x in (res / "costs" / "queries.jsonl").read_text().splitlines()]
    n_written = sum(c["last_run"] and not c["cached"] for c in qc)
    assert n_written == lines["queries"]["requests"]
    # the judge's requests for queries not written yet are priced with a typical text: exact for every
    # written one; the fake writes every query alike, so the run may merge some of the new ones
    assert 0 < fake.count("POST", "/v1/responses") - sent - n_written <= lines["judge"]["requests"]
    assert fake.count("POST", "/v1/batches") == n_batches

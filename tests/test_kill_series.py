"""A whole run (vision in batch mode, query writing and judge in sync mode, against the fake OpenAI
server) under a seeded random series of ``kill -9`` (Snakemake and its jobs at once) at six points of
the paid stages: an upload, a batch create (accepted by the server, never heard of by the client), a
poll that finds a batch done, a download of its output, a query writer's request, a judge request.
After each kill the README's resume command runs. The end: the same data bytes as an uninterrupted
run, no batch created twice, and cost records equal to the fake's bill."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import fake_openai
import pytest
from support import ROOT, tiny_config, write_config

from benchmaker.io import iter_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

SEED = 19
DATA = ("annotations.jsonl", "query_plan.jsonl", "queries.jsonl", "qrels.jsonl")


def _config(tmp: Path, corpus: Path, clip: Path, fake) -> Path:
    llm = {"base_url": fake.base_url, "poll_seconds": 0.05, "image_max_side": 64, "model": "gpt-5-mini"}
    cfg = tiny_config(tmp, corpus, clip, vision={"adapter": "openai", "openai": {**llm, "mode": "batch"}},
                      judge={"adapter": "openai", "labels": "binary",
                             "openai": {**llm, "mode": "sync", "concurrency": 1}})
    return write_config(tmp / "config.yaml", cfg)


def _cmd(tmp: Path, config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(tmp), "--configfile",
            str(config), "--workflow-profile", "none", *args]


def _env() -> dict:
    e = dict(os.environ)
    e.update(HF_HUB_OFFLINE="1", OPENAI_API_KEY="sk-test",
             PYTHONPATH=str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", ""))
    return e


def _target(tmp: Path) -> list[str]:
    res = tmp / "results" / "tiny"
    return [str(res / "qrels.jsonl"), str(res / "costs" / "judge.jsonl"), str(res / "costs" / "queries.jsonl")]


def _run(tmp: Path, config: Path, fake, kill: tuple[str, int] | None) -> int:
    """One run of the README's command (after ``--unlock``); ``kill``: the armed kill point."""
    subprocess.run(_cmd(tmp, config, "--unlock"), env=_env(), capture_output=True, timeout=300)
    proc = subprocess.Popen(_cmd(tmp, config, "--cores", "2", "--rerun-incomplete", *_target(tmp)),
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    if kill is not None:
        fake.kill_at = (*kill, lambda: os.killpg(proc.pid, signal.SIGKILL))
    try:
        _, err = proc.communicate(timeout=900)
    finally:
        fake.kill_at = None
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(err.decode()[-4000:])
    return proc.returncode


def test_seeded_kill_series_same_bytes_and_costs_equal_bill(tmp_path, tiny_corpus, tiny_clip):
    rnd = random.Random(SEED)
    points = [("upload", rnd.randint(1, 2)), ("create", rnd.randint(1, 2)), ("poll_done", 1),
              ("download", rnd.randint(1, 2)),
              # the queries stage runs first (one request per planned query, concurrency 1): the first
              # sync request is the query writer's; after it, the resumed run sends the writer's (the
              # plan has 4 queries) and then the judge's, so the 5th sync request is a judge's
              ("sync", 1), ("sync", 5)]
    # the uninterrupted run
    base = tmp_path / "base"
    base.mkdir()
    f0 = fake_openai.start(steps=2)
    try:
        assert _run(base, _config(base, tiny_corpus, tiny_clip, f0), f0, None) == 0
    finally:
        fake_openai.stop(f0)
    # the run killed at each point in turn, resumed each time with the README's command
    run = tmp_path / "killed"
    run.mkdir()
    fake = fake_openai.start(steps=2)
    try:
        config = _config(run, tiny_corpus, tiny_clip, fake)
        for point in points:
            _run(run, config, fake, point)
        assert fake.killed == [k for k, _ in points], fake.killed       # every kill point was reached
        assert _run(run, config, fake, None) == 0
        created = [b for m, p, b in fake.log if m == "POST" and p == "/v1/batches"]
        res = run / "results" / "tiny"
        for name in DATA:
            assert (res / name).read_bytes() == (base / "results" / "tiny" / name).read_bytes(), name
        assert len(fake.batches) == len(f0.batches)                     # no batch created twice
        assert len(created) >= len(fake.batches)
        costs = [c for f in sorted((res / "costs").rglob("*.jsonl")) for c in iter_jsonl(f)]
        assert sum(c["cost_usd"] for c in costs) == pytest.approx(fake.billed_usd(), rel=1e-9, abs=1e-12)
        assert sum(not c["cached"] for c in costs) == len(fake.bill)
    finally:
        fake_openai.stop(fake)

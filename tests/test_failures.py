"""What a user sees when something they control is wrong: the terminal output of `snakemake` ends
with one short block naming the problem and the fix; the traceback is in the rule's log only."""

from __future__ import annotations

import re

import fake_openai
import pytest
from support import snakemake, tiny_config, write_config

pytestmark = pytest.mark.slow

BAR = "=" * 78


def final_block(text: str) -> str:
    """The block between the last two bars printed by the Snakefile's onerror handler."""
    parts = text.split(BAR)
    assert len(parts) >= 3, text[-3000:]
    return parts[-2]


def assert_quiet_failure(r, *needles: str, log_glob: str | None = None, workdir=None) -> str:
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "Traceback" not in out, out[-6000:]
    block = final_block(out)
    for n in needles:
        assert n in block, block
    # after the block only Snakemake's own trailer (log path, elapsed time, its one-line error)
    tail = out.split(BAR)[-1].strip().splitlines()
    assert len(tail) <= 5, tail
    # the block is printed once, last (not also where the job failed), without Snakemake's wrapper lines
    first_line = block.strip().splitlines()[0]
    assert out.count(first_line) == 1, out[-6000:]
    assert "RuleException" not in out and "returned non-zero exit status" not in out, out[-6000:]
    if log_glob:
        logs = sorted(workdir.glob(log_glob))
        assert logs and any("Traceback" in p.read_text() for p in logs), logs
        assert all(not re.search(r"DEBUG \[httpcore", p.read_text()) for p in logs)
    return block


def test_no_network_for_weights(tmp_path, tiny_corpus, tiny_clip):
    cfg = tiny_config(tmp_path, tiny_corpus, tiny_clip,
                      vision={"clip": {"model": "hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K"}})
    config = write_config(tmp_path / "config.yaml", cfg)
    target = f"{tmp_path}/results/tiny/annotations.jsonl"
    r = snakemake(["--cores", "2", target], tmp_path, config, env={"HF_HUB_OFFLINE": "1"})
    # a Hub model's config decides its input pixels: the first job to need it is decode_images (CPU)
    block = assert_quiet_failure(r, "rule decode_images failed", "HF_HUB_OFFLINE=1", "local-dir:", "vision.clip",
                                 log_glob="results/tiny/logs/decode_images/*/*.log", workdir=tmp_path)
    assert "in 2 jobs" in block or "full log and traceback" in block


def test_missing_image_folder_fails_before_planning(tmp_path, tiny_corpus, tiny_clip):
    cfg = tiny_config(tmp_path, tiny_corpus, tiny_clip)
    cfg["paths"]["image_root"] = str(tmp_path / "no-such-folder")
    config = write_config(tmp_path / "config.yaml", cfg)
    r = snakemake(["-n", "--cores", "1"], tmp_path, config)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "paths.image_root" in out and "does not exist" in out and "no-such-folder" in out
    assert "Traceback" not in out
    assert "Job stats" not in out            # nothing was planned
    assert not (tmp_path / "results").exists()


def test_bad_config_key(tmp_path, tiny_corpus, tiny_clip):
    cfg = tiny_config(tmp_path, tiny_corpus, tiny_clip)
    cfg["judge"]["adaptr"] = "rules"
    config = write_config(tmp_path / "config.yaml", cfg)
    r = snakemake(["-n", "--cores", "1"], tmp_path, config)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "unknown key judge.adaptr" in out and "allowed here:" in out and "adapter" in out
    assert "Traceback" not in out and "Job stats" not in out


@pytest.mark.parametrize("mode", ["sync", "batch"])
def test_bad_api_key_against_fake_server(tmp_path, tiny_corpus, tiny_clip, mode):
    fake = fake_openai.start(steps=1)
    try:
        cfg = tiny_config(tmp_path, tiny_corpus, tiny_clip,
                          vision={"adapter": "openai", "openai": {"base_url": fake.base_url, "mode": mode,
                                                                  "concurrency": 2, "poll_seconds": 0.05,
                                                                  "image_max_side": 64}})
        config = write_config(tmp_path / "config.yaml", cfg)
        target = f"{tmp_path}/results/tiny/annotations.jsonl"
        r = snakemake(["--cores", "1", target], tmp_path, config, env={"OPENAI_API_KEY": "sk-wrong"})
        assert_quiet_failure(r, "rejected the API key", "OPENAI_API_KEY", "api_key_env",
                             log_glob="results/tiny/logs/vision*/*.log", workdir=tmp_path)
        # a rejected key stops the stage: at most the requests already in flight (concurrency x 4 queued),
        # never every image of the shard times max_attempts
        n_sent = sum(1 for e in fake.log if e[0] == "POST")
        assert n_sent <= 8, n_sent
        assert "sk-wrong" not in r.stdout + r.stderr
    finally:
        fake_openai.stop(fake)


def test_bad_gemini_key_against_fake_server(tmp_path, tiny_corpus, tiny_clip):
    """Gemini answers a wrong key with 400 INVALID_ARGUMENT "API key not valid": a rejected key too."""
    import fake_gemini

    fake = fake_gemini.start()
    try:
        cfg = tiny_config(tmp_path, tiny_corpus, tiny_clip,
                          vision={"adapter": "gemini", "gemini": {"base_url": fake.base_url, "mode": "sync",
                                                                  "concurrency": 1, "image_max_side": 64}})
        config = write_config(tmp_path / "config.yaml", cfg)
        target = f"{tmp_path}/results/tiny/annotations.jsonl"
        r = snakemake(["--cores", "1", target], tmp_path, config, env={"GEMINI_API_KEY": "gm-wrong"})
        assert_quiet_failure(r, "gemini API rejected the API key", "GEMINI_API_KEY", "api_key_env",
                             log_glob="results/tiny/logs/vision/*.log", workdir=tmp_path)
        assert "gm-wrong" not in r.stdout + r.stderr
        # the provider's words, not the hint for a 400 ("malformed or too large"), cut off mid-word
        assert "(HTTP 400: API key not valid.)" in r.stdout + r.stderr
        assert "malformed" not in r.stdout + r.stderr
    finally:
        fake_gemini.stop(fake)

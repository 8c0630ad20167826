"""A failure under the repository's own workflow profile (profiles/default, which Snakemake loads on
every run from the checkout) prints the final block only, not the rule's whole log."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import support
from test_failures import assert_quiet_failure

pytestmark = pytest.mark.slow


def test_failure_prints_the_final_block_only_with_the_default_profile(tmp_path, tiny_corpus, tiny_clip):
    cfg = support.tiny_config(tmp_path, tiny_corpus, tiny_clip,
                              vision={"clip": {"model": "hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K"}})
    config = support.write_config(tmp_path / "config.yaml", cfg)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(support.ROOT / "src"),
           "PATH": support.no_slurm_path()}
    # as a user runs it: no --workflow-profile argument, so profiles/default applies
    r = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(support.ROOT / "Snakefile"), "-d", str(tmp_path),
                        "--configfile", str(config), "--cores", "2", f"{tmp_path}/results/tiny/annotations.jsonl"],
                       capture_output=True, text=True, env=env, timeout=900)
    assert "Using workflow specific profile" in r.stdout + r.stderr
    block = assert_quiet_failure(r, "rule vision failed", "HF_HUB_OFFLINE=1",
                                 log_glob="results/tiny/logs/vision/*.log", workdir=tmp_path)
    assert "log" in block

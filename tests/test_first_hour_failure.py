"""The README's failing first command, run as a user runs it: the example config with no weights and no
Hub (``HF_HUB_OFFLINE=1 make example``'s Snakemake run, in a scratch folder, under the repository's own
workflow profile). Its fix is printed once, as the final block, with no wrapper exception lines, and the
README quotes that block exactly."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import support
from test_failures import BAR, assert_quiet_failure, final_block

pytestmark = pytest.mark.slow

WRAPPERS = ("ERROR [root]", "RuleException", "CalledProcessError", "returned non-zero exit status", "Traceback")


def _readme_block() -> str:
    text = (support.ROOT / "README.md").read_text(encoding="utf-8")
    after = text[text.index("No network at all?"):]
    return re.search(r"```text\n(.*?)```", after, re.S).group(1).strip()


def test_the_readme_failure_is_what_a_user_sees(tmp_path):
    for name in ("example", "config"):  # the checkout's example, its paths relative to the run folder
        (tmp_path / name).symlink_to(support.ROOT / name)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "PYTHONPATH": str(support.ROOT / "src"), "PATH": support.no_slurm_path()}
    env.pop("BENCHMAKER_VERBOSE", None)
    # as `make example` runs it (no --workflow-profile argument, so profiles/default applies), on two cores
    r = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(support.ROOT / "Snakefile"), "-d", str(tmp_path),
                        "--cores", "2"], capture_output=True, text=True, env=env, timeout=900)
    out = r.stdout + r.stderr
    assert "Using workflow specific profile" in out
    block = assert_quiet_failure(r, "rule vision failed", "HF_HUB_OFFLINE=1", "local-dir:",
                                 log_glob="results/example-bench/logs/vision/*.log", workdir=tmp_path)
    assert "log" in block
    # the fix once: in the final block only, and none of the wrappers around it
    assert out.count(block.strip().splitlines()[0]) == 1, out[-6000:]
    assert [w for w in WRAPPERS if w in out] == [], out[-6000:]
    shown = BAR + "\n" + final_block(out).strip("\n") + "\n" + BAR
    # which vision shard fails first depends on the scheduler (two cores): the README names the first
    assert re.sub(r"/\d{5}\.log", "/00000.log", shown) == _readme_block(), shown

"""In CI a skipped SLURM test fails the run, unless BENCHMAKER_ALLOW_SLURM_SKIP=1 (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import support


@pytest.mark.parametrize("env,rc,expect", [
    ({"CI": "true"}, 1, "SLURM test skipped in CI (Skipped: no SLURM here)"),
    ({"CI": "true", "BENCHMAKER_ALLOW_SLURM_SKIP": "1"}, 0, "2 skipped"),
    ({}, 0, "2 skipped"),
])
def test_slurm_skip_policy(tmp_path, env, rc, expect):
    (tmp_path / "conftest.py").write_text(
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {str(support.ROOT / 'tests')!r})\n"
        "spec = importlib.util.spec_from_file_location("
        f"'bm_conftest', {str(support.ROOT / 'tests' / 'conftest.py')!r})\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "pytest_runtest_makereport = mod.pytest_runtest_makereport\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slurm: x\n")
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\n@pytest.mark.slurm\ndef test_needs_slurm():\n    pytest.skip('no SLURM here')\n\n"
        "def test_other():\n    pytest.skip('not a SLURM test')\n")
    e = {k: v for k, v in os.environ.items() if k not in ("CI", "BENCHMAKER_ALLOW_SLURM_SKIP")}
    e.update(env)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, env=e, timeout=120, check=False)
    out = res.stdout + res.stderr
    assert res.returncode == rc, out
    assert expect in out, out
    if rc:  # only the SLURM test fails; other skips stay skips
        assert "1 failed" in out and "1 skipped" in out, out

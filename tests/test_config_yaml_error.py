"""`snakemake -n` with a YAML syntax error in a config file names the file and the line, once, as
`benchmaker validate-config` does: the file given with --configfile, the Snakefile's own
`configfile:` (config/config.yaml) and a profile's `configfile:` (issue #22, item 7). Run as the
user runs it: the venv's `snakemake` console script, from a checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import support

ROOT = support.ROOT
BAD = "paths:\n  images: x\n  results: [a\nfoo: 1\n"  # the '[' is never closed: line 4, column 4


def checkout(tmp_path: Path) -> Path:
    """A checkout as the user has it (the workflow's files; config/ a real copy that a test may
    break), without touching the repository the tests run from."""
    repo = tmp_path / "checkout"
    repo.mkdir()
    for name in ("Snakefile", "rules", "scripts", "profiles"):
        (repo / name).symlink_to(ROOT / name)
    support.copy_tree(ROOT / "config", repo / "config")
    return repo


def run(argv: list[str], cwd: Path) -> str:
    snakemake = Path(sys.executable).parent / "snakemake"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src"), "PATH": support.no_slurm_path()}
    r = subprocess.run([str(snakemake), *argv], cwd=cwd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    return r.stdout + r.stderr


def assert_names_file_and_line(out: str, name: str) -> None:
    assert out.count(f"{name}:4:4: not valid YAML") == 1, out
    assert "expected ',' or ']'" in out, out
    assert "Traceback" not in out and "snakemake_compat" not in out, out


def test_configfile_option(tmp_path):
    repo = checkout(tmp_path)
    (repo / "bad.yaml").write_text(BAD)
    out = run(["-n", "--configfile", "bad.yaml"], repo)
    assert "workflow specific profile profiles/default" in out
    assert_names_file_and_line(out, "bad.yaml")


def test_the_snakefiles_own_configfile(tmp_path):
    repo = checkout(tmp_path)
    (repo / "config" / "config.yaml").write_text(BAD)
    out = run(["-n"], repo)
    assert_names_file_and_line(out, "config/config.yaml")
    assert "Snakefile" in out  # Snakemake's own pointer to the `configfile:` line stays


def test_a_profiles_configfile(tmp_path):
    repo = checkout(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.yaml").write_text(f"configfile: {bad}\n")
    out = run(["-n", "--profile", str(tmp_path / "mine")], repo)
    assert_names_file_and_line(out, str(bad))

"""The Makefile's set-up: the venv stamp follows the requirements' content, not file times, and set-up
prints one line per step with the elapsed seconds (README, "Quick start")."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

import pytest
from support import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _checkout(path, venv):
    """What make reads of a checkout (its Makefile and pyproject.toml), with `.venv` linked to ``venv``."""
    path.mkdir()
    for f in ("Makefile", "pyproject.toml"):
        shutil.copy2(ROOT / f, path / f)
    (path / ".venv").symlink_to(venv)
    return path


def _make_n(cwd, *targets) -> str:
    r = subprocess.run(["make", "-n", *targets], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_second_checkout_linking_the_venv_installs_nothing(tmp_path):
    venv = tmp_path / "shared-venv"
    (venv / "bin").mkdir(parents=True)
    # a stand-in interpreter that only says what it was asked: the recipe itself runs for real
    (venv / "bin" / "python").write_text('#!/bin/sh\necho "python $*"\n')
    (venv / "bin" / "python").chmod(0o755)
    first = _checkout(tmp_path / "first", venv)
    plan = _make_n(first, "example-offline")
    assert "pip install -e" in plan  # nothing installed yet
    stamp = re.search(r"touch (\S+/\.installed-[0-9a-f]{12})", plan).group(1)
    r = subprocess.run(["make", stamp], cwd=first, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    steps = [x for x in r.stdout.splitlines() if x.startswith("== set-up")]
    assert len(steps) == 7 and all(re.match(r"== set-up \[\d+ s\] ", x) for x in steps), r.stdout
    assert "python -m pip install -e .[test,slurm,k8s,mteb]" in r.stdout  # pip's own output in between
    assert (first / stamp).exists() and _make_n(first, "example-offline").count("pip install") == 0

    # a fresh clone: same requirements, newer files
    second = _checkout(tmp_path / "second", venv)
    later = time.time() + 3600
    os.utime(second / "pyproject.toml", (later, later))
    os.utime(second / "Makefile", (later, later))
    assert "pip install" not in _make_n(second, "example-offline")
    assert "pip install" not in _make_n(second, "test")

    # other requirements: another stamp, so set-up runs
    text = (second / "pyproject.toml").read_text()
    (second / "pyproject.toml").write_text(text.replace('"pytest>=8"', '"pytest>=8.1"', 1))
    assert "pip install -e" in _make_n(second, "example-offline")


def test_the_build_backend_reads_pyproject_without_deprecations():
    """`make example`'s pip step builds the project's metadata: a deprecated form in pyproject.toml
    (``license = {text = ...}``) printed two screen-wide setuptools banners to every new user, one
    saying builds stop working after 2027-02-18."""
    import warnings

    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dist = apply_configuration(Distribution(), str(ROOT / "pyproject.toml"))
    assert dist.metadata.license_expression == "MIT"

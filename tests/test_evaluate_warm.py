"""ranx's numba compilation happens once per user and installation, whatever path leads to it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import support


def _warm(python: str, cache: Path, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(support.ROOT / "src")}
    env.pop("NUMBA_CACHE_DIR", None)
    r = subprocess.run([python, "-m", "benchmaker.evaluate.warm", str(cache)], capture_output=True, text=True,
                       env=env, cwd=cwd, timeout=1500)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def _entries(cache: Path) -> set[str]:
    return {str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_compiled_once_for_a_symlinked_installation(tmp_path):
    """`make` warms the cache through one path to the virtual environment; a second checkout whose
    .venv is a symlink to it (another path to the same installation) loads that cache: no new
    compiled file appears (numba keys its cache by the source folder's path as imported)."""
    cache = tmp_path / "numba"
    real = Path(sys.prefix).resolve()
    link = tmp_path / "other-checkout" / ".venv"
    link.parent.mkdir()
    link.symlink_to(real, target_is_directory=True)
    _warm(str(real / "bin" / "python"), cache, tmp_path)
    first = _entries(cache)
    assert any(e.endswith(".nbi") for e in first)
    _warm(str(link / "bin" / "python"), cache, link.parent)
    assert _entries(cache) == first

"""numba's cache of the planner's search is keyed by content: a copy of the package at another path
(a Kubernetes pod's shipped src/) loads what another copy compiled (benchmaker.jit_cache)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmaker.jit_cache import cache_folder

PKG = Path(__file__).resolve().parents[1] / "src" / "benchmaker"


def test_cache_folder_follows_the_content_not_the_path(tmp_path):
    mine = cache_folder(PKG / "plan" / "compiled.py", tmp_path)
    assert mine is not None and mine.parent == tmp_path
    assert mine.name.startswith("benchmaker-plan-compiled-")
    copy = tmp_path / "elsewhere" / "src" / "benchmaker" / "plan" / "compiled.py"
    copy.parent.mkdir(parents=True)
    shutil.copy(PKG / "plan" / "compiled.py", copy)
    assert cache_folder(copy, tmp_path) == mine                # same content, other path: same folder
    with open(copy, "a") as fh:
        fh.write("\n# edited\n")
    assert cache_folder(copy, tmp_path) not in (None, mine)    # edited: a folder of its own
    other = tmp_path / "site-packages" / "ranx" / "metrics.py"
    other.parent.mkdir(parents=True)
    other.write_text("x = 1\n")
    assert cache_folder(other, tmp_path) is None               # not this package: numba's own locators


CHECK = r"""
import json, sys
import benchmaker
from benchmaker.plan.warm import warm
warm()
from numba.core.dispatcher import Dispatcher
from benchmaker.plan import compiled
hits, misses = {}, {}
for name, fn in vars(compiled).items():
    if isinstance(fn, Dispatcher) and fn.signatures:
        hits[name] = sum(fn.stats.cache_hits.values())
        misses[name] = sum(fn.stats.cache_misses.values())
print(json.dumps({"package": benchmaker.__file__, "hits": hits, "misses": misses}))
"""


def _warm_in(copy: Path, cache: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(copy), "NUMBA_CACHE_DIR": str(cache)}
    env.pop("NUMBA_CACHE_LOCATOR_CLASSES", None)
    r = subprocess.run([sys.executable, "-c", CHECK], env=env, cwd=copy, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(out["package"]).resolve().is_relative_to(copy.resolve()), out["package"]
    return out


@pytest.mark.slow
def test_a_copy_at_another_path_loads_what_the_first_compiled(tmp_path):
    """The image compiles at build time; a pod imports the same files from elsewhere: no compiling."""
    cache = tmp_path / "numba"
    copies = []
    for where in ("image/site-packages", "pod/workdir/src"):
        dest = tmp_path / where
        shutil.copytree(PKG, dest / "benchmaker", ignore=shutil.ignore_patterns("__pycache__"))
        copies.append(dest)
    first = _warm_in(copies[0], cache)
    assert first["hits"] and sum(first["misses"].values()) > 0        # compiled here, into the cache
    second = _warm_in(copies[1], cache)
    assert sum(second["misses"].values()) == 0, second["misses"]      # loaded, nothing compiled again
    # every function the search called came from the first copy's entries (a callee that only the
    # first copy's compiling needed, as a separate signature, is not asked for again)
    assert second["hits"] and set(second["hits"]) <= set(first["hits"]) and all(second["hits"].values())
    assert [p.name for p in cache.iterdir()] == [cache_folder(copies[1] / "benchmaker" / "plan" / "compiled.py",
                                                              cache).name]

"""ranx's numba compilation happens once per user and installation, whatever path leads to it.

numba files a cached function under a folder named from the path of its source file as imported
(``numba.core.caching._CacheLocator.get_suitable_cache_subpath``); the source's content is checked
separately. So the check is: through the real virtual environment and through a symlink to it (a
second checkout whose .venv links to the first), ranx's functions map to the same cache folder.
(Compiling twice to show it takes 2 x 1-25 minutes on a loaded 2-core machine.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import support

PROBE = ("import sys, inspect\n"
         "from benchmaker.evaluate.runs import set_numba_cache\n"
         "set_numba_cache(sys.argv[1])\n"
         "import ranx.metrics.ndcg\n"
         "m = sys.modules['ranx.metrics.ndcg']\n"
         "from numba.core.caching import _CacheLocator as L\n"
         "fn = next(v for v in vars(m).values() if hasattr(v, 'py_func'))\n"
         "print(L.get_suitable_cache_subpath(inspect.getfile(fn.py_func)))\n")


def _cache_folder(python: Path, cache: Path, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(support.ROOT / "src")}
    env.pop("NUMBA_CACHE_DIR", None)
    r = subprocess.run([str(python), "-c", PROBE, str(cache)], capture_output=True, text=True, env=env, cwd=cwd,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


def test_one_cache_folder_for_every_path_to_the_installation(tmp_path):
    real = Path(sys.prefix).resolve()
    link = tmp_path / "other-checkout" / ".venv"
    link.parent.mkdir()
    link.symlink_to(real, target_is_directory=True)
    a = _cache_folder(real / "bin" / "python", tmp_path / "numba", tmp_path)
    b = _cache_folder(link / "bin" / "python", tmp_path / "numba", link.parent)
    assert a.startswith("metrics_") and a == b


TYPED = ("import sys\n"
         "from benchmaker.evaluate.runs import set_numba_cache\n"
         "set_numba_cache(sys.argv[1])\n"
         "assert 'numba' not in sys.modules  # a stage that never imports ranx never imports numba\n"
         "import ranx  # noqa: F401\n"
         "from numba import types\n"
         "from numba.typed import Dict, typeddict\n"
         "d = Dict.empty(types.unicode_type, types.int64)\n"
         "d['q1'] = 1\n"
         "assert 'q1' in d and len(d) == 1\n"
         "print(len(typeddict._contains.stats.cache_hits), len(typeddict._length.stats.cache_hits))\n")


def test_typed_containers_stay_uncached(tmp_path):
    """numba's helpers behind a typed Dict's ``in``, ``len``, ``[]`` (ranx's Qrels and Runs) stay out
    of the shared cache, as numba leaves them: filed there, the helpers that a hybrid system's job
    compiled (ranx.fuse) made the evaluate job that loaded them score every pool as unjudged
    (docs/evaluate.md; the shipped controller Job test compares a cluster run with a local run)."""
    env = {**os.environ, "PYTHONPATH": str(support.ROOT / "src")}
    env.pop("NUMBA_CACHE_DIR", None)
    hits = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", TYPED, str(tmp_path / "numba")], capture_output=True, text=True,
                           env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        hits.append(r.stdout.split())
    assert not list((tmp_path / "numba").glob("typed_*"))
    assert hits == [["0", "0"], ["0", "0"]]

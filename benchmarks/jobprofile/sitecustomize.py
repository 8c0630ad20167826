"""cProfile every Python process started with this folder first on PYTHONPATH (benchmarks/example_wall.py
--profile DIR): the profile goes to ``$BENCHMAKER_PROFILE_DIR/<pid>-<script or module>.prof`` at exit."""

import atexit
import cProfile
import os
import sys

_DIR = os.environ.get("BENCHMAKER_PROFILE_DIR")
if _DIR:
    _PROF = cProfile.Profile()

    def _dump() -> None:
        _PROF.disable()
        name = os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "python") or "python"
        _PROF.dump_stats(os.path.join(_DIR, f"{os.getpid()}-{name.replace('.py', '')}.prof"))

    atexit.register(_dump)
    _PROF.enable()

"""Stage versions: a digest of each stage's own code, put into the rule's params.

Changing a stage's library code changes its digest, so Snakemake reruns that stage (and what follows)
and nothing else. ``STAGE_MODULES`` lists, per stage, the modules whose code defines its output.
Reading files only: importing this never imports torch or the stage modules.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

__all__ = ["stage_version", "STAGE_MODULES"]

_PKG = Path(__file__).resolve().parent

# paths relative to src/benchmaker; a directory means every .py file under it
STAGE_MODULES: dict[str, tuple[str, ...]] = {
    "preprocess": ("preprocess", "formats.py"),
    "vision": ("vision", "providers", "formats.py", "similarity/model.py", "similarity/embed.py",
               "similarity/cache.py"),
    "merge": ("formats.py", "losses.py"),
    "plan": ("plan", "formats.py"),
    "judge": ("judge", "providers", "formats.py"),
    "embed": ("similarity/model.py", "similarity/embed.py", "similarity/cache.py"),
    "score": ("similarity/score.py", "similarity/embed.py", "formats.py"),
    "summary": ("summary", "formats.py", "losses.py", "evaluate/report.py"),
    "export": ("export", "summary", "formats.py", "losses.py", "evaluate/report.py", "ids.py"),
    "evaluate_system": ("evaluate/systems.py", "evaluate/runs.py", "evaluate/data.py", "providers", "formats.py",
                        "ids.py", "similarity/model.py", "similarity/embed.py", "similarity/cache.py"),
    "evaluate": ("evaluate/metrics.py", "evaluate/runs.py", "evaluate/data.py", "formats.py", "ids.py"),
}


@lru_cache(maxsize=None)
def stage_version(stage: str) -> str:
    if stage not in STAGE_MODULES:
        raise KeyError(f"unknown stage {stage!r}")
    h = hashlib.sha256()
    for rel in STAGE_MODULES[stage]:
        p = _PKG / rel
        files = sorted(p.rglob("*.py")) if p.is_dir() else ([p] if p.exists() else [])
        for f in files:
            h.update(str(f.relative_to(_PKG)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:12]

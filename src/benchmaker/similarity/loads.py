"""Counted CLIP model loads: every stage loads its model through :func:`load_counted`, which logs one
line per real load (``model load 1 in this job: ...``) and one per reuse of an already loaded model,
so a run's logs show how often start-up was paid (``benchmarks/example_wall.py`` counts these lines).
torch is imported only when a model is actually loaded.
"""

from __future__ import annotations

import time

from ..logs import get_logger
from ..settings_schema import default

__all__ = ["LOAD_LINE", "load_counted", "loads_in_process"]

log = get_logger("similarity.loads")
LOAD_LINE = "model load"
_seen: set[int] = set()


def loads_in_process() -> int:
    return len(_seen)


def load_counted(model: str, pretrained: str | None, *, device: str | None = default("similarity.device"),
                 precision: str | None = default("similarity.precision"), purpose: str):
    """``similarity.model.load_clip`` (memoised per process) with a log line per real load."""
    t0 = time.perf_counter()
    from .model import load_clip

    clip = load_clip(model, pretrained, device=device, precision=precision)
    dt = time.perf_counter() - t0
    if id(clip) in _seen:
        log.info("model reused (no load) for %s: %s", purpose, clip.model_id)
    else:
        _seen.add(id(clip))
        log.info("%s %d in this job: %s on %s for %s, %.1f s including imports", LOAD_LINE, len(_seen),
                 clip.model_id, clip.device, purpose, dt)
    return clip

"""The recorded estimate (``<results>/estimate/estimate.json``, docs/formats.md ``estimate``): what
``benchmaker estimate --record`` writes (benchmaker/estimate/) and the summary reads beside the bill,
validated here when read."""

from __future__ import annotations

from pathlib import Path

__all__ = ["RECORD_KEYS", "read_estimate"]

# every stage's entry: key -> type
RECORD_KEYS = {"model": str, "mode": str, "requests": int, "pilot_requests": int, "usd": float, "low_usd": float,
               "high_usd": float, "pilot_usd": float, "calibrated_on": int, "output_from": str, "assumes": list,
               "source": str}


def read_estimate(path: str | Path) -> dict:
    """A recorded estimate (docs/formats.md ``estimate``), validated: ``{"version": 1, "stages": {stage:
    {model, mode, requests, pilot_requests, usd, low_usd, high_usd, pilot_usd, calibrated_on, output_from,
    assumes, source}}}``; a file that is not one raises FormatError naming what to do."""
    import json

    from .formats import FormatError

    fix = "write it again with `benchmaker estimate CONFIG --record` (or delete it)"
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FormatError(f"{path}: not a recorded estimate ({exc}); {fix}") from None
    if not isinstance(obj, dict) or obj.get("version") != 1 or not isinstance(obj.get("stages"), dict):
        raise FormatError(f"{path}: not a recorded estimate of version 1 (keys version, stages); {fix}")
    for stage, e in obj["stages"].items():
        for k, t in RECORD_KEYS.items():
            v = e.get(k) if isinstance(e, dict) else None
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) if t is float else isinstance(v, t)
            if not ok:
                raise FormatError(f"{path}: stage {stage!r}: {k} must be {t.__name__}, got {v!r}; {fix}")
    return obj

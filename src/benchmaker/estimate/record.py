"""The recorded estimate (``benchmaker estimate --record``, docs/formats.md ``estimate``) and the
pilot's cost rows."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..stages import ESTIMATE_FILE, PILOT_COSTS_FILE


# -- the recorded estimate (docs/formats.md ``estimate``) ----------------------------------------------
def _record_entry(ln: Mapping[str, Any]) -> dict:
    pilot = ln.get("pilot") or {}
    return {"model": ln["model"], "mode": ln["mode"], "requests": ln["requests"] + int(pilot.get("requests", 0)),
            "pilot_requests": int(pilot.get("requests", 0)), "usd": ln.get("total_usd", ln["usd"]),
            "low_usd": ln.get("total_low_usd", ln["low_usd"]), "high_usd": ln.get("total_high_usd", ln["high_usd"]),
            "pilot_usd": float(pilot.get("usd", 0.0)), "calibrated_on": ln["calibrated_on"],
            "output_from": ln["output_from"], "assumes": list(ln["assumes"]), "source": ln["source"]}


def record(cfg: Mapping[str, Any], lines: list[dict]) -> Path:
    """Write the estimate to ``<results>/estimate/estimate.json`` (what the summary shows beside the
    bill): per stage, what it still had to send plus what its pilot paid. A stage with nothing left to
    send and no pilot now keeps the figure recorded before (the estimate made while it had requests to
    price: after vision has run, ``--pilot`` for the judge keeps vision's estimate)."""
    import json

    from ..config import results_dir
    from ..estimate_file import read_estimate
    from ..io import atomic_write_text

    p = Path(results_dir(cfg)) / ESTIMATE_FILE
    stages = read_estimate(p)["stages"] if p.exists() else {}
    for ln in lines:
        entry = _record_entry(ln)
        if entry["requests"] or ln["stage"] not in stages:
            stages[ln["stage"]] = entry
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(p, json.dumps({"version": 1, "stages": stages}, indent=1, sort_keys=True) + "\n")
    return p


def append_pilot_costs(cfg: Mapping[str, Any], rows: list[dict]) -> None:
    """Append a pilot's cost rows (kind ``costs``) to ``<results>/estimate/pilot_costs.jsonl``."""
    from ..config import results_dir
    from ..io import dumps

    p = Path(results_dir(cfg)) / PILOT_COSTS_FILE
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a", encoding="utf-8") as fh:
        fh.writelines(dumps(r) + "\n" for r in rows)
        fh.flush()

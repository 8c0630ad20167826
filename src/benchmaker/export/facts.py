"""The run facts (``run_facts.json``): what differs between two builds of the same benchmark (when,
how long, on what kind of machine, the evaluations' timings); the only published file that may differ
(docs/export.md)."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any

__all__ = ["RUN_FACTS", "run_facts", "created_utc"]

# the one published file that differs between two builds of the same benchmark (docs/export.md)
RUN_FACTS = "run_facts.json"


def created_utc() -> str:
    """The export's creation time (UTC, ISO 8601), a run fact: it lives only in run_facts.json
    (``created_utc``). ``SOURCE_DATE_EPOCH`` (seconds since 1970, reproducible-builds.org) fixes it."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if epoch:
        try:
            when = datetime.fromtimestamp(int(epoch), timezone.utc)
        except (ValueError, OverflowError, OSError):
            raise ValueError(f"SOURCE_DATE_EPOCH={epoch!r} is not a whole number of seconds since 1970") from None
    else:
        when = datetime.now(timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def run_facts(*, seconds: float, evaluation: str | None = None, deepen: str | None = None) -> dict[str, Any]:
    """What differs between two builds of the same benchmark: when, how long, on what kind of machine
    (no host or user name). Written as run_facts.json, linked from the card."""
    import platform

    facts: dict[str, Any] = {
        "created_utc": created_utc(), "export_seconds": round(seconds, 3),
        "machine": {"system": platform.system(), "release": platform.release(), "machine": platform.machine(),
                    "processor": platform.processor(), "cpu_count": os.cpu_count(),
                    "python": platform.python_version()},
    }
    if evaluation:
        from ..evaluate.report import run_facts as evaluate_facts

        facts["evaluate"] = evaluate_facts(evaluation)
    if deepen:  # the evaluation on the deepened qrels (deepen/evaluate/, docs/deepen.md)
        from ..deepen.report import run_facts as deepen_facts

        facts["deepen_evaluate"] = deepen_facts(deepen)
    return facts

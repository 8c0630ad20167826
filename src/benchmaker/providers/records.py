"""What every API stage writes beside its output: the cost file, the crash-safe ledger of paid
requests (providers/ledger.py) and the metadata a batch is submitted with. Used by the vision and
judge stages (and any new paid stage) alike, so that no stage imports another stage for them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the engine only for its type: writing a cost file needs none of it
    from .engine import Runner

__all__ = ["write_costs", "attach_ledger", "batch_metadata"]


def write_costs(rows: list[dict], path: str | None, ledger: Any = None) -> None:
    """The cost file: the ledger's paid rows to date (when the runner had one) plus ``rows``."""
    if not path:
        return
    from .ledger import write_cost_file

    write_cost_file(path, ledger, rows)


def attach_ledger(runner: Runner, path: str | None) -> None:
    """Every paid row of ``runner`` goes to the crash-safe ledger at ``path`` as it arrives."""
    if path and runner.ledger is None:
        from .ledger import CostLedger

        runner.ledger = CostLedger(path)


def batch_metadata(benchmark: str, stage: str, shard: str) -> dict[str, str]:
    """The metadata every submitted batch carries (which benchmark, stage and shard it belongs to)."""
    return {"benchmaker": benchmark, "bm_stage": stage, "bm_shard": shard}

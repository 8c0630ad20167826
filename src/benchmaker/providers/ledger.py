"""The cost ledger: every paid API request on record the moment its answer arrives.

One append-only JSONL file per job (``<results>/.ledger/<stage>/<shard>.jsonl``), outside the rule's
outputs (Snakemake deletes those of a failed job). Each row is a cost row
(:func:`~benchmaker.providers.cost.cost_row`) plus ``rid`` (what was paid for: ``sync/<uuid>`` for a
synchronous request, ``<batch id>/<custom id>`` for a batch row) and ``run`` (the run that received
it: UTC time, process id, random suffix). A row is written and flushed to the operating system before its answer
is used, so a ``kill -9`` loses nothing; the file is fsynced at least every ``sync_seconds`` and on
close. A torn last line (the process died mid-write) is cut off when the ledger is opened again.
Batch rows are re-derived from the downloaded result files on every collect; a ``done`` marker per
batch keeps them from being appended twice, and reading keeps the first row per ``rid``.

The rule's cost file is written from the ledger (:func:`write_cost_file`): every paid row to date,
across reruns, plus the rows this run answered from the response cache (``cached``, cost 0); the
column ``last_run`` marks the rows of this run. So the cost files equal the provider's bill however
often a run was interrupted, and the summary reports both the spend to date and the last run's.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..io import ensure_parent
from ..logs import get_logger
from .fastjson import dumps as fast_dumps
from .fastjson import loads

__all__ = ["CostLedger", "run_id", "write_cost_file"]

log = get_logger("providers.ledger")

def run_id() -> str:
    """A new run id: UTC time, process id and a random suffix."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _repair(path: Path) -> None:
    """Cut a torn last line (a writer killed mid-line) so that appends start on a fresh line."""
    size = path.stat().st_size
    if not size:
        return
    with open(path, "rb+") as fh:
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        # scan back for the last newline
        pos = size
        step = 65536
        while pos > 0:
            start = max(0, pos - step)
            fh.seek(start)
            chunk = fh.read(pos - start)
            i = chunk.rfind(b"\n")
            if i >= 0:
                fh.truncate(start + i + 1)
                log.warning("cost ledger %s: cut a torn last line (%d bytes)", path, size - start - i - 1)
                return
            pos = start
        fh.truncate(0)


class CostLedger:
    def __init__(self, path: str | os.PathLike, *, sync_seconds: float = 1.0):
        self.path = Path(path)
        self.sync_seconds = sync_seconds
        self._fh = None
        self._last_sync = 0.0
        self._done: set[str] | None = None
        self._rids: set[str] | None = None
        self.appended = 0
        self.run = run_id()                  # one job execution = one run

    # -- writing ---------------------------------------------------------------------------------
    def _open(self):
        if self._fh is None:
            ensure_parent(self.path)
            if self.path.exists():
                _repair(self.path)
            self._fh = open(self.path, "ab")  # noqa: SIM115 - held open for appends, closed by close()
        return self._fh

    def append(self, row: dict, rid: str | None = None, *, sync: bool = False) -> None:
        """Record one paid request (flushed at once; fsynced within ``sync_seconds``)."""
        fh = self._open()
        rec = {**row, "rid": rid or f"sync/{uuid.uuid4().hex}", "run": self.run}
        fh.write(fast_dumps(rec).encode("utf-8") + b"\n")
        fh.flush()
        self.appended += 1
        if self._rids is not None:
            self._rids.add(rec["rid"])
        now = time.monotonic()
        if sync or now - self._last_sync > self.sync_seconds:
            os.fsync(fh.fileno())
            self._last_sync = now

    def mark_done(self, batch_id: str) -> None:
        """Every paid row of ``batch_id`` is on record: later collects do not append them again."""
        fh = self._open()
        fh.write(fast_dumps({"done": batch_id, "run": self.run}).encode("utf-8") + b"\n")
        fh.flush()
        os.fsync(fh.fileno())
        if self._done is not None:
            self._done.add(batch_id)

    def is_done(self, batch_id: str) -> bool:
        if self._done is None:
            self._done = {r["done"] for r in self._records() if "done" in r}
        return batch_id in self._done

    def has(self, rid: str) -> bool:
        """Whether a row with this ``rid`` is on record (rows with a fixed rid: written at most once)."""
        if self._rids is None:
            self._rids = {r["rid"] for r in self._records() if "rid" in r}
        return rid in self._rids

    def close(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- reading ---------------------------------------------------------------------------------
    def _records(self) -> Iterator[dict]:
        if not self.path.exists():
            return
        with open(self.path, "rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    break                                  # a torn last line
                try:
                    rec = loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    yield rec

    def rows(self) -> Iterator[dict]:
        """Every paid row on record, once per ``rid`` (the first)."""
        seen: set[str] = set()
        for r in self._records():
            rid = r.get("rid")
            if rid is None or rid in seen:
                continue
            seen.add(rid)
            yield r


_COST_COLS = ("stage", "item_id", "model", "mode", "input_tokens", "cached_input_tokens", "output_tokens",
              "reasoning_tokens", "cost_usd", "attempt", "cached")
# written only when set: why a provider billed a request that returned no answer (``expired_unreturned``)
_OPTIONAL_COLS = ("reason",)


def write_cost_file(path: str, ledger: CostLedger | None, run_rows: Iterable[dict]) -> int:
    """The rule's cost file: every paid row of the ledger (``last_run`` true for this run's) and this
    run's ``run_rows`` (rows not in the ledger: answers from the response cache, or every row when
    there is no ledger). Streamed row by row (flat memory); returns the number of rows."""
    from ..io import atomic_path

    n = 0
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        for r, last in _chain(ledger, run_rows):
            row = {k: r.get(k) for k in _COST_COLS}
            row["cached"] = bool(row["cached"])
            row["attempt"] = int(row["attempt"] or 0)
            row["last_run"] = last
            for k in _OPTIONAL_COLS:
                if r.get(k) is not None:
                    row[k] = r[k]
            fh.write(fast_dumps(row).encode("utf-8") + b"\n")
            n += 1
    return n


def _chain(ledger: CostLedger | None, run_rows: Iterable[dict]) -> Iterator[tuple[dict, bool]]:
    if ledger is not None:
        for r in ledger.rows():
            yield r, r.get("run") == ledger.run
    for r in run_rows:
        yield r, True

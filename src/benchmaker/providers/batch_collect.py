"""The Batch API lifecycle's last step, **collect** (:mod:`benchmaker.providers.batch`): polls until
every batch is terminal, reads every answer, sends the failures again as new retry batches round
after round up to ``max_attempts``, waits for (or takes over) requests other shards answer, and
prices the paid rows a provider did not return."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from ..logs import get_logger
from ..losses import Losses
from ..settings_schema import LLM, default
from .batch_answers import _Collect
from .batch_build import _claims, _request_line
from .batch_submit import _submit_lines
from .batch_wait import BatchPending, _collect_lock, _say_shared_wait, _take_over, _wait
from .cost import cost_row
from .engine import Item, Runner
from .journal import Journal
from .parse import RETRYABLE

__all__ = ["collect_results"]

log = get_logger("providers.batch")


def collect_results(runner: Runner, items: Sequence[Item] | Callable[[], Iterable[Item]], *, manifest: str,
                    submitted: str, state_dir: str, losses: Losses, metadata: Mapping[str, str],
                    wait: bool = default(f"{LLM}.wait"),
                    poll_seconds: float = default(f"{LLM}.poll_seconds"),
                    on_answer: Callable[[int, dict], None] | None = None,
                    ids: Sequence[str] | None = None) -> dict[str, dict]:
    """Wait, download, parse, retry failures as new batches; returns item_id -> answer.

    ``items`` is a sequence, or a function that returns a fresh iterable of the same items each time
    it is called (they are then streamed, and made again only for retries). With
    ``on_answer(index, answer)`` answers are handed over as they are validated and not kept (flat
    memory for large shards); the returned dict is then empty. ``ids``: the items' ids in order, as
    a column the caller holds anyway (a polars Series of the shard's table): collect then keeps no
    Python object per item, only a 32-byte key and two flag bytes (memory flat in the number of
    requests beyond the shard's own table).

    A wait on requests another shard claimed says after a minute what it waits for, for whom and
    until when, and takes that shard's work over when its collect is not running (:func:`_take_over`)."""
    make_items: Callable[[], Iterable[Item]] = items if callable(items) else (lambda: iter(items))
    stage, sd = runner.stage, Path(state_dir)
    # while this collect runs its shard's claims are its own: no other collect takes its work over
    running = _collect_lock(Path(manifest).resolve().parent, wait=True)
    st = _Collect(runner, ids, on_answer)
    try:
        st.read_manifest(manifest, make_items, losses)
        claims = _claims(runner, manifest)
        sub = json.loads(Path(submitted).read_text())
        round_batches = [b["batch_id"] for b in sub["batches"]]
        round_chunks = {b["batch_id"]: str(sd / "chunks" / f"{b['digest']}.jsonl") for b in sub["batches"]}
        journal = Journal(sd / "journal.jsonl")
        backend = runner.batch_backend()
        rnd = 1
        waited: tuple[float, float] | None = None        # (since, last said) of a wait on other shards
        stack = contextlib.ExitStack()
        stack.enter_context(runner.cache.bulk())            # answers appended to this process's pack segment
        try:
            while True:
                known = {bid: t for bid in round_batches if (t := journal.terminal(bid)) is not None}
                info = _wait(backend, round_batches, wait=wait, poll_seconds=poll_seconds, stage=stage,
                             known=known)
                for bid in round_batches:
                    b = info[bid]
                    if bid in known:                    # fetched by an earlier collect: re-read, ask nothing
                        files = [Path(f) for f in b.raw["files"]]
                    else:
                        files = backend.fetch(b, sd)
                        journal.write({"event": "terminal", "batch_id": bid, "status": b.status, "error": b.error,
                                       "total": b.total, "processed": b.processed,
                                       "files": [str(f) for f in files]})
                    st.read_batch(backend, b, files, round_chunks[bid])
                runner.cache.flush()                    # publish this round's answers before any wait
                _record_unreturned(runner, st.unreturned, st.paid_usage)
                retry = sorted(i for i in st.failed
                               if st.last[i].reason in RETRYABLE and st.attempts[i] < runner.max_attempts)
                st.answer_shared(claims, retry)
                retry.sort()
                if not retry:
                    if not st.shared:
                        break
                    if not wait:
                        raise BatchPending(f"{stage}: {len(st.shared)} request(s) are being answered for another "
                                           "shard (the same bytes; providers/claims.py); wait is false: run the "
                                           "workflow again later to collect")
                    round_batches, round_chunks = [], {}
                    if _take_over(runner, st.shared, claims, manifest=manifest, submitted=submitted, state_dir=sd,
                                  item_of=st.item_of):
                        continue                         # answered from the other shard's batches
                    waited = _say_shared_wait(stage, st.shared, claims, waited)
                    time.sleep(poll_seconds)
                    continue
                rnd += 1
                log.info("%s: round %d: retrying %d failed request(s) as a new batch", stage, rnd, len(retry))
                want = set(retry)
                lines = (_request_line(runner, stage, i, st.attempts[i] + 1, it)
                         for i, it in enumerate(make_items()) if i in want)
                batches = _submit_lines(runner, lines, sd, journal, rnd=rnd, metadata=metadata)
                round_batches = [b["batch_id"] for b in batches]
                round_chunks = {b["batch_id"]: b["path"] for b in batches}
        finally:
            journal.close()
            stack.close()                               # the segment is published before we go on
        st.finish(claims, losses)
    finally:
        running.close()
    return st.results


def _record_unreturned(runner: Runner, unreturned: dict[str, tuple[int, str]], paid_usage: Sequence) -> None:
    """Cost rows for requests a provider processed (and bills) without returning them: one per request,
    ``item_id`` "(not returned)", ``reason`` ``<status>_unreturned``, at the mean usage of the paid rows
    read so far (the provider says how many, not which). Their ``rid`` (``<batch>/unreturned-<k>``) is
    fixed, so a rerun after an interruption does not count them twice (the ledger keeps the first)."""
    from .cost import Usage

    if not unreturned or not paid_usage:
        return                                       # priced once some answer tells the usage
    n = len(paid_usage)
    tot = Usage()
    for u in paid_usage:
        tot = tot + u
    mean = Usage(round(tot.input_tokens / n), round(tot.cached_input_tokens / n), round(tot.output_tokens / n),
                 round(tot.reasoning_tokens / n))
    for bid, (k, status) in sorted(unreturned.items()):
        for j in range(k):
            row = cost_row(stage=runner.stage, item_id="(not returned)", model=runner.llm.model, mode="batch",
                           usage=mean, price=runner.price, batch_discount=runner.batch_discount, attempt=0)
            row["reason"] = f"{status}_unreturned"
            rid = f"{bid}/unreturned-{j}"
            if runner.ledger is not None and runner.ledger.has(rid):
                continue
            runner._cost(row, rid)
    unreturned.clear()

"""Waiting in the Batch API lifecycle's **collect** step (:mod:`benchmaker.providers.batch`): for the
provider's batches to end (or :class:`BatchPending` when not waiting), and for the requests another
shard claimed: its collect lock, taking over the answers of a shard that stopped, saying what a long
wait waits for."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..logs import get_logger
from .backend import TERMINAL, BatchBackend, BatchInfo
from .batch_build import parse_custom_id
from .engine import Item, Runner
from .fastjson import loads

__all__ = ["BatchPending", "WAIT_SAY_SECONDS", "COLLECT_LOCK"]

log = get_logger("providers.batch")


class BatchPending(RuntimeError):
    """Batches are still running and ``wait`` is false: run the workflow again later to collect."""


def _wait(backend: BatchBackend, batch_ids: Sequence[str], *, wait: bool, poll_seconds: float,
          stage: str, known: Mapping[str, BatchInfo] | None = None) -> dict[str, BatchInfo]:
    """Poll until every batch is terminal; ``known``: batches the journal already has as terminal
    (fetched by an earlier collect: not asked again)."""
    from ..logs import progress

    info: dict[str, BatchInfo] = dict(known or {})
    last_log = 0.0
    bar = None
    while True:
        for bid in batch_ids:
            if bid in info and info[bid].status in TERMINAL:
                continue
            info[bid] = backend.poll(bid)
        open_ = [b for b in batch_ids if info[b].status not in TERMINAL]
        total = sum(info[b].total for b in batch_ids)
        done = sum(info[b].done for b in batch_ids)
        if bar is None and total:
            bar = progress(total=total, desc=f"{stage} batches", unit="req")
        if bar is not None:
            bar.n = min(done, bar.total or done)
            bar.refresh()
        if not open_:
            if bar is not None:
                bar.close()
            return info
        if not wait:
            states = ", ".join(f"{b}: {info[b].raw.get('status', info[b].status)}" for b in open_[:10])
            raise BatchPending(f"{stage}: {len(open_)} batch(es) still running ({states}); "
                               "wait is false: run the workflow again later to collect")
        if time.monotonic() - last_log > WAIT_SAY_SECONDS:   # at once, then every minute: what, until when
            ends = [e for b in open_ if isinstance(e := info[b].raw.get("expires_at"), (int, float))]
            log.info("%s: waiting for %d batch(es) at %s: %s; %s", stage, len(open_), backend.name,
                     ", ".join(f"{b}={info[b].raw.get('status', info[b].status)}" for b in open_[:5]),
                     "they end by " + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(max(ends))) if ends
                     else "they end by the provider's completion window (24 h from submission)")
            last_log = time.monotonic()
        time.sleep(poll_seconds)


WAIT_SAY_SECONDS = 60.0   # a wait longer than this says what it waits for, for whom, until when
COLLECT_LOCK = ".collect.lock"   # in a shard's request folder: held (flock) while its collect runs


def _collect_lock(folder: Path, *, wait: bool):
    """The lock a shard's collect holds while it runs (an open file with an exclusive ``flock``; the
    kernel drops it when the process dies, kill -9 included). ``wait=False``: None when another
    process holds it (that shard's collect is running)."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    fh = open(folder / COLLECT_LOCK, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        fh.close()
        return None
    return fh


def _take_over(runner: Runner, shared: Mapping[int, str], claims, *, manifest: str, submitted: str,
               state_dir: Path, item_of: Callable[[int], Item]) -> int:
    """Answer waited requests from the batches of the shard that claimed them, when that shard's
    collect is not running (killed, or not started while this one waits: ``--cores 1``): its batches
    are at the provider, paid by it, and downloading their results costs nothing. Each answer found is
    validated and cached under this item's key and the request bytes' (no cost row: the owner records
    what it paid when its own collect runs; this shard's is a cached row, as for any shared answer).
    Returns how many were answered (0: nothing to take over yet: the owner runs, has not submitted,
    its batches are still running, or the answer is not in its first round)."""
    by_owner: dict[str, set[str]] = {}
    for w in set(shared.values()):
        owner = (claims.holder(w) or ("",))[0]
        if owner.startswith("batch:"):
            by_owner.setdefault(owner[len("batch:"):], set()).add(w)
    answered = 0
    for folder, wires in sorted(by_owner.items()):
        other = Path(folder)
        sub = other / Path(submitted).name
        if other == Path(manifest).resolve().parent or not sub.is_file():
            continue
        lock = _collect_lock(other, wait=False)
        if lock is None:                                 # its collect runs: it answers them itself
            continue
        try:
            answered += _answers_of(runner, shared, wires, other / Path(manifest).name, sub, state_dir, item_of)
        finally:
            lock.close()
    return answered


def _answers_of(runner: Runner, shared: Mapping[int, str], wires: set[str], manifest: Path, submitted: Path,
                state_dir: Path, item_of: Callable[[int], Item]) -> int:
    """The answers to ``wires`` in another shard's first-round batches (its ``manifest`` names each
    item's request bytes), cached for the items of this shard waiting on them."""
    index = {}                                           # the other shard's item index -> its wire key
    with open(manifest, "rb") as fh:
        for ln in fh:
            m = loads(ln) if ln.strip() else None
            if m and m.get("wire") in wires:
                index[int(m["i"])] = m["wire"]
    mine: dict[str, list[int]] = {}
    for i, w in shared.items():
        mine.setdefault(w, []).append(i)
    backend = runner.batch_backend()
    batches = [b["batch_id"] for b in json.loads(submitted.read_text())["batches"]]
    infos = {bid: backend.poll(bid) for bid in batches}
    if any(b.status not in TERMINAL for b in infos.values()):
        return 0
    n = 0
    for bid in batches:
        for path in backend.fetch(infos[bid], state_dir / "taken-over"):
            for cid, oc in backend.rows(path):
                w = index.get(parse_custom_id(cid)[0])
                for i in mine.pop(w, []) if w else []:
                    it = item_of(i)
                    it.wire = w
                    n += runner.accept(it, oc) is not None
    if n:
        log.info("%s: %d request(s) another shard claimed answered from its batches (its collect is not "
                 "running; nothing sent or paid here)", runner.stage, n)
    return n


def _say_shared_wait(stage: str, shared: Mapping[int, str], claims, waited: tuple[float, float] | None,
                     *, now: Callable[[], float] = time.monotonic) -> tuple[float, float]:
    """Log, once a wait on requests other shards claimed has lasted WAIT_SAY_SECONDS and then every
    WAIT_SAY_SECONDS, how many requests it waits for, which shard holds them and when their claims
    expire (a claim's holder answers them when its own collect runs; an expired claim is taken over
    and sent here). Returns the new (since, last said)."""
    t = now()
    since, said = waited or (t, t)
    if t - since < WAIT_SAY_SECONDS or t - said < WAIT_SAY_SECONDS:
        return since, said
    by: dict[str, list[float]] = {}
    for w in set(shared.values()):
        owner, until = claims.holder(w) or ("(released; taken over at the next look)", 0.0)
        by.setdefault(owner, []).append(until)
    import datetime as _dt

    def when(ts: float) -> str:
        return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if ts else "now"

    who = "; ".join(f"{len(u)} held by {o} until {when(max(u))}" for o, u in sorted(by.items()))
    log.warning("%s: waiting %.0f s for %d request(s) with the same bytes that another shard's batch answers "
                "(providers/claims.py): %s. They arrive when that shard's collect runs (run the workflow with "
                "more cores than waiting collects); a claim not answered by then is sent from here",
                stage, t - since, len(shared), who)
    return since, t

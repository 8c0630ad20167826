"""The Batch API lifecycle as three idempotent steps: build → submit → collect.

* **build** streams the requests that the cache cannot answer into ``requests.jsonl`` (one Batch API
  line each, ``custom_id = <stage>-<index>-a<attempt>``) and writes ``manifest.jsonl`` (index, item id,
  content key, whether the cache answered it).
* **submit** splits the requests into chunk files (at most ``max_requests_per_batch`` lines and
  ``max_bytes_per_batch`` bytes; content-addressed by sha256, so a rerun produces the same chunks) and
  creates one batch per chunk. Before any API call it appends its *intent* to a journal
  (``<state_dir>/journal.jsonl``, fsynced); after each call it records the file / batch id. On a rerun
  a chunk with a recorded batch is reused; a chunk with an intent but no batch id is first looked up
  on the server by its metadata (``bm_chunk``) and its uploaded file by name, and only then created.
  So interrupting at any moment never submits a request twice. The batch ids go to the rule's output.
* **collect** polls until every batch is terminal (``wait: false``: checks once and stops with
  :class:`BatchPending`; run again later), downloads output and error files into the state dir,
  parses and validates every answer, and sends the failures (failed rows, incomplete answers,
  invalid JSON, schema violations, requests of failed / expired batches) again as new retry batches,
  round after round, up to ``max_attempts``. Terminal statuses: ``completed``; ``failed`` (all its
  requests failed: retried); ``expired`` (the partial output is kept, the rest retried);
  ``cancelled`` (the partial output is kept, the rest is lost with reason ``batch_cancelled``: a
  person cancelled it). Everything downloaded stays in the state dir, so a rerun of collect re-reads
  it instead of paying again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from ..io import atomic_path
from ..logs import get_logger
from ..losses import Losses
from ..settings_schema import LLM, default
from .backend import TERMINAL, BatchBackend, BatchInfo
from .claims import batch_wire_key
from .cost import cost_row
from .engine import Item, Runner, _usage
from .fastjson import dumps as fast_dumps
from .fastjson import loads
from .journal import CID as _CID
from .journal import Journal, split_requests
from .parse import RETRYABLE, Outcome
from .spec import RequestSpec

__all__ = ["BatchPending", "build_requests", "submit_requests", "collect_results", "split_requests",
           "TERMINAL", "Journal", "ordered_map", "run_batch"]

log = get_logger("providers.batch")
T = TypeVar("T")
R = TypeVar("R")


class BatchPending(RuntimeError):
    """Batches are still running and ``wait`` is false: run the workflow again later to collect."""


def ordered_map(fn: Callable[[T], R], it: Iterable[T], threads: int, window: int = 256) -> Iterator[R]:
    """``map`` over a thread pool that keeps order and holds at most ``window`` results in memory."""
    if threads <= 1:
        yield from map(fn, it)
        return
    from collections import deque

    with ThreadPoolExecutor(max_workers=threads) as ex:
        q: deque = deque()
        for x in it:
            q.append(ex.submit(fn, x))
            if len(q) >= window:
                yield q.popleft().result()
        while q:
            yield q.popleft().result()


def custom_id(stage: str, idx: int, attempt: int) -> str:
    return f"{stage}-{idx}-a{attempt}"


def parse_custom_id(cid: str) -> tuple[int, int]:
    _, idx, att = cid.rsplit("-", 2)
    return int(idx), int(att[1:])


def _request_line(runner: Runner, stage: str, idx: int, attempt: int, item: Item) -> str:
    return runner.batch_backend().line(item, custom_id(stage, idx, attempt))


# -- build --------------------------------------------------------------------------------------------
def build_requests(runner: Runner, items: Iterable[Item], *, requests: str, manifest: str, threads: int = 1) -> dict:
    """Stream requests (cache misses only, each distinct content once) and the manifest; returns counts.

    An item whose request content (cache key) equals an earlier item's is not sent again: its
    manifest line names the earlier item (``dup``) and collect hands it the same answer."""
    stage = runner.stage
    n = n_cached = n_bad = n_dup = 0
    first: dict[bytes, int] = {}          # content key (32 bytes) -> index of the item that sends it
    errors: dict[int, str] = {}

    def keyed(it_: Iterable[Item]) -> Iterator[tuple[int, Item, int | None, bool]]:
        for idx, it in enumerate(it_):          # in order, in this thread: decides who sends what
            runner.keyed([it])
            kb = bytes.fromhex(it.key) if len(it.key) == 64 else it.key.encode()
            dup = first.get(kb)
            cached = dup is None and runner.cache.contains(it.key)
            if dup is None and not cached:
                first[kb] = idx
            yield idx, it, dup, cached

    def prep(arg: tuple[int, Item, int | None, bool]) -> tuple[int, Item, bool, str | None, str | None, int | None]:
        idx, it, dup, cached = arg
        if dup is not None or cached:
            return idx, it, cached, None, None, dup
        try:
            return idx, it, False, _request_line(runner, stage, idx, 1, it), None, None
        except Exception as exc:  # unreadable image
            return idx, it, False, None, f"{type(exc).__name__}: {exc}", None

    # threads help only where a request reads and encodes images (PIL releases the GIL); otherwise
    # the work is pure Python and a pool only adds overhead
    threads = threads if runner.llm.image_transport == "base64" else 1
    claims = _claims(runner, manifest)
    n_wire = n_shared = n_same = 0
    wire_first: dict[bytes, int] = {}    # wire key -> the item of this shard that sends those bytes
    with atomic_path(requests) as req_tmp, atomic_path(manifest) as man_tmp, \
            open(req_tmp, "w", encoding="utf-8") as req_fh, open(man_tmp, "w", encoding="utf-8") as man_fh:
        for idx, it, cached, line, err, dup in ordered_map(prep, keyed(items), threads):
            n += 1
            wire = shared = None
            if line is not None:
                # the bytes sent, across shards (providers/claims.py): sent by an earlier item of this
                # shard (a duplicate of it), answered by another shard, being answered by one (not
                # sent: collect waits for it), or claimed here and sent
                w = batch_wire_key(line)
                it.wire = w
                wb = bytes.fromhex(w)
                if wb in wire_first:
                    dup, line = wire_first[wb], None
                    n_same += 1
                elif runner._wire_answer(it) is None and not claims.claim(w):
                    shared, line = w, None
                    n_shared += 1
                elif (got := _wire_record(runner, it, fresh=True)) is not None:   # claimed: look again
                    claims.release(w)
                    runner.cache.put(it.key, got)
                    cached, line = True, None
                    n_wire += 1
                else:
                    wire = w
                    wire_first[wb] = idx
            if line is not None:
                req_fh.write(line)
            n_cached += cached
            if dup is not None:
                n_dup += 1
                err = errors.get(dup)
            if err is not None:
                n_bad += 1
                if dup is None:
                    errors[idx] = err
            rec = {"i": idx, "item_id": it.item_id, "key": it.key, "cached": cached, "error": err}
            if dup is not None:
                rec["dup"] = dup
            if wire is not None:
                rec["wire"] = wire
            if shared is not None:
                rec["shared"] = shared
            man_fh.write(fast_dumps(rec) + "\n")
    n_send = len(first) - len(errors) - n_wire - n_shared - n_same
    log.info("%s build: %d items, %d answered by the cache (%d by the same bytes another job paid for), %d to "
             "send, %d same content as an earlier item (sent once), %d being answered for another shard "
             "(not sent), %d unreadable", stage, n, n_cached, n_wire, n_send, n_dup, n_shared, n_bad)
    return {"items": n, "cached": n_cached, "requests": n_send, "bad": n_bad, "duplicates": n_dup,
            "shared": n_shared}


def _claims(runner: Runner, manifest: str):
    """This shard's claims on request bytes (providers/claims.py): owned by its state folder."""
    from .claims import BATCH_CLAIM_SECONDS, Claims

    return Claims(runner.cache.dir, stale_seconds=BATCH_CLAIM_SECONDS,
                  owner=f"batch:{Path(manifest).resolve().parent}")


def _wire_record(runner: Runner, item: Item, *, fresh: bool = False) -> dict | None:
    """The cache record another job stored for ``item``'s request bytes, when its answer is valid here."""
    if runner._wire_answer(item, fresh=fresh) is None:
        return None
    return runner.wire_record(item.wire)


# -- submit -------------------------------------------------------------------------------------------
def _ensure_batch(backend: BatchBackend, journal: Journal, chunk: dict, *, metadata: Mapping[str, str]) -> dict:
    digest = chunk["digest"]
    st = journal.chunk(digest)
    if st.get("batch_id"):
        return {**chunk, "batch_id": st["batch_id"], "file_id": st.get("file_id"), "reused": True}
    md = {**metadata, "bm_chunk": digest[:40]}
    name = f"bm-{digest[:40]}"
    fname = f"{name}.jsonl"
    file_id = st.get("file_id")
    if "intent" in st.get("events", []):
        # an earlier run stopped between intent and record: look before creating anything
        found = backend.find(name=name, metadata=md)
        if found:
            journal.write({"event": "batch", "digest": digest, "batch_id": found["id"],
                           "file_id": found.get("file_id"), "found_by": "metadata"})
            log.info("resume: found batch %s for chunk %s by its metadata", found["id"], digest[:12])
            return {**chunk, "batch_id": found["id"], "file_id": found.get("file_id"), "reused": True}
        file_id = file_id or backend.find_file(fname)
    else:
        journal.write({"event": "intent", "digest": digest, "n": chunk["n"], "bytes": chunk["bytes"]})
    if not file_id:
        file_id = backend.upload(chunk["path"], fname)
        journal.write({"event": "file", "digest": digest, "file_id": file_id})
    bid = backend.create(file_id, name=name, metadata=md)
    journal.write({"event": "batch", "digest": digest, "batch_id": bid, "file_id": file_id})
    log.info("submitted %s batch %s: %d requests, %.1f MB (chunk %s)", backend.name, bid, chunk["n"],
             chunk["bytes"] / 1e6, digest[:12])
    return {**chunk, "batch_id": bid, "file_id": file_id, "reused": False}


def _submit_lines(runner: Runner, lines: Iterable[str], state_dir: Path, journal: Journal, *, rnd: int,
                  metadata: Mapping[str, str]) -> list[dict]:
    s = runner.settings
    backend = runner.batch_backend()
    chunks = split_requests(lines, state_dir / "chunks",
                            max_requests=min(int(s.get("max_requests_per_batch", backend.max_requests)),
                                             backend.max_requests),
                            max_bytes=min(int(s.get("max_bytes_per_batch", backend.max_bytes)), backend.max_bytes),
                            keep=lambda d: not journal.chunk(d).get("batch_id"))
    if journal.round_digests(rnd) is None:
        journal.write({"event": "round", "round": rnd, "digests": [c["digest"] for c in chunks]})
    md = {k: str(v)[:500] for k, v in metadata.items()} | {"bm_round": str(rnd)}
    out = []
    for c in chunks:
        out.append(_ensure_batch(backend, journal, c, metadata=md))
        # the batch exists and is on record: the chunk's requests live at the provider (and in
        # requests.jsonl); only its custom ids (.ids) stay in the state dir, not a second copy
        Path(c["path"]).unlink(missing_ok=True)
    return out


def submit_requests(runner: Runner, *, requests: str, submitted: str, state_dir: str,
                    metadata: Mapping[str, str]) -> list[dict]:
    """Create (or find again) the batches of ``requests``; writes their ids to ``submitted``."""
    sd = Path(state_dir)
    journal = Journal(sd / "journal.jsonl")
    try:
        with open(requests, encoding="utf-8") as fh:
            batches = _submit_lines(runner, fh, sd, journal, rnd=1, metadata=metadata)
    finally:
        journal.close()
    with atomic_path(submitted) as tmp:
        tmp.write_text(json.dumps({"stage": runner.stage, "state_dir": str(sd), "batches": [
            {k: b[k] for k in ("batch_id", "digest", "n", "bytes", "file_id")} for b in batches]}, indent=1))
    log.info("%s submit: %d batch(es), %d new, %d requests", runner.stage, len(batches),
             sum(not b["reused"] for b in batches), sum(b["n"] for b in batches))
    return batches


# -- collect ------------------------------------------------------------------------------------------
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


def _chunk_ids(path: str) -> Iterator[str]:
    """The custom ids of a request chunk: its ``.ids`` file, else each line's head (the lines are large)."""
    ids = Path(path).with_suffix(".ids")
    if ids.exists():
        with open(ids, "rb") as fh:
            for line in fh:
                if line.strip():
                    yield line.strip().decode("utf-8")
        return
    with open(path, "rb") as fh:
        for line in fh:
            m = _CID.match(line)
            if m:
                yield m.group(1).decode("utf-8")
            elif line.strip():
                yield loads(line)["custom_id"]


class _Slim:
    """What collect keeps per item: its content key (32 bytes) and a reference to its schema and check
    (run-length coded: one run per stage for vision), and its id unless the caller passes ``ids`` (a
    column of the shard's own table, e.g. a polars Series: then no per-item Python object is held).
    Not the request itself: full items are made again only for the requests that are retried."""

    def __init__(self, ids: Sequence[str] | None = None) -> None:
        self.own = ids is None
        self.ids: Sequence[str] = [] if ids is None else ids
        self.keys = bytearray()
        self.starts: list[int] = []          # first index of each run of items sharing a prototype
        self.protos: list[tuple] = []
        self.n = 0

    def add(self, it: Item) -> bool:
        """Add the next item; false when ``ids`` were given and this item's id is not the next one."""
        if self.own:
            self.ids.append(it.item_id)     # type: ignore[attr-defined]
        elif self.n >= len(self.ids) or self.ids[self.n] != it.item_id:
            return False
        self.keys += bytes.fromhex(it.key)
        last = self.protos[-1] if self.protos else None
        if last is None or last[0] is not it.spec.schema or last[1] is not it.check:
            self.starts.append(self.n)
            self.protos.append((it.spec.schema, it.check, it.spec.schema_name))
        self.n += 1
        return True

    def __len__(self) -> int:
        return self.n

    def key(self, i: int) -> str:
        return self.keys[32 * i: 32 * i + 32].hex()

    def item(self, i: int) -> Item:
        import bisect

        schema, check, name = self.protos[bisect.bisect_right(self.starts, i) - 1]
        return Item(self.ids[i], RequestSpec(system="", parts=(), schema=schema, schema_name=name), check,
                    key=self.key(i))


class _Collect:
    """One collect's state per item, flat (a 32-byte key and a few flag bytes per item, no Python
    object): its answers (handed to ``on_answer`` or kept in ``results``), what failed and why, the
    wire key it claimed, the one another shard claimed (``shared``), its duplicates."""

    def __init__(self, runner: Runner, ids: Sequence[str] | None, on_answer: Callable[[int, dict], None] | None):
        self.runner, self.slim, self.on_answer = runner, _Slim(ids), on_answer
        self.results: dict[str, dict] = {}
        self.n_done = 0
        self.dups: dict[int, list[int]] = {}    # index that sends a content -> later items with the same content
        self.last: dict[int, Outcome] = {}
        self.failed: set[int] = set()
        self.unreturned: dict[str, tuple[int, str]] = {}   # batch id -> (processed, not returned; its status)
        self.paid_usage: list = []              # usage of every paid row read (prices unreturned ones)
        self.wires = bytearray()                # per item: the wire key (32 bytes) it claimed, zeros if none
        self.shared: dict[int, str] = {}        # item -> wire key another shard claimed at build time
        self.done = bytearray()                 # per item: 1 once it has its answer
        self.attempts = bytearray()             # per item: the highest attempt sent (< 256)

    def keep(self, i: int, obj: dict) -> None:
        for j in (i, *self.dups.get(i, ())):
            if not self.done[j]:
                self.done[j] = 1
                self.n_done += 1
            if self.on_answer is not None:
                self.on_answer(j, obj)
            else:
                self.results[self.slim.ids[j]] = obj

    def item_of(self, i: int) -> Item:
        it = self.slim.item(i)
        w = self.wires[32 * i: 32 * i + 32]
        if w != _ZERO:
            it.wire = w.hex()
        return it

    def read_manifest(self, manifest: str, make_items: Callable[[], Iterable[Item]], losses: Losses) -> None:
        """The items against the manifest build wrote (the same items, in order, or an error); the
        answers the cache held at build time are taken now."""
        runner, slim = self.runner, self.slim
        changed = RuntimeError(f"{runner.stage}: the inputs changed since the requests were built ({manifest}); "
                               "Snakemake should have rebuilt them: rerun the workflow")
        cached = bytearray()                    # per item: 1 when the cache answered it at build time
        with open(manifest, "rb") as man_fh:
            man_lines = (ln for ln in man_fh if ln.strip())
            for i, it in enumerate(make_items()):
                ln = next(man_lines, None)
                runner.keyed([it])
                m = loads(ln) if ln is not None else None
                if m is None or m["i"] != i or m["key"] != it.key or not slim.add(it):
                    raise changed
                cached.append(0)
                self.wires += bytes.fromhex(m["wire"]) if m.get("wire") else bytes(32)
                if m.get("shared"):
                    self.shared[i] = m["shared"]
                if m.get("error"):
                    losses.add(runner.item_type, it.item_id, "bad_input", m["error"])
                elif m.get("dup") is not None:
                    self.dups.setdefault(int(m["dup"]), []).append(i)
                elif m["cached"]:
                    cached[i] = 1
            if next(man_lines, None) is not None or (not slim.own and len(slim.ids) != len(slim)):
                raise changed
        self.done = bytearray(len(slim))
        self.attempts = bytearray(len(slim))
        for i in (i for i, c in enumerate(cached) if c):
            obj = runner.from_cache(slim.item(i), "batch")
            if obj is not None:
                self.keep(i, obj)
            else:
                self.failed.add(i)
                self.last[i] = Outcome(False, reason="no_response", detail="cache entry vanished since build")

    def read_batch(self, backend: BatchBackend, b: BatchInfo, files: Sequence[Path], chunk: str) -> None:
        """A terminal batch's rows settled (paid rows to the ledger once: a re-read after an
        interruption skips them); what it did not answer is failed, with the batch's reason."""
        runner, bid, status, stage = self.runner, b.id, b.status, self.runner.stage
        record = runner.ledger is None or not runner.ledger.is_done(bid)
        seen: set[int] = set()
        for path in files:
            for cid, oc in backend.rows(path):
                i, att = parse_custom_id(cid)
                if i in seen or i >= len(self.slim):
                    continue
                seen.add(i)
                self.attempts[i] = max(self.attempts[i], min(att, 255))
                if oc.paid:
                    self.paid_usage.append(oc.usage)
                obj = runner.settle(self.item_of(i), oc, attempt=att, mode="batch", rid=f"{bid}/{cid}", record=record)
                if obj is not None:
                    self.keep(i, obj)
                    self.failed.discard(i)
                else:
                    self.last[i] = oc
                    self.failed.add(i)
        if record and runner.ledger is not None:
            runner.ledger.mark_done(bid)
        missing = [(i, a) for i, a in (parse_custom_id(c) for c in _chunk_ids(chunk)) if i not in seen]
        # what the provider processed (its counts) but did not return: billed by its rules
        # (docs/openai.md, docs/gemini.md "Billing of batches that end early")
        n_unret = max(0, b.processed - len(seen)) if status != "completed" and b.processed else 0
        if n_unret:
            self.unreturned[bid] = (n_unret, status)
            log.warning("%s: %s batch %s %s: the provider reports %d request(s) processed that it did not "
                        "return; they are billed: recorded as %d cost row(s) (reason %s_unreturned) at "
                        "the mean usage of the answered ones, and sent again", stage, backend.name, bid,
                        status, n_unret, n_unret, status)
        elif missing and status != "completed" and b.processed is None:
            log.warning("%s: %s batch %s %s: %d request(s) without an answer; the provider may have billed "
                        "some it did not return (its API does not say how many): compare with its billing "
                        "console", stage, backend.name, bid, status, len(missing))
        if missing:
            reason = {"failed": "batch_failed", "expired": "batch_expired",
                      "cancelled": "batch_cancelled"}.get(status, "no_response")
            for i, a in missing:
                self.attempts[i] = max(self.attempts[i], min(a, 255))
                self.last[i] = Outcome(False, reason=reason,
                                       detail=f"batch {bid} {status}" + (f": {b.error}" if b.error else ""))
                self.failed.add(i)
            log.warning("%s: batch %s %s: %d request(s) without an answer (%s)", stage, bid, status,
                        len(missing), reason)

    def answer_shared(self, claims, retry: list[int]) -> None:
        """Requests another shard claimed: its answer (free: a cached cost row here), or, when its claim
        is gone without one (lost there, or expired), this shard claims it and sends it itself
        (appended to ``retry``)."""
        runner = self.runner
        for i, w in list(self.shared.items()):
            it = self.item_of(i)
            it.wire = w
            rec = _wire_record(runner, it)
            if rec is None and claims.claim(w):
                rec = _wire_record(runner, it, fresh=True)   # answered just before the release
                if rec is None:
                    self.wires[32 * i: 32 * i + 32] = bytes.fromhex(w)
                    retry.append(i)
                    del self.shared[i]
                    continue
                claims.release(w)
            if rec is not None:
                del self.shared[i]
                runner.cache.put(it.key, rec)
                runner._cost(cost_row(stage=runner.stage, item_id=it.item_id, model=runner.llm.model, mode="batch",
                                      usage=_usage(rec), price=runner.price, batch_discount=runner.batch_discount,
                                      attempt=0, cached=True))
                self.keep(i, rec["answer"])

    def finish(self, claims, losses: Losses) -> None:
        """The last round is over: every claimed request is answered (in the cache) or lost here, so its
        claim goes (a shard waiting for a lost one then sends it itself); the lost ones are losses."""
        runner, stage = self.runner, self.runner.stage
        for i in range(len(self.slim)):
            w = self.wires[32 * i: 32 * i + 32]
            if w != _ZERO:
                claims.held.add(w.hex())
                claims.release(w.hex())
        if self.unreturned:
            log.warning("%s: %d request(s) billed by the provider without an answer could not be priced (no answer "
                        "of this stage tells their usage): they are not in the cost file; see the provider's "
                        "billing console", stage, sum(n for n, _ in self.unreturned.values()))
        for i in sorted(self.failed):
            if self.done[i]:
                continue
            oc = self.last[i]
            for j in (i, *self.dups.get(i, ())):
                losses.add(runner.item_type, self.slim.ids[j], oc.reason or "api_error", oc.detail,
                           attempts=max(1, self.attempts[i]))
        n_lost = sum(1 + len(self.dups.get(i, ())) for i in self.failed if not self.done[i])
        log.info("%s collect: %d answers, %d lost, %d paid requests, $%.4f", stage, self.n_done, n_lost,
                 runner.cost_count, runner.cost_total)


_ZERO = bytes(32)


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
    from .cost import Usage, cost_row

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


# -- all three in one call (library use, and adapters whose plain rule runs in batch mode) -------------
def run_batch(runner: Runner, items: Sequence[Item], losses: Losses, *, state_dir: str,
              wait: bool = default(f"{LLM}.wait"),
              poll_seconds: float = default(f"{LLM}.poll_seconds"), benchmark: str = "benchmaker") -> dict[str, dict]:
    """build -> submit -> collect for ``items`` in ``<state_dir>/<digest of their keys>``: the same
    items (a rerun) resume the same batches; returns item_id -> answer."""
    items = runner.keyed(list(items))
    h = hashlib.sha256()
    for it in items:
        h.update(it.key.encode() + b"\n")
    tag = f"{runner.stage}-{h.hexdigest()[:16]}"
    d = Path(state_dir) / tag
    d.mkdir(parents=True, exist_ok=True)
    req, man, sub = d / "requests.jsonl", d / "manifest.jsonl", d / "submitted.json"
    md = {"benchmaker": benchmark, "bm_stage": runner.stage, "bm_shard": tag}
    if not man.exists():
        build_requests(runner, items, requests=str(req), manifest=str(man))
    if not sub.exists():
        submit_requests(runner, requests=str(req), submitted=str(sub), state_dir=str(d), metadata=md)
    own = runner.ledger is None
    if own:                  # paid rows on record in the state dir: a re-read after a rerun is not paid twice
        from .ledger import CostLedger

        runner.ledger = CostLedger(d / "ledger.jsonl")
    try:
        return collect_results(runner, items, manifest=str(man), submitted=str(sub), state_dir=str(d),
                               losses=losses, metadata=md, wait=wait, poll_seconds=poll_seconds)
    finally:
        if own:
            led, runner.ledger = runner.ledger, None
            led.close()
            runner.cost_rows.extend({k: v for k, v in r.items() if k not in ("rid", "run")}
                                    for r in led.rows() if r.get("run") == led.run)

"""What the **collect** step (:mod:`benchmaker.providers.batch`) knows of each item: the manifest
(answered by the cache, sent, shared with another shard), the answers read from the batches' output
and error files, the answers of shared requests, the items retried and those lost."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from ..logs import get_logger
from ..losses import Losses
from .backend import BatchBackend, BatchInfo
from .batch_build import _wire_record, parse_custom_id
from .cost import cost_row
from .engine import Item, Runner, _usage
from .fastjson import loads
from .journal import CID as _CID
from .parse import Outcome
from .spec import RequestSpec

log = get_logger("providers.batch")


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

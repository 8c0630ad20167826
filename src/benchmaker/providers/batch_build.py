"""The Batch API lifecycle's first step, **build** (:mod:`benchmaker.providers.batch`): the requests
the cache cannot answer streamed into ``requests.jsonl`` (one Batch API line each, ``custom_id =
<stage>-<index>-a<attempt>``) and ``manifest.jsonl`` (index, item id, content key, whether the cache
answered it); requests another shard already claimed are shared, not sent twice."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar

from ..io import atomic_path
from ..logs import get_logger
from .claims import batch_wire_key
from .engine import Item, Runner
from .fastjson import dumps as fast_dumps

__all__ = ["build_requests", "custom_id", "parse_custom_id", "ordered_map"]

log = get_logger("providers.batch")


T = TypeVar("T")
R = TypeVar("R")


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

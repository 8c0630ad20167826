"""Response cache keyed by the request's content.

The key is a digest of everything that determines the answer: API flavour, server, model, sampling
settings, prompts, schema and, for images, the image's sha256 plus how it is sent (never the API
key). Only valid answers are stored. A plain rerun therefore pays nothing, and after a config change
only requests whose content changed are sent.

Two kinds of entries live side by side under the cache directory; a look-up checks both:

* **loose files** ``<dir>/<k[:2]>/<k>.json``: one small JSON file per key, written atomically (a
  private temporary name, then a rename). :meth:`ResponseCache.put` writes these outside a bulk
  block (sync mode: one answer per API round trip, each durable at once). Caches written before
  pack segments existed consist of these only and stay valid.
* **pack segments** ``<dir>/packs/<host>.<pid>.<uuid>.pack``: inside :meth:`ResponseCache.bulk`
  (alias :meth:`~ResponseCache.background`; batch collects use it) puts are appended to a segment
  owned by this process, written under a hidden temporary name (``.<name>.tmp``) and *published*
  (index footer, fsync, rename, fsync of the directory) every ``segment_entries`` entries or
  ``segment_seconds`` seconds, on :meth:`~ResponseCache.flush` and when the block ends. Readers
  list only published names, so they never see a partial segment; a killed writer loses at most its
  unpublished window (its temporary file is ignored). Every process writes only its own segments:
  parallel shard jobs on several hosts over a shared file system need no locks.

Segment layout (all integers little-endian)::

    record*   <key> TAB <crc32 of json, 8 hex> TAB <json> LF       (one line per entry, JSONL-like)
    footer    count x (sha256-or-hex key: 32 bytes, offset: u64, length: u32, pad: u32)
    trailer   b"BMPACK01", data_end: u64, count: u64, crc32 of footer: u32, b"END\\n"   (32 bytes)

The index of all published segments is loaded lazily from the footers only (no value is read): a
sorted pair of ``uint64`` arrays of the keys' first 16 bytes plus segment number, offset and length
(32 bytes per entry: ~32 MB for a million entries). A segment whose trailer does not check out
(truncated or corrupted tail) is indexed by scanning its complete, well-formed lines instead. A
record is returned only if its key and checksum match and its JSON parses to an object; anything
else counts as a miss. Segments published by other processes after the index was loaded are picked
up on a miss (at most once every ``refresh_seconds``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterator

from ..logs import get_logger
from .cachepack import (
    PACKS,
    SUFFIX,
    _decode,
    _Index,
    _key_bytes,
    _read_footer,
    _scan_records,
    _Segment,
)
from .fastjson import dumpb, loads

__all__ = ["ResponseCache", "content_key"]

log = get_logger("providers.cache")

def content_key(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """See the module docstring. ``directory=None`` disables the cache (every get is a miss)."""

    def __init__(self, directory: str | Path | None, *, segment_entries: int = 25_000,
                 segment_seconds: float = 60.0, refresh_seconds: float = 1.0, max_open: int = 64):
        self.dir = Path(directory) if directory else None
        self._root = str(self.dir) if self.dir is not None else ""
        self._packs = os.path.join(self._root, PACKS)
        self._made: set[str] = set()
        self._tag = f"{socket.gethostname().replace('/', '_')}.{os.getpid()}"
        self.segment_entries = int(segment_entries)
        self.segment_seconds = float(segment_seconds)
        self.refresh_seconds = float(refresh_seconds)
        self._max_open = int(max_open)
        self._lock = threading.RLock()
        self._bulk = 0
        self._seg: _Segment | None = None
        self._index = None                                       # _Index, loaded lazily
        self._names: list[str] = []                              # segment number -> file name
        self._known: set[str] = set()
        self._parts: list[tuple] = []                            # per segment (hi, lo, seg, off, len)
        self._fds: OrderedDict[int, int] = OrderedDict()
        self._scanned = 0.0
        self.hits = 0
        self.misses = 0

    # -- reading -------------------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        assert self.dir is not None
        return self.dir / key[:2] / f"{key}.json"

    def _file(self, key: str) -> str:
        return os.path.join(self._root, key[:2], key + ".json")

    def get(self, key: str, *, fresh: bool = False) -> dict | None:
        """The entry of ``key`` or None. ``fresh``: on a miss, look for segments published since the
        last look at once (else at most once every ``refresh_seconds``): for the check that follows
        winning a claim (providers/claims.py), when another job may have published just before."""
        if self.dir is None:
            self.misses += 1
            return None
        rec = self._from_packs(key, fresh)
        if rec is None:
            rec = self._from_file(key)
        if rec is None:
            self.misses += 1
            return None
        self.hits += 1
        return rec

    def contains(self, key: str) -> bool:
        if self.dir is None:
            return False
        return bool(self._locate(key)) or os.path.exists(self._file(key))

    def _from_file(self, key: str) -> dict | None:
        try:
            with open(self._file(key), "rb") as fh:
                rec = loads(fh.read())
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError):
            return None
        return rec if isinstance(rec, dict) else None

    def _locate(self, key: str, fresh: bool = False) -> list[tuple[int, int, int]]:
        """Locations of ``key`` in published segments (segment number, offset, length); -1 as
        segment number: this process's unpublished segment."""
        with self._lock:
            out = []
            if self._seg is not None and key in self._seg.entries:
                _, off, ln = self._seg.entries[key]
                out.append((-1, off, ln))
            if self._index is None:
                self._load()
            kb = _key_bytes(key)
            hi, lo = int.from_bytes(kb[:8], "big"), int.from_bytes(kb[8:16], "big")
            found = self._index.find(hi, lo) if len(self._index) else []
            if not found and not out and (fresh or time.monotonic() - self._scanned >= self.refresh_seconds):
                if self._refresh():
                    found = self._index.find(hi, lo)
            return out + found

    def _from_packs(self, key: str, fresh: bool = False) -> dict | None:
        locs = self._locate(key, fresh)
        if not locs:
            return None
        kb = key.encode("utf-8") + b"\t"
        for seg, off, ln in locs:
            try:
                with self._lock:
                    data = self._seg.read(off, ln) if seg < 0 else os.pread(self._fd(seg), ln, off)
            except OSError:
                continue
            rec = _decode(data, kb)
            if rec is not None:
                return rec
        return None

    def _fd(self, seg: int) -> int:
        fd = self._fds.get(seg)
        if fd is not None:
            self._fds.move_to_end(seg)
            return fd
        fd = os.open(os.path.join(self._packs, self._names[seg]), os.O_RDONLY)
        self._fds[seg] = fd
        while len(self._fds) > self._max_open:
            _, old = self._fds.popitem(last=False)
            os.close(old)
        return fd

    # -- the index -----------------------------------------------------------------------------
    def _load(self) -> None:
        self._refresh()

    def _refresh(self) -> bool:
        """Index segments published since the last look; True if any were added."""
        self._scanned = time.monotonic()
        try:
            names = sorted(n for n in os.listdir(self._packs) if n.endswith(SUFFIX) and not n.startswith("."))
        except OSError:
            names = []
        added = 0
        for name in names:
            if name in self._known:
                continue
            arr = self._read_segment(name)
            if arr is None:
                continue
            self._add_part(name, arr)
            added += 1
        if added or self._index is None:
            self._rebuild()
        return bool(added)

    def _read_segment(self, name: str):
        path = os.path.join(self._packs, name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            arr = _read_footer(fd, os.fstat(fd).st_size)
        except OSError:
            arr = None
        finally:
            os.close(fd)
        if arr is None:
            log.warning("response cache: segment %s has a damaged tail; indexing its complete records", path)
            try:
                arr = _scan_records(path)
            except OSError:
                return None
        return arr

    def _add_part(self, name: str, arr) -> None:
        """Keep the footer's columns as compact copies (the footer's own buffer is freed)."""
        import numpy as np

        seg = len(self._names)
        self._names.append(name)
        self._known.add(name)
        self._parts.append((arr["hi"].astype(np.uint64), arr["lo"].astype(np.uint64),
                            np.full(len(arr), seg, dtype=np.uint32), arr["off"].astype(np.uint64),
                            arr["len"].astype(np.uint32)))

    def _rebuild(self) -> None:
        import numpy as np

        parts, self._parts, self._index = self._parts, [], None
        if not parts:
            e = np.zeros(0, dtype=np.uint64)
            parts = [(e, e, e.astype(np.uint32), e, e.astype(np.uint32))]
        cols = []
        for j in range(5):
            cols.append(np.concatenate([p[j] for p in parts]) if len(parts) > 1 else parts[0][j])
            if len(parts) > 1:
                parts = [tuple(None if i == j else c for i, c in enumerate(p)) for p in parts]
        del parts
        ix = self._index = _Index(cols)
        # merged (and sorted): the next rebuild concatenates this part and the new ones
        self._parts = [(ix.hi, ix.lo, ix.seg, ix.off, ix.ln)]

    def index_size(self) -> int:
        """Entries in the loaded index of published segments (loads it if needed)."""
        with self._lock:
            if self._index is None:
                self._load()
            return len(self._index)

    # -- writing -------------------------------------------------------------------------------
    def put(self, key: str, record: dict) -> None:
        """Store one entry: appended to this process's pack segment inside :meth:`bulk`, else
        written as a loose file atomically (a private temporary name, then a rename)."""
        if self.dir is None:
            return
        payload = dumpb(record)
        if self._bulk:
            self._append(key, payload)
        else:
            self._write(key, payload)

    def _append(self, key: str, payload: bytes) -> None:
        with self._lock:
            seg = self._seg
            if seg is None:
                if self._packs not in self._made:
                    os.makedirs(self._packs, exist_ok=True)
                    self._made.add(self._packs)
                seg = self._seg = _Segment(self._packs, self._tag)
            seg.append(key, payload)
            if (len(seg.entries) >= self.segment_entries
                    or time.monotonic() - seg.started >= self.segment_seconds):
                self._publish()

    def _publish(self) -> None:
        seg = self._seg
        if seg is None:
            return
        self._seg = None
        if not seg.entries:
            seg.abandon()
            return
        try:
            arr = seg.publish(self._packs)
        except BaseException:
            seg.abandon()
            raise
        if self._index is not None:                 # our own entries are visible at once
            self._add_part(seg.name, arr)
            self._rebuild()

    def flush(self) -> None:
        """Publish this process's current segment (durable, visible to every reader)."""
        with self._lock:
            self._publish()

    def close(self) -> None:
        """:meth:`flush` and close the segment files opened for reading."""
        with self._lock:
            self._publish()
            while self._fds:
                os.close(self._fds.popitem()[1])

    def _write(self, key: str, payload: bytes) -> None:
        sub = os.path.join(self._root, key[:2])
        if sub not in self._made:
            os.makedirs(sub, exist_ok=True)
            self._made.add(sub)
        final = os.path.join(sub, key + ".json")
        tmp = os.path.join(sub, f".{key}.{self._tag}.{threading.get_ident()}.tmp")
        data = memoryview(payload)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                while data:
                    data = data[os.write(fd, data):]
            finally:
                os.close(fd)
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @property
    def in_bulk(self) -> bool:
        """Inside :meth:`bulk`: a put is appended to this process's pack segment."""
        return self._bulk > 0

    @contextlib.contextmanager
    def bulk(self) -> Iterator[None]:
        """Inside the block, :meth:`put` appends to this process's pack segment (a buffered write,
        no file created per entry). Segments are published every ``segment_entries`` entries or
        ``segment_seconds`` seconds, on :meth:`flush`, and when the (outermost) block ends, also
        when it ends by an exception (every appended entry is a validated answer)."""
        if self.dir is None:
            yield
            return
        with self._lock:
            self._bulk += 1
        try:
            yield
        finally:
            with self._lock:
                self._bulk -= 1
                if not self._bulk:
                    self._publish()

    def background(self, threads: int | None = None, max_pending: int | None = None):
        """Same as :meth:`bulk` (kept for callers written when bulk puts went to writer threads;
        ``threads`` and ``max_pending`` no longer apply: appending to a segment is cheap)."""
        return self.bulk()

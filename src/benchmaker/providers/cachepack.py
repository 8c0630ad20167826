"""Pack segments of the response cache: the on-disk format and its single-process writer.

Layout, publishing and crash behaviour are described in :mod:`benchmaker.providers.cache`; this module
holds the format constants, the footer index (:class:`_Index`), footer reading and the fallback line
scan of a damaged segment, the segment writer (:class:`_Segment`) and record decoding.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import time
import uuid
import zlib

from ..logs import get_logger
from .fastjson import loads

log = get_logger("providers.cache")

PACKS = "packs"
SUFFIX = ".pack"
MAGIC = b"BMPACK01"
TRAILER = struct.Struct("<8sQQI4s")          # magic, data_end, count, footer crc32, b"END\n"
TRAILER_END = b"END\n"
FOOTER_ENTRY = 48                            # key 32, offset 8, length 4, pad 4
_FLUSH_BYTES = 1 << 20                       # the writer's buffer


def _key_bytes(key: str) -> bytes:
    """32 bytes that identify ``key`` in a segment's index: the key itself when it is a hex sha256
    (every content key is), else the sha256 of the key."""
    if len(key) == 64:
        try:
            return bytes.fromhex(key)
        except ValueError:
            pass
    return hashlib.sha256(key.encode("utf-8")).digest()


def _footer_dtype():
    import numpy as np

    return np.dtype([("hi", ">u8"), ("lo", ">u8"), ("rest", "V16"), ("off", "<u8"), ("len", "<u4"),
                     ("pad", "<u4")])


class _Index:
    """Sorted keys (first 16 bytes as two uint64) → segment number, offset, length."""

    def __init__(self, cols: list):
        """``cols`` = [hi, lo, seg, off, ln]; emptied here (each column is replaced by its sorted
        copy one at a time, so at most one extra column is alive)."""
        import numpy as np

        order = np.argsort(cols[0], kind="stable")
        for j in range(5):
            cols[j] = cols[j][order]
        self.hi, self.lo, self.seg, self.off, self.ln = cols
        cols.clear()
        self._np = np

    def __len__(self) -> int:
        return len(self.hi)

    def find(self, hi: int, lo: int) -> list[tuple[int, int, int]]:
        """Every location of the key (one per segment that holds it)."""
        h = self.hi
        i = int(h.searchsorted(self._np.uint64(hi)))
        out = []
        n = len(h)
        while i < n and int(h[i]) == hi:
            if int(self.lo[i]) == lo:
                out.append((int(self.seg[i]), int(self.off[i]), int(self.ln[i])))
            i += 1
        return out


def _read_footer(fd: int, size: int):
    """The footer of a published segment as a structured array, or None if its tail does not check
    out (truncated, appended to, corrupted)."""
    import numpy as np

    if size < TRAILER.size:
        return None
    tail = os.pread(fd, TRAILER.size, size - TRAILER.size)
    try:
        magic, data_end, count, crc, end = TRAILER.unpack(tail)
    except struct.error:
        return None
    if magic != MAGIC or end != TRAILER_END or data_end + count * FOOTER_ENTRY + TRAILER.size != size:
        return None
    raw = os.pread(fd, count * FOOTER_ENTRY, data_end) if count else b""
    if len(raw) != count * FOOTER_ENTRY or zlib.crc32(raw) != crc:
        return None
    arr = np.frombuffer(raw, dtype=_footer_dtype())
    if count and int(arr["off"].max(initial=0)) >= data_end:
        return None
    return arr


def _scan_records(path: str):
    """Index a segment whose footer is unusable by reading its complete, well-formed lines (stops
    at the first malformed one: that is where the damage or the footer starts)."""
    import numpy as np

    keys: list[bytes] = []
    offs: list[int] = []
    lens: list[int] = []
    off = 0
    with open(path, "rb") as fh:
        for line in fh:
            parts = line.split(b"\t", 2)
            if (not line.endswith(b"\n") or len(parts) != 3 or len(parts[1]) != 8
                    or not parts[2].startswith(b"{")):
                break
            try:
                key = parts[0].decode("utf-8")
            except UnicodeDecodeError:
                break
            keys.append(_key_bytes(key))
            offs.append(off)
            lens.append(len(line))
            off += len(line)
    arr = np.zeros(len(keys), dtype=_footer_dtype())
    if keys:
        kb = np.frombuffer(b"".join(keys), dtype=">u8").reshape(-1, 4)
        arr["hi"], arr["lo"] = kb[:, 0], kb[:, 1]
        arr["off"], arr["len"] = offs, lens
    return arr


class _Segment:
    """This process's segment being written: a hidden temporary file, published by a rename."""

    def __init__(self, packs: str, tag: str):
        self.name = f"{tag}.{uuid.uuid4().hex}{SUFFIX}"
        self.final = os.path.join(packs, self.name)
        self.tmp = os.path.join(packs, f".{self.name}.tmp")
        self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self.buf = bytearray()
        self.flushed = 0                             # bytes on disk; the rest is in ``buf``
        self.size = 0
        self.entries: dict[str, tuple[bytes, int, int]] = {}    # key -> (key bytes, offset, length)
        self.started = time.monotonic()

    def append(self, key: str, payload: bytes) -> None:
        kb = key.encode("utf-8")
        if b"\t" in kb or b"\n" in kb or b"\n" in payload:
            raise ValueError(f"cache key or entry not storable in a segment: {key!r}")
        line = b"%s\t%08x\t%s\n" % (kb, zlib.crc32(payload), payload)
        self.entries[key] = (_key_bytes(key), self.size, len(line))
        self.buf += line
        self.size += len(line)
        if len(self.buf) >= _FLUSH_BYTES:
            self._drain()

    def read(self, off: int, length: int) -> bytes:
        if off >= self.flushed:
            return bytes(self.buf[off - self.flushed: off - self.flushed + length])
        return os.pread(self.fd, length, off) if off + length <= self.flushed else b""

    def _drain(self) -> None:
        data = memoryview(self.buf)
        while data:
            data = data[os.write(self.fd, data):]
        self.flushed += len(self.buf)
        self.buf = bytearray()

    def footer(self):
        import numpy as np

        arr = np.zeros(len(self.entries), dtype=_footer_dtype())
        if self.entries:
            kb = np.frombuffer(b"".join(v[0] for v in self.entries.values()), dtype="V32")
            raw = arr.view(np.uint8).reshape(len(arr), FOOTER_ENTRY)
            raw[:, :32] = kb.view(np.uint8).reshape(-1, 32)
            arr["off"] = [v[1] for v in self.entries.values()]
            arr["len"] = [v[2] for v in self.entries.values()]
        return arr

    def publish(self, packs: str):
        """Footer, trailer, fsync, rename; returns the footer (the segment's index)."""
        arr = self.footer()
        raw = arr.tobytes()
        self.buf += raw + TRAILER.pack(MAGIC, self.size, len(arr), zlib.crc32(raw), TRAILER_END)
        self._drain()
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        os.replace(self.tmp, self.final)
        _fsync_dir(packs)
        return arr

    def abandon(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
        with contextlib.suppress(OSError):
            os.unlink(self.tmp)


def _fsync_dir(path: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _decode(data: bytes, kb: bytes) -> dict | None:
    """A segment record's JSON object, or None if the record is not intact."""
    if not data.startswith(kb) or not data.endswith(b"\n"):
        return None
    body = data[len(kb):-1]
    if len(body) < 10 or body[8:9] != b"\t":
        return None
    payload = body[9:]
    try:
        if int(body[:8], 16) != zlib.crc32(payload):
            return None
        rec = loads(payload)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None

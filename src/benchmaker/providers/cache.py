"""Response cache keyed by the request's content.

The key is a digest of everything that determines the answer: API flavour, server, model, sampling
settings, prompts, schema and, for images, the image's sha256 plus how it is sent (never the API
key). Only valid answers are stored, one small JSON file per key under ``<dir>/<k[:2]>/<k>.json``,
written atomically, so parallel jobs and interrupted runs never see half an entry. A plain rerun
therefore pays nothing, and after a config change only requests whose content changed are sent.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import threading
from pathlib import Path
from typing import Any, Iterator

from .fastjson import dumpb, loads

__all__ = ["ResponseCache", "content_key"]


def content_key(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    def __init__(self, directory: str | Path | None):
        self.dir = Path(directory) if directory else None
        self._root = str(self.dir) if self.dir is not None else ""
        self._made: set[str] = set()
        self._tag = f"{socket.gethostname()}.{os.getpid()}"
        self._bg: Any = None
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> Path:
        assert self.dir is not None
        return self.dir / key[:2] / f"{key}.json"

    def _file(self, key: str) -> str:
        return os.path.join(self._root, key[:2], key + ".json")

    def get(self, key: str) -> dict | None:
        if self.dir is None:
            self.misses += 1
            return None
        try:
            with open(self._file(key), "rb") as fh:
                rec = loads(fh.read())
        except (FileNotFoundError, NotADirectoryError, ValueError):
            self.misses += 1
            return None
        if not isinstance(rec, dict):
            self.misses += 1
            return None
        self.hits += 1
        return rec

    def contains(self, key: str) -> bool:
        return self.dir is not None and os.path.exists(self._file(key))

    def put(self, key: str, record: dict) -> None:
        """Write one entry atomically (a private temporary name, then a rename): lean system calls
        only, since a large collect writes one entry per answer."""
        if self.dir is None:
            return
        if self._bg is not None:
            self._bg(key, dumpb(record))
            return
        self._write(key, dumpb(record))

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

    @contextlib.contextmanager
    def background(self, threads: int = 4, max_pending: int = 2048) -> Iterator[None]:
        """Inside the block, :meth:`put` serialises the entry and leaves the file system calls to
        ``threads`` writer threads (creating many small files is slow on some file systems; the calls
        release the GIL, so they overlap with parsing and with each other). At most ``max_pending``
        entries wait in memory. The block ends only when every entry is written; a failed write is
        raised there."""
        if self.dir is None or self._bg is not None:
            yield
            return
        from concurrent.futures import ThreadPoolExecutor

        slots = threading.BoundedSemaphore(max_pending)
        errors: list[BaseException] = []

        def done(fut) -> None:
            slots.release()
            exc = fut.exception()
            if exc is not None:
                errors.append(exc)

        ex = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="cache")

        def submit(key: str, payload: bytes) -> None:
            if errors:
                raise errors[0]
            slots.acquire()
            ex.submit(self._write, key, payload).add_done_callback(done)

        self._bg = submit
        try:
            yield
        finally:
            self._bg = None
            ex.shutdown(wait=True)
        if errors:
            raise errors[0]

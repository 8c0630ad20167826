"""Claims on request contents, shared by every job that uses one response cache: each distinct
request, keyed by the bytes actually sent (:func:`wire_key`), is paid once per benchmark, whatever
the shard and whatever runs at the same time.

The response cache is keyed by what decides an answer *before* anything is read (the source image's
sha256 and how it is sent, :func:`~benchmaker.providers.spec.request_key`), so that deciding what is
cached never reads an image. Two different files can still become the same request (a 16-bit PNG and
an 8-bit one of the same photo; RGBA images composited onto white): their rendered bodies are
byte-identical. So, just before a request is sent, its rendered body is hashed (the *wire key*) and

* if the cache holds an answer under the wire key, that answer is used (nothing is sent);
* else the job **claims** the wire key: an exclusive create (``O_CREAT | O_EXCL``) of
  ``<cache>/claims/<k[:2]>/<k>`` holding ``host pid time``. Exactly one job wins; it looks for an
  answer once more (one may have arrived just before the release), sends the request, stores the
  answer under its content key and a reference to it under the wire key
  (:meth:`~benchmaker.providers.engine.Runner.put_wire`), and removes the claim;
* a job that finds the key claimed waits for the answer (polling the cache) while the claim lives.
  A claim whose owner died (same host, no such process) or that is older than ``stale_seconds`` is
  taken over: renamed away (only one taker succeeds), then claimed again. A claim released without
  an answer (the owner's request failed) lets a waiter claim and send it itself.

Batch mode (providers/batch.py) uses the same claims across its steps: build claims the wire key of
each request it writes (an item whose bytes another shard has answered is answered from the cache; one
another shard has claimed is not written, but marked ``shared`` in the manifest); collect stores the
answer under the wire key and releases the claim when the shard's last round is over (answered or
lost, so a waiting shard then sends what was lost itself). A batch claim names its shard's request
folder instead of a process (build and collect are different processes; a resumed step re-takes its
own claims) and expires after ``BATCH_CLAIM_SECONDS`` (the Batch API's 24 h completion window plus two
hours). A collect waiting on a shard whose collect is not running takes its work over (reads the
answers from that shard's batches, providers/batch_wait.py ``_take_over``); :meth:`Claims.holder` tells a
waiting collect whom it waits for and until when.

Exclusive create is atomic on local file systems and on NFS v3+, so jobs on several hosts sharing the
cache directory need no lock server.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from ..logs import get_logger
from .fastjson import dumpb

__all__ = ["BATCH_CLAIM_SECONDS", "Claims", "batch_wire_key", "wire_key"]

BATCH_CLAIM_SECONDS = 26 * 3600

log = get_logger("providers.claims")
_HOST = socket.gethostname()


def wire_key(body: Any) -> str:
    """The key of a request by the bytes actually sent: sha256 of its rendered body's JSON."""
    data = body if isinstance(body, (bytes, bytearray)) else dumpb(body)
    return hashlib.sha256(b"benchmaker-wire-v1\n" + data).hexdigest()


def batch_wire_key(line: str) -> str:
    """The wire key of a Batch API request line: its bytes after the custom id (which names the shard's
    item and attempt, not the request), so the same request from any shard or round has one key."""
    head, sep, rest = line.partition('",')
    return hashlib.sha256(b"benchmaker-batch-wire-v1\n" + (rest if sep else line).encode()).hexdigest()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Claims:
    """See the module docstring. ``directory=None``: no cache, so nothing is shared (every claim wins)."""

    def __init__(self, directory: str | os.PathLike | None, *, stale_seconds: float = 3600.0,
                 poll_seconds: float = 0.2, owner: str | None = None):
        self.dir = Path(directory) / "claims" if directory else None
        self.stale_seconds = stale_seconds
        self.poll_seconds = poll_seconds
        # batch mode: claims outlive the process that makes them (build claims, collect releases), so
        # they name an owner (the shard's state folder) instead of a live process, and expire after
        # ``stale_seconds`` (written into the claim: every reader applies the owner's limit)
        self.owner = owner
        self.held: set[str] = set()
        self.won = self.waited = 0

    def _path(self, key: str) -> Path:
        assert self.dir is not None
        return self.dir / key[:2] / key

    def claim(self, key: str) -> bool:
        """True: this job owns ``key`` (send the request, then :meth:`release`)."""
        if self.dir is None:
            return True
        p = self._path(key)
        p.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            try:
                fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if self.owner is not None and self._owner_of(p) == self.owner:
                    self.held.add(key)               # ours since an earlier step of this shard
                    return True
                if not self._stale(p):
                    return False
                try:                                 # take over: only one taker's rename succeeds
                    os.replace(p, p.with_name(f".{p.name}.stale-{uuid.uuid4().hex[:8]}"))
                except FileNotFoundError:
                    pass
                continue
            with os.fdopen(fd, "w") as fh:
                if self.owner is None:
                    fh.write(f"{_HOST} {os.getpid()} {time.time():.3f}\n")
                else:
                    fh.write(f"{_HOST} {os.getpid()} {time.time():.3f} {self.stale_seconds:.0f} {self.owner}\n")
            self.held.add(key)
            self.won += 1
            return True
        return False

    @staticmethod
    def _owner_of(p: Path) -> str | None:
        try:
            parts = p.read_text().rstrip("\n").split(" ", 4)
        except OSError:
            return None
        return parts[4] if len(parts) == 5 else None

    def _stale(self, p: Path) -> bool:
        try:
            parts = p.read_text().rstrip("\n").split(" ", 4)
            host, pid, t = parts[:3]
            age = time.time() - float(t)
            if len(parts) == 5:                      # a batch shard's claim: by its own time limit only
                return age > float(parts[3])
        except (OSError, ValueError):
            try:
                age = time.time() - p.stat().st_mtime
            except OSError:
                return True                          # gone meanwhile: try again
            return age > 5.0                         # a claim being written; else unreadable: stale
        if host == _HOST and not _alive(int(pid)):
            return True
        return age > self.stale_seconds

    def holder(self, key: str) -> tuple[str, float] | None:
        """Who holds ``key`` and until when: its owner (a batch shard's folder, else ``host pid``) and
        the time (epoch seconds) its claim expires; None when it is not claimed (or unreadable)."""
        if self.dir is None:
            return None
        try:
            parts = self._path(key).read_text().rstrip("\n").split(" ", 4)
            t = float(parts[2])
        except (OSError, ValueError, IndexError):
            return None
        if len(parts) == 5:
            return parts[4], t + float(parts[3])
        return f"{parts[0]} {parts[1]}", t + self.stale_seconds

    def release(self, key: str) -> None:
        if self.dir is None or key not in self.held:
            return
        self.held.discard(key)
        p = self._path(key)
        if self.owner is not None and self._owner_of(p) != self.owner:
            return                                   # taken over meanwhile: not ours to remove
        try:
            p.unlink()
        except FileNotFoundError:
            pass

    def release_all(self) -> None:
        for k in list(self.held):
            self.release(k)

    def wait(self, key: str, answered: Callable[[], Any]) -> Any:
        """Wait while another job holds ``key``: returns ``answered()`` once it is not None, or None
        when the claim is gone without an answer and this job now owns the key (send it)."""
        self.waited += 1
        while True:
            got = answered()
            if got is not None:
                return got
            if self.claim(key):
                got = answered()                     # answered just before the release
                if got is not None:
                    self.release(key)
                    return got
                return None
            time.sleep(self.poll_seconds)

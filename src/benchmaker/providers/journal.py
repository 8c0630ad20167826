"""Submit's memory: content-addressed request chunks and the append-only, fsynced journal of intents,
ids and terminal batches that makes submit idempotent and lets collect resume without asking again."""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from ..io import JsonlAppender, atomic_path, iter_jsonl
from .backend import BatchInfo
from .fastjson import loads

__all__ = ["split_requests", "Journal", "CID"]

CID = re.compile(rb'^\{"custom_id":"([^"]+)"')      # every backend's request lines start like this
_CID = CID


def split_requests(lines: Iterable[str], chunk_dir: Path, *, max_requests: int, max_bytes: int,
                   keep: Callable[[str], bool] | None = None) -> list[dict]:
    """Write request lines into content-addressed chunk files; returns [{path, digest, n, bytes}].

    Beside each chunk, ``<digest>.ids`` lists its custom ids (what collect needs of a chunk once its
    batch exists). ``keep(digest)`` false: the chunk's batch exists already, its file is not kept."""
    chunk_dir.mkdir(parents=True, exist_ok=True)
    out: list[dict] = []
    state: dict[str, Any] = {}

    def start() -> None:
        tmp = chunk_dir / f".part-{os.getpid()}-{len(out)}.tmp"
        state.update(tmp=tmp, fh=open(tmp, "wb"), h=hashlib.sha256(), n=0, b=0, ids=[])

    def finish() -> None:
        state["fh"].close()
        if state["n"] == 0:
            state["tmp"].unlink()
            return
        digest = state["h"].hexdigest()
        final = chunk_dir / f"{digest}.jsonl"
        ids = chunk_dir / f"{digest}.ids"
        if not ids.exists():
            with atomic_path(ids) as t:
                t.write_bytes(b"".join(i + b"\n" for i in state["ids"]))
        if keep is None or keep(digest):
            os.replace(state["tmp"], final)
        else:
            state["tmp"].unlink()
        out.append({"path": str(final), "digest": digest, "n": state["n"], "bytes": state["b"]})

    start()
    for line in lines:
        data = line.encode("utf-8")
        if len(data) > max_bytes:
            raise ValueError(f"one request is {len(data)} bytes, more than max_bytes_per_batch ({max_bytes}); "
                             "lower image_max_side or use image_transport: url")
        if state["n"] and (state["n"] >= max_requests or state["b"] + len(data) > max_bytes):
            finish()
            start()
        state["fh"].write(data)
        m = _CID.match(data)
        state["ids"].append(m.group(1) if m else loads(data)["custom_id"].encode("utf-8"))
        state["h"].update(data)
        state["n"] += 1
        state["b"] += len(data)
    finish()
    return out


class Journal:
    """Append-only, fsynced record of intents and ids: the memory that makes submit idempotent."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.records: list[dict] = list(iter_jsonl(self.path)) if self.path.exists() else []
        self._app: JsonlAppender | None = None

    def write(self, rec: dict) -> None:
        if self._app is None:
            self._app = JsonlAppender(self.path)
        rec = {"t": round(time.time(), 3), **rec}
        self._app.write(rec)
        self._app.sync()
        self.records.append(rec)

    def chunk(self, digest: str) -> dict:
        st: dict[str, Any] = {}
        for r in self.records:
            if r.get("digest") == digest:
                st.update({k: v for k, v in r.items() if k not in ("t", "event")})
                st.setdefault("events", []).append(r.get("event"))
        return st

    def terminal(self, batch_id: str) -> BatchInfo | None:
        """A batch an earlier collect saw terminal and fetched (its result files are in the state dir)."""
        for r in self.records:
            if r.get("event") == "terminal" and r.get("batch_id") == batch_id:
                if all(Path(f).exists() for f in r.get("files") or []):
                    return BatchInfo(batch_id, r["status"], int(r.get("total") or 0), int(r.get("total") or 0),
                                     r.get("error") or "", {"files": list(r.get("files") or [])},
                                     processed=r.get("processed"))
        return None

    def round_digests(self, rnd: int) -> list[str] | None:
        for r in self.records:
            if r.get("event") == "round" and r.get("round") == rnd:
                return list(r["digests"])
        return None

    def close(self) -> None:
        if self._app is not None:
            self._app.close()

"""The Batch API lifecycle's second step, **submit** (:mod:`benchmaker.providers.batch`): the requests
split into content-addressed chunk files, one batch per chunk, each step on record in the journal
before and after its API call, so an interrupted submit never creates a batch twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Mapping

from ..io import atomic_path
from ..logs import get_logger
from .backend import BatchBackend
from .engine import Runner
from .journal import Journal, split_requests

__all__ = ["submit_requests"]

log = get_logger("providers.batch")


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

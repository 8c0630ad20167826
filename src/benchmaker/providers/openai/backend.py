"""OpenAI's Batch API behind :class:`~benchmaker.providers.backend.BatchBackend`: JSONL files uploaded
with ``purpose=batch``, one batch per file tagged with ``metadata``, output and error files
downloaded into the state dir."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from ...logs import get_logger
from ..backend import TERMINAL, BatchBackend, BatchInfo, result_rows
from ..parse import Outcome, parse_body
from ..spec import render_line
from . import (
    ENDPOINTS,
    cancel_batch,
    create_batch,
    download_file,
    find_batch,
    find_file,
    retrieve_batch,
    upload_batch_file,
)

__all__ = ["OpenAIBatchBackend", "line_outcome", "open_result"]

log = get_logger("providers.openai")
_FIND_KEYS = ("benchmaker", "bm_stage", "bm_shard", "bm_chunk")


def open_result(path: Path):
    """A downloaded result file, gzip-compressed (``.gz``, as written now) or plain."""
    import gzip

    return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")


def line_outcome(row: dict, api: str) -> Outcome:
    """The outcome of one row of an output or error file."""
    if row.get("error"):
        e = row["error"]
        return Outcome(False, reason="api_error", detail=f"{e.get('code', '')}: {e.get('message', '')}"[:500])
    resp = row.get("response") or {}
    status = resp.get("status_code", 200)
    body = resp.get("body")
    if status != 200:
        msg = ((body or {}).get("error") or {}).get("message") if isinstance(body, dict) else body
        return Outcome(False, reason="api_error", detail=f"HTTP {status}: {str(msg)[:400]}")
    return parse_body(body, api)


class OpenAIBatchBackend(BatchBackend):
    name = "openai"

    def line(self, item, custom_id: str) -> str:
        s = self.runner.llm
        head = f'{{"custom_id":"{custom_id}","method":"POST","url":"{ENDPOINTS[s.api]}","body":'
        return render_line(item.spec, s, head)

    def upload(self, path: str, name: str) -> str:
        # a failed try may have stored the file anyway: look it up before uploading again
        return self.call(lambda: upload_batch_file(self.client, path, name), "upload batch file",
                         on_retry=lambda exc: find_file(self.client, name))

    def find_file(self, name: str) -> str | None:
        return self.call(lambda: find_file(self.client, name), "list files")

    def create(self, file_id: str, *, name: str, metadata: Mapping[str, str]) -> str:
        look = {k: metadata[k] for k in _FIND_KEYS if k in metadata}
        window = str(self.runner.settings["completion_window"])
        # a failed try may have created the batch anyway: look it up by its metadata before trying again
        b = self.call(lambda: create_batch(self.client, file_id=file_id, api=self.runner.llm.api,
                                           completion_window=window, metadata=metadata), "create batch",
                      on_retry=lambda exc: find_batch(self.client, look))
        return b["id"]

    def find(self, *, name: str, metadata: Mapping[str, str]) -> dict | None:
        look = {k: metadata[k] for k in _FIND_KEYS if k in metadata}
        b = self.call(lambda: find_batch(self.client, look), "list batches")
        return {"id": b["id"], "file_id": b.get("input_file_id")} if b else None

    def poll(self, batch_id: str) -> BatchInfo:
        b = self.call(lambda: retrieve_batch(self.client, batch_id), f"poll batch {batch_id}")
        rc = b.get("request_counts") or {}
        status = b.get("status")
        errs = "; ".join(str(e.get("message", e)) for e in ((b.get("errors") or {}).get("data") or [])[:3])
        done = int(rc.get("completed") or 0) + int(rc.get("failed") or 0)
        return BatchInfo(batch_id, status if status in TERMINAL else "running", int(rc.get("total") or 0),
                         done, errs, b, processed=done if status in TERMINAL else None)

    def fetch(self, info: BatchInfo, state_dir: Path) -> list[Path]:
        out = []
        for key, suffix in (("output_file_id", "output"), ("error_file_id", "error")):
            fid = info.raw.get(key)
            if not fid:
                continue
            plain = state_dir / "downloads" / f"{info.id}.{suffix}.jsonl"
            if plain.exists():                  # downloaded by an earlier version: read as is
                out.append(plain)
                continue
            dest = plain.with_name(plain.name + ".gz")
            if not dest.exists():
                self.call(lambda fid=fid, dest=dest: download_file(self.client, fid, str(dest), compress=True),
                          f"download {fid} of batch {info.id}")
            out.append(dest)
        return out

    def rows(self, path: Path) -> Iterator[tuple[str, Outcome]]:
        api = self.runner.llm.api
        with open_result(path) as fh:
            for row in result_rows(fh, path):
                yield row["custom_id"], line_outcome(row, api)

    def cancel(self, batch_id: str) -> None:
        cancel_batch(self.client, batch_id, policy=self.runner.policy)

"""Gemini's Batch API behind :class:`~benchmaker.providers.backend.BatchBackend`, with inline requests.

A chunk of ``requests.jsonl`` (``{"custom_id", "request"}`` lines, at most 19 MB: the inline limit)
becomes one ``batches.create`` call with ``src`` = the chunk's requests, each tagged with its custom id
in ``metadata.key``, and ``display_name`` = the chunk's name (how a create interrupted after the API
accepted it is found again). Nothing is uploaded: the chunk file in the state dir is the "file". A
terminal job's inlined responses are written once to ``downloads/<job>.output.jsonl`` (the same
shape as OpenAI's output rows: ``custom_id`` + ``response`` or ``error``), so a rerun of collect
re-reads them instead of asking again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from ...io import atomic_path, iter_jsonl
from ...logs import get_logger
from ..backend import BatchBackend, BatchInfo, result_rows
from ..fastjson import dumps as fast_dumps
from ..parse import Outcome
from .client import INLINE_BATCH_BYTES, TERMINAL_STATES
from .wire import parse_response, render_request, request_to_sdk, response_dict

__all__ = ["GeminiBatchBackend"]

log = get_logger("providers.gemini")
_STATUS = {"succeeded": "completed", "failed": "failed", "expired": "expired", "cancelled": "cancelled"}


def _state_name(state) -> str:
    return str(getattr(state, "value", state) or "")


class GeminiBatchBackend(BatchBackend):
    name = "gemini"
    max_bytes = INLINE_BATCH_BYTES

    def line(self, item, custom_id: str) -> str:
        return (f'{{"custom_id":"{custom_id}","request":'
                + fast_dumps(render_request(item.spec, self.runner.llm)) + "}\n")

    def upload(self, path: str, name: str) -> str:
        return f"local:{path}"                 # inline requests: nothing to upload

    def find_file(self, name: str) -> str | None:
        return None

    def create(self, file_id: str, *, name: str, metadata: Mapping[str, str]) -> str:
        path = file_id.removeprefix("local:")
        src = []
        for row in iter_jsonl(path):
            req = request_to_sdk(row["request"])
            src.append({"contents": req["contents"], "config": req["config"], "metadata": {"key": row["custom_id"]}})
        return self.call(
            lambda: self.client.batches.create(model=self.runner.llm.model, src=src,
                                               config={"display_name": name}).name,
            "create Gemini batch job", on_retry=lambda exc: self._find(name))

    def _find(self, display_name: str, max_scan: int = 2000) -> str | None:
        pager = self.client.batches.list(config={"page_size": 100})
        for i, b in enumerate(pager):
            if getattr(b, "display_name", None) == display_name:
                return b.name
            if i >= max_scan:
                break
        return None

    def find(self, *, name: str, metadata: Mapping[str, str]) -> dict | None:
        found = self.call(lambda: self._find(name), "list Gemini batch jobs")
        return {"id": found, "file_id": None} if found else None

    def poll(self, batch_id: str) -> BatchInfo:
        b = self.call(lambda: self.client.batches.get(name=batch_id), f"poll Gemini batch job {batch_id}")
        state = _state_name(b.state)
        status = _STATUS.get(TERMINAL_STATES.get(state, ""), "running")
        err = getattr(b, "error", None)
        msg = str(getattr(err, "message", "") or "") if err is not None else ""
        stats = getattr(b, "batch_stats", None)
        total = int(getattr(stats, "request_count", 0) or 0)
        done = int(getattr(stats, "successful_request_count", 0) or 0) + int(getattr(stats, "failed_request_count", 0)
                                                                           or 0)
        processed = self._processed(batch_id) if status in ("expired", "cancelled", "failed") else None
        return BatchInfo(batch_id, status, total, done, msg, {"status": state, "job": b}, processed=processed)

    def _processed(self, batch_id: str) -> int | None:
        """The job's ``batchStats`` (successful + failed requests) from the REST resource: the SDK's
        ``BatchJob`` drops them, and they are the only count of what an expired job processed (and
        billed) without returning it. None when the API does not say."""
        import json

        api = getattr(self.client, "_api_client", None)
        if api is None:
            return None
        try:
            resp = self.call(lambda: api.request("get", batch_id, {}, None), f"stats of Gemini batch job {batch_id}")
            d = json.loads(resp.body or "{}")
        except Exception as exc:  # noqa: BLE001 - the count is a bonus: without it the log says so
            log.info("Gemini batch job %s: no batchStats (%s)", batch_id, exc)
            return None
        st = (d.get("metadata") or {}).get("batchStats") or d.get("batchStats")
        if not isinstance(st, dict):
            return None
        return int(st.get("successfulRequestCount") or 0) + int(st.get("failedRequestCount") or 0)

    def fetch(self, info: BatchInfo, state_dir: Path) -> list[Path]:
        dest = state_dir / "downloads" / f"{info.id.replace('/', '_')}.output.jsonl"
        if dest.exists():
            return [dest]
        b = info.raw.get("job")
        out = getattr(b, "dest", None) if b is not None else None
        dest.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(dest) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            for ir in (getattr(out, "inlined_responses", None) or []):
                cid = (getattr(ir, "metadata", None) or {}).get("key")
                if not cid:
                    continue
                resp, err = getattr(ir, "response", None), getattr(ir, "error", None)
                row = {"custom_id": cid}
                if resp is not None:
                    row["response"] = response_dict(resp)
                else:
                    row["error"] = err.model_dump(mode="json", exclude_none=True) if err is not None else {}
                fh.write(fast_dumps(row) + "\n")
        return [dest]

    def rows(self, path: Path) -> Iterator[tuple[str, Outcome]]:
        with open(path, "rb") as fh:
            for row in result_rows(fh, path):
                if "response" in row:
                    yield row["custom_id"], parse_response(row["response"])
                else:
                    e = row.get("error") or {}
                    yield row["custom_id"], Outcome(False, reason="api_error",
                                                    detail=f"{e.get('code', '')}: {e.get('message', '')}"[:500])

    def cancel(self, batch_id: str) -> None:
        self.call(lambda: self.client.batches.cancel(name=batch_id), f"cancel Gemini batch job {batch_id}")

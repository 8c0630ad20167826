"""Gemini inline-request batch jobs with per-chunk state files (see :class:`_BatchJobs`)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ...io import atomic_path, dumps, iter_jsonl
from ...logs import get_logger
from ...losses import Losses
from ..cost import Usage, cost_row
from ..engine import Item
from ..parse import RETRYABLE, Outcome, validate_answer
from ..retry import PermanentAPIError
from .client import (TERMINAL_STATES, INLINE_BATCH_BYTES)
from .wire import (render_request, request_to_sdk, usage_from_response, response_dict, parse_response)
from .runner import GeminiRunner

log = get_logger("providers.gemini")


# -- batch mode ---------------------------------------------------------------------------------------
@dataclass
class _Job:
    digest: str
    path: Path
    data: dict

    @property
    def status(self) -> str:
        return self.data.get("status", "intent")

    @property
    def ids(self) -> list[str]:
        return self.data["ids"]


def _rid(key: str, attempt: int) -> str:
    return f"{key}-a{attempt}"


def _split_rid(rid: str) -> tuple[str, int]:
    k, _, a = rid.rpartition("-a")
    return k, int(a)


def _write_json_durable(path: Path, obj: Any) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(dumps(obj))
            fh.flush()
            os.fsync(fh.fileno())


def _state_name(state: Any) -> str:
    return str(getattr(state, "value", state) or "")


class _BatchJobs:
    """Inline-request batch jobs with resumable state in ``state_dir``.

    Requests that the cache cannot answer are rendered (one ``{"id": <content key>-a<attempt>,
    "request": …}`` line each) into content-addressed chunk files (at most ``max_requests_per_batch``
    requests and 19 MB each: the inline limit). Per chunk, ``jobs/<digest>.json`` is written (fsynced)
    *before* ``batches.create`` (status ``intent``) and right after it (the job name), so a rerun polls
    the job instead of creating it again; a chunk left at ``intent`` is first looked up on the server by
    its display name. A terminal job's responses are saved (``results/<digest>.json``) before the
    job is marked ``done``; answers are validated and cached, failures (``finishReason`` not STOP,
    invalid JSON, schema violations, error rows, requests of failed / expired jobs) are sent again in
    a new job with the next attempt number, up to ``max_attempts``. Cancelled jobs are not retried
    (someone cancelled them): their unanswered requests are lost with ``batch_cancelled``. State is
    per request (content key + attempt), so shards share the state dir safely, and items answered or
    attempted in an earlier run are never paid again.
    """

    def __init__(self, runner: GeminiRunner, state_dir: Path, *, wait: bool, poll_seconds: float):
        self.r, self.sd = runner, state_dir
        self.wait, self.poll_seconds = wait, poll_seconds
        s = runner.settings
        self.max_requests = int(s.get("max_requests_per_batch", 50000))
        self.max_bytes = min(int(s.get("max_bytes_per_batch", INLINE_BATCH_BYTES)), INLINE_BATCH_BYTES)
        self.jobs: dict[str, _Job] = {}
        self.by_rid: dict[str, str] = {}          # request id -> chunk digest
        self._load()

    # -- state ---------------------------------------------------------------------------------
    def _job_path(self, digest: str) -> Path:
        return self.sd / "jobs" / f"{digest}.json"

    def _load(self) -> None:
        d = self.sd / "jobs"
        if not d.is_dir():
            return
        for p in sorted(d.glob("*.json")):
            try:
                data = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                log.warning("gemini batch: unreadable state file %s ignored", p)
                continue
            job = _Job(data["digest"], p, data)
            self.jobs[job.digest] = job
            for rid in job.ids:
                self.by_rid[rid] = job.digest

    def _save(self, job: _Job, **changes: Any) -> None:
        job.data.update(changes, t=round(time.time(), 3))
        _write_json_durable(job.path, job.data)

    def _latest(self, key: str, max_attempts: int) -> tuple[int, _Job | None]:
        for a in range(max_attempts + 5, 0, -1):
            dg = self.by_rid.get(_rid(key, a))
            if dg:
                return a, self.jobs[dg]
        return 0, None

    # -- the loop ------------------------------------------------------------------------------
    def run(self, items: list[Item], losses: Losses) -> dict[str, dict]:
        r = self.r
        items = r.keyed(items)
        results: dict[str, dict] = {}
        by_key: dict[str, list[Item]] = {}
        for it in items:
            if it.key in by_key:                   # same request content as an earlier item
                by_key[it.key].append(it)
                continue
            obj = r.from_cache(it, "batch")
            if obj is not None:
                results[it.item_id] = obj
            else:
                by_key[it.key] = [it]
        for k, its in by_key.items():              # duplicates of cached items
            if its[0].item_id in results:
                for it in its[1:]:
                    results[it.item_id] = results[its[0].item_id]
        pending = {k for k, its in by_key.items() if its[0].item_id not in results}
        log.info("%s: %d items, %d from cache, %d to answer by batch jobs (state in %s)", r.stage, len(items),
                 len(items) - sum(len(by_key[k]) for k in pending), len(pending), self.sd)
        last: dict[str, Outcome] = {}
        attempts: dict[str, int] = {}
        final: set[str] = set()
        bad: dict[str, str] = {}
        while True:
            waiting: dict[str, _Job] = {}
            to_send: list[tuple[str, int]] = []
            for k in sorted(pending - final):
                a, job = self._latest(k, r.max_attempts)
                attempts[k] = a
                if job is None:
                    to_send.append((k, 1))
                    continue
                if job.status != "done" and not job.data.get("name"):
                    self._resume_intent(job)
                if job.status != "done":
                    waiting[job.digest] = job
                    continue
                oc = self._outcome(job, _rid(k, a))
                obj = self._accept(by_key[k][0], oc)
                if obj is not None:
                    for it in by_key[k]:
                        results[it.item_id] = obj
                    pending.discard(k)
                    continue
                last[k] = oc
                if oc.reason in RETRYABLE and a < r.max_attempts:
                    to_send.append((k, a + 1))
                else:
                    final.add(k)
            if waiting:
                r.cache.flush()
                self._wait(list(waiting.values()))
                continue
            if not to_send:
                break
            sent = self._submit(to_send, by_key, bad)
            for k in bad:
                final.add(k)
            if not sent and not any(k not in bad for k, _ in to_send):
                break
        self._report_costs(by_key, items)
        for k in sorted(pending):
            its = by_key[k]
            if its[0].item_id in results:
                continue
            if k in bad:
                oc = Outcome(False, reason="bad_input", detail=bad[k])
            else:
                oc = last.get(k) or Outcome(False, reason="no_response", detail="no answer")
            for it in its:
                losses.add(r.item_type, it.item_id, oc.reason or "api_error", oc.detail,
                           attempts=max(1, attempts.get(k, 1)))
        log.info("%s batch: %d answers, %d lost, %d paid requests, $%.4f", r.stage, len(results),
                 sum(len(by_key[k]) for k in pending if by_key[k][0].item_id not in results),
                 r.cost_count, r.cost_total)
        return results

    def _accept(self, item: Item, oc: Outcome) -> dict | None:
        """Validate and cache a batch answer (its cost is reported from the job's saved usage)."""
        if not oc.ok:
            return None
        problem = validate_answer(oc.obj, item.spec.schema, item.check)
        if problem is not None:
            oc.ok, oc.reason, oc.detail = False, "schema_violation", problem
            return None
        u = oc.usage
        self.r.cache.put(item.key, {"answer": oc.obj, "model": self.r.llm.model, "usage": {
            "input_tokens": u.input_tokens, "cached_input_tokens": u.cached_input_tokens,
            "output_tokens": u.output_tokens, "reasoning_tokens": u.reasoning_tokens}})
        return oc.obj

    # -- submit --------------------------------------------------------------------------------
    def _submit(self, to_send: Sequence[tuple[str, int]], by_key: Mapping[str, list[Item]],
                bad: dict[str, str]) -> int:
        from ..batch import ordered_map, split_requests

        def line(arg: tuple[str, int]) -> tuple[str, str | None, str | None]:
            k, a = arg
            try:
                req = render_request(by_key[k][0].spec, self.r.llm)
            except Exception as exc:  # an unreadable image: a loss, not a crash
                return k, None, f"{type(exc).__name__}: {exc}"
            return k, dumps({"id": _rid(k, a), "request": {"contents": req["contents"], "config": req["config"]}}) \
                + "\n", None

        lines = []
        for k, ln, err in ordered_map(line, to_send, int(self.r.settings.get("concurrency", 4))):
            if err is not None:
                bad[k] = err
            else:
                lines.append(ln)
        if not lines:
            return 0
        chunks = split_requests(lines, self.sd / "chunks", max_requests=self.max_requests, max_bytes=self.max_bytes)
        for ch in chunks:
            self._ensure(ch)
        return len(lines)

    def _resume_intent(self, job: _Job) -> None:
        """A chunk whose create call may or may not have gone through (an earlier run stopped)."""
        path = self.sd / "chunks" / f"{job.digest}.jsonl"
        if path.exists():
            self._ensure({"digest": job.digest, "path": str(path), "n": job.data["n"], "bytes": job.data["bytes"]})
            return
        found = self._find(job.data["display_name"])
        if found:
            self._save(job, status="submitted", name=found, found_by="display_name")
        else:   # never created and its requests are gone: those attempts count as unanswered
            self._save(job, status="done", outcome="missing", error="chunk file missing, job never created",
                       reported=True)
            _write_json_durable(self.sd / "results" / f"{job.digest}.json",
                                {"status": "missing", "error": "never submitted", "responses": {}, "costs": []})

    def _display_name(self, digest: str) -> str:
        return f"bm-{self.r.stage}-{digest[:40]}"

    def _ensure(self, chunk: dict) -> _Job:
        digest = chunk["digest"]
        job = self.jobs.get(digest)
        if job is not None and job.data.get("name"):
            return job
        dn = self._display_name(digest)
        if job is not None:                     # intent recorded, name not: did the create go through?
            found = self._find(dn)
            if found:
                self._save(job, status="submitted", name=found, found_by="display_name")
                log.info("resume: found batch job %s for chunk %s by its display name", found, digest[:12])
                return job
        else:
            ids = [json.loads(x)["id"] for x in Path(chunk["path"]).read_text(encoding="utf-8").splitlines() if x]
            job = _Job(digest, self._job_path(digest), {"digest": digest, "ids": ids, "n": chunk["n"],
                                                       "bytes": chunk["bytes"], "display_name": dn,
                                                       "model": self.r.llm.model})
            self._save(job, status="intent")
            self.jobs[digest] = job
            for rid in ids:
                self.by_rid[rid] = digest
        src = []
        for row in iter_jsonl(chunk["path"]):
            req = request_to_sdk(row["request"])
            src.append({"contents": req["contents"], "config": req["config"], "metadata": {"key": row["id"]}})
        name = self._create(src, dn)
        self._save(job, status="submitted", name=name)
        log.info("submitted Gemini batch job %s: %d requests, %.1f MB (chunk %s)", name, chunk["n"],
                 chunk["bytes"] / 1e6, digest[:12])
        return job

    def _create(self, src: list[dict], dn: str) -> str:
        """``batches.create``; after a transient failure the job may exist anyway: look it up by its
        display name before trying again (never two jobs for one chunk)."""
        return self.r.policy.call(
            lambda: self.r.client.batches.create(model=self.r.llm.model, src=src, config={"display_name": dn}).name,
            "create Gemini batch job", on_retry=lambda exc: self._find(dn))

    def _find(self, display_name: str, max_scan: int = 2000) -> str | None:
        pager = self._call(lambda: self.r.client.batches.list(config={"page_size": 100}))
        for i, b in enumerate(pager):
            if getattr(b, "display_name", None) == display_name:
                return b.name
            if i >= max_scan:
                break
        return None

    def _call(self, fn, what: str = "Gemini batch API call"):
        """An API call through the runner's retry policy."""
        return self.r.policy.call(fn, what)

    # -- wait and read ---------------------------------------------------------------------------
    def _wait(self, jobs: list[_Job]) -> None:
        from ..batch import BatchPending

        open_ = list(jobs)
        last_log = 0.0
        while open_:
            still = []
            for job in open_:
                try:
                    b = self._call(lambda: self.r.client.batches.get(name=job.data["name"]))
                except PermanentAPIError as exc:
                    if exc.status == 404:
                        self._finish(job, None, "missing", f"batch job {job.data['name']} not found (deleted?)")
                        continue
                    raise
                state = _state_name(b.state)
                if state in TERMINAL_STATES:
                    err = getattr(b, "error", None)
                    msg = getattr(err, "message", None) if err is not None else None
                    self._finish(job, b, TERMINAL_STATES[state], msg)
                else:
                    if job.data.get("state") != state:
                        self._save(job, state=state)
                    still.append(job)
            open_ = still
            if not open_:
                return
            if not self.wait:
                states = ", ".join(f"{j.data['name']}: {j.data.get('state')}" for j in open_[:10])
                raise BatchPending(f"{self.r.stage}: {len(open_)} Gemini batch job(s) still running ({states}); "
                                   "wait is false: run the workflow again later to collect")
            if time.monotonic() - last_log > 300:
                log.info("%s: waiting for %d Gemini batch job(s): %s", self.r.stage, len(open_),
                         ", ".join(f"{j.data['name']}={j.data.get('state')}" for j in open_[:5]))
                last_log = time.monotonic()
            time.sleep(self.poll_seconds)

    def _finish(self, job: _Job, b: Any, status: str, error: str | None) -> None:
        """Save a terminal job's responses and their cost rows, then mark it done."""
        rows: dict[str, dict] = {}
        dest = getattr(b, "dest", None) if b is not None else None
        for ir in (getattr(dest, "inlined_responses", None) or []):
            md = getattr(ir, "metadata", None) or {}
            rid = md.get("key")
            if not rid or rid in rows:
                continue
            resp = getattr(ir, "response", None)
            err = getattr(ir, "error", None)
            rows[rid] = {"response": response_dict(resp) if resp is not None else None,
                         "error": err.model_dump(mode="json", exclude_none=True) if err is not None else None}
        costs = []
        for rid, row in rows.items():
            if row["response"] is None:
                continue
            u = usage_from_response(row["response"])
            if not (u.input_tokens or u.output_tokens):
                continue
            k, a = _split_rid(rid)
            costs.append({"key": k, "attempt": a, "usage": [u.input_tokens, u.cached_input_tokens,
                                                             u.output_tokens, u.reasoning_tokens]})
        _write_json_durable(self.sd / "results" / f"{job.digest}.json",
                            {"status": status, "error": error, "responses": rows, "costs": costs})
        self._save(job, status="done", outcome=status, error=error, reported=False)
        n_ok = sum(1 for x in rows.values() if x["response"] is not None)
        if status != "succeeded" or n_ok < len(job.ids):
            log.warning("%s: Gemini batch job %s %s: %d of %d request(s) answered%s", self.r.stage,
                        job.data.get("name"), status, n_ok, len(job.ids), f" ({error})" if error else "")

    def _results(self, job: _Job) -> dict:
        cache = getattr(self, "_res_cache", None)
        if cache is None:
            cache = self._res_cache = {}
        if job.digest not in cache:
            cache[job.digest] = json.loads((self.sd / "results" / f"{job.digest}.json").read_text(encoding="utf-8"))
        return cache[job.digest]

    def _outcome(self, job: _Job, rid: str) -> Outcome:
        res = self._results(job)
        row = res["responses"].get(rid)
        if row is None:
            status = res["status"]
            reason = {"failed": "batch_failed", "expired": "batch_expired",
                      "cancelled": "batch_cancelled"}.get(status, "no_response")
            detail = f"batch job {job.data.get('name')} {status}" + (f": {res['error']}" if res.get("error") else "")
            return Outcome(False, reason=reason, detail=detail)
        if row.get("error"):
            e = row["error"]
            return Outcome(False, reason="api_error", detail=f"{e.get('code', '')}: {e.get('message', '')}"[:500])
        return parse_response(row["response"])

    def _report_costs(self, by_key: Mapping[str, list[Item]], items: Sequence[Item]) -> None:
        """Cost rows of every finished job not yet reported whose requests belong to these items;
        a cached row is dropped for an item that has a paid row here (answered by a job of an
        earlier, unfinished run)."""
        r = self.r
        keys = {it.key: it for it in items}
        paid_items: set[str] = set()
        for job in self.jobs.values():
            rows = []
            if job.status != "done" or job.data.get("reported"):
                continue
            mine = [c for c in self._results(job)["costs"] if c["key"] in keys]
            if not mine:
                continue
            for c in mine:
                u = Usage(*c["usage"])
                it = keys[c["key"]]
                rows.append((cost_row(stage=r.stage, item_id=it.item_id, model=r.llm.model, mode="batch", usage=u,
                                      price=r.price_of(u), batch_discount=r.batch_discount, attempt=c["attempt"]),
                             f"{job.data.get('name') or job.digest}/{_rid(c['key'], c['attempt'])}"))
                paid_items.add(it.item_id)
            for row, rid in rows:          # on record (the ledger) before the job is marked reported
                r._cost(row, rid)
            self._save(job, reported=True)
        r.cost_rows[:] = [c for c in r.cost_rows if not (c["cached"] and c["item_id"] in paid_items)]

"""The ``http`` system: a running search service queried over HTTP (docs/evaluate.md, "Live systems").

One request per query, built from the config's templates (``url``, ``params``, ``body``: ``$query``,
``$query_json``, ``$query_url``, ``$query_id``, ``$depth``), sent with bounded concurrency
(``concurrency`` threads sharing one ``httpx2`` client), retried on transient errors by the project's
retry policy (:class:`benchmaker.providers.retry.RetryPolicy`: 408/429/5xx, timeouts, resets; Retry-After
honoured) and cached by request (method, URL, params, body, the headers other than the secret one, and
the system's ``version``), so a rerun of the same deployment sends nothing and a new ``version``
queries again. The answer's hits, ids and scores are found with JMESPath expressions (``results``,
``id``, ``score``); ``id_regex`` maps a result id (a URL, a path, a prefixed key) to an image id.
Latency is measured per query on the live requests (the successful try; a retried query's failed tries
and back-off are not its latency) and summarised with the run's metadata; every request sent counts,
retries included (``requests_sent``, ``retries``).

The secret (``auth_env``) is read from the environment, sent in ``auth_header`` and never written to a
cache key, a log or an output.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..errors import ConfigError, UserError
from ..evaluate_settings import HTTP_DEFAULTS, LIVE_RUNTIME, check_http, render  # noqa: F401 - re-exported
from ..io import atomic_write_text
from ..logs import get_logger
from ..losses import Losses
from .data import Bench
from .runs import empty_run

__all__ = ["HTTP_DEFAULTS", "LIVE_RUNTIME", "check_http", "http_run", "latency_summary", "map_ids", "render",
           "request_key"]

log = get_logger("evaluate")

def request_key(req: Mapping[str, Any], version: str | None) -> str:
    """The cache key of a request: its content (no secret) and the system's version."""
    blob = json.dumps({"request": req, "version": version}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def map_ids(raw: Sequence[Any], id_regex: str | None) -> list[str | None]:
    """Result ids -> image ids (``id_regex``: the group named image_id, else group 1; None = no match)."""
    if not id_regex:
        return [None if r is None else str(r) for r in raw]
    rx = re.compile(id_regex)
    out: list[str | None] = []
    for r in raw:
        m = rx.search(str(r)) if r is not None else None
        out.append(None if m is None else (m.group("image_id") if "image_id" in rx.groupindex else m.group(1)))
    return out


def latency_summary(ms: Sequence[float]) -> dict[str, float | int | None]:
    """Mean, median, 95th percentile and maximum of per-query latencies (ms), and how many were measured."""
    if not ms:
        return {"latency_ms_mean": None, "latency_ms_p50": None, "latency_ms_p95": None, "latency_ms_max": None,
                "latency_queries": 0}
    a = np.asarray(ms, dtype=np.float64)
    return {"latency_ms_mean": round(float(a.mean()), 3), "latency_ms_p50": round(float(np.percentile(a, 50)), 3),
            "latency_ms_p95": round(float(np.percentile(a, 95)), 3), "latency_ms_max": round(float(a.max()), 3),
            "latency_queries": int(a.size)}


class _BadAnswer(ValueError):
    """The service answered, but not in the configured shape."""


def parse_hits(s: Mapping[str, Any], answer: Any, depth: int) -> list[tuple[Any, float | None]]:
    """``(result id, score)`` of each hit of one answer, in the service's order, at most ``depth``."""
    import jmespath

    hits = jmespath.search(s["results"], answer) if s.get("results") else answer
    if hits is None:  # not there (an error answer, a wrong path); an empty list is a valid empty answer
        raise _BadAnswer(f"results {s.get('results')!r} finds nothing in the answer "
                         f"{json.dumps(answer, ensure_ascii=False)[:300]}")
    if not isinstance(hits, list):
        raise _BadAnswer(f"results {s.get('results')!r} is a {type(hits).__name__}, not a list")
    out = []
    for n, h in enumerate(hits[:depth]):
        rid = jmespath.search(str(s["id"]), h) if s.get("id") else h
        if rid is None or isinstance(rid, (dict, list)):
            raise _BadAnswer(f"hit {n}: id {s.get('id')!r} gives {rid!r}")
        score = None
        if s.get("score") is not None:
            v = jmespath.search(str(s["score"]), h)
            try:
                score = float(v)  # Weaviate's GraphQL gives scores as strings
            except (TypeError, ValueError):
                raise _BadAnswer(f"hit {n}: score {s['score']!r} gives {v!r}, not a number") from None
            if not np.isfinite(score):
                raise _BadAnswer(f"hit {n}: score {v!r} is not finite")
        out.append((rid, score))
    return out


def _request(s: Mapping[str, Any], qid: str, text: str, depth: int) -> dict[str, Any]:
    req: dict[str, Any] = {"method": str(s["method"]).upper(), "url": render(s["url"], qid, text, depth)}
    params = render(s.get("params") or {}, qid, text, depth)
    if params:
        req["params"] = {k: str(v) for k, v in params.items()}
    if s.get("body") is not None and req["method"] != "GET":
        req["json"] = render(s["body"], qid, text, depth)
    headers = render(s.get("headers") or {}, qid, text, depth)
    if headers:
        req["headers"] = {str(k): str(v) for k, v in headers.items()}
    return req


def _answers_to_run(s: Mapping[str, Any], answers: Sequence[tuple], known: set[str],
                    losses: Losses) -> tuple[pl.DataFrame, int, int]:
    """(the run, answers not in the configured shape, hits that are no benchmark image) of the answers."""
    rows: list[tuple[str, str, float]] = []
    failed = unknown = 0
    name, depth = s["name"], int(s["depth"])
    for qid, answer, *_ in answers:
        try:
            if isinstance(answer, _BadAnswer):
                raise answer
            hits = parse_hits(s, answer, depth)
        except _BadAnswer as exc:
            failed += 1
            losses.add("query", qid, "bad_answer", f"evaluate {name}: {exc}")
            continue
        ids = map_ids([h[0] for h in hits], s.get("id_regex"))
        seen: set[str] = set()
        n = len(hits)
        for pos, ((rid, score), iid) in enumerate(zip(hits, ids)):
            if iid is None or iid not in known:
                unknown += 1
                losses.add("image", str(iid if iid is not None else rid), "unknown_image", query_id=qid, detail=
                           f"evaluate {name}: result id {str(rid)[:200]!r} is not a benchmark image")
                continue
            if iid in seen:  # several objects of one image (e.g. one per pool): its best rank counts
                continue
            seen.add(iid)
            if score is None:
                value = float(n - pos)  # no score: the service's order
            else:
                value = -score if s["score_order"] == "asc" else score
            rows.append((qid, iid, value))
    run = pl.DataFrame(rows, schema=["query_id", "image_id", "score"], orient="row") if rows else empty_run()
    return run, failed, unknown


def http_run(system: Mapping[str, Any], bench: Bench, *, cache_dir: str | None, losses: Losses,
             transport: Any = None) -> tuple[pl.DataFrame, dict]:
    """Query the service once per query; the run is each answer's hits mapped to image ids."""
    import httpx2

    from ..providers.retry import RetryPolicy

    s = {**HTTP_DEFAULTS, **dict(system)}
    name = s["name"]
    depth = int(s["depth"])
    secret = None
    if s.get("auth_env"):
        secret = os.environ.get(str(s["auth_env"]))
        if not secret:
            raise ConfigError(f"evaluate system {name!r}: environment variable {s['auth_env']} (auth_env) is not set; "
                              f"export it with the service's key before running")
    cache = Path(cache_dir) / "http" if cache_dir and s["cache"] else None
    version = None if s.get("version") is None else str(s["version"])
    known = set(bench.images["image_id"].to_list())
    texts = dict(bench.queries.select("query_id", "query_text").iter_rows())
    policy = RetryPolicy(max_tries=max(1, int(s["max_attempts"])), base_delay=0.5, max_delay=20.0,
                         budget_seconds=max(60.0, 10 * float(s["timeout_s"])))
    limits = httpx2.Limits(max_connections=max(1, int(s["concurrency"])))
    client = httpx2.Client(timeout=float(s["timeout_s"]), limits=limits, transport=transport)

    def one(qid: str) -> tuple[str, Any, float | None, bool, int]:
        """(query id, answer, latency ms, from the cache, requests sent for it: tries, retries included)."""
        req = _request(s, qid, texts[qid], depth)
        key = request_key(req, version)
        path = cache / key[:2] / f"{key}.json" if cache is not None else None
        if path is not None and path.is_file():
            rec = json.loads(path.read_text(encoding="utf-8"))
            return qid, rec["answer"], rec.get("latency_ms"), True, 0
        headers = dict(req.get("headers") or {})
        if secret:
            scheme = s.get("auth_scheme")
            headers[str(s["auth_header"])] = f"{scheme} {secret}" if scheme else secret
        tries = [0]

        def call():
            tries[0] += 1
            t0 = time.perf_counter()
            r = client.request(req["method"], req["url"], params=req.get("params"), json=req.get("json"),
                               headers=headers)
            ms = 1000 * (time.perf_counter() - t0)
            r.raise_for_status()
            return r, ms

        r, ms = _call(policy, call, name, req, qid)
        try:
            answer = r.json()
        except ValueError:
            return qid, _BadAnswer(f"answer is not JSON: {r.text[:200]!r}"), ms, False, tries[0]
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps({"request": req, "version": version, "answer": answer,
                                                "latency_ms": round(ms, 3)}, ensure_ascii=False) + "\n")
        return qid, answer, ms, False, tries[0]

    t0 = time.perf_counter()
    try:
        with ThreadPoolExecutor(max_workers=max(1, int(s["concurrency"]))) as ex:
            answers = list(ex.map(one, bench.query_ids))
    finally:
        client.close()
    t_query = time.perf_counter() - t0
    run, failed, unknown = _answers_to_run(s, answers, known, losses)
    if answers and failed == len(answers):
        raise RuntimeError(f"evaluate system {name!r}: no answer had the configured shape (results {s['results']!r}, "
                           f"id {s['id']!r}, score {s['score']!r}); the reasons are in the losses file")
    if unknown:
        log.warning("evaluate %s: %d hits are not benchmark images (id_regex %r?): dropped, listed in the losses file",
                    name, unknown, s.get("id_regex"))
    return run, _timing(answers, t_query, failed, version)


def _call(policy: Any, call: Callable[[], tuple[Any, float]], name: str, req: Mapping[str, Any], qid: str):
    """``call()`` under the retry ``policy``: its (response, ms); what retrying will not mend (a 4xx) or
    what kept failing, as one error that names the system, the request and what to check."""
    from ..providers.retry import PermanentAPIError, TransientExhausted

    try:
        return policy.call(call, f"evaluate {name}: query {qid!r}")
    except PermanentAPIError as exc:
        status = getattr(exc, "status", None)
        resp = getattr(exc.__cause__, "response", None)
        said = (resp.text or "")[:300] if resp is not None else ""
        hint = ("the key in the environment variable named by auth_env, auth_header and auth_scheme"
                if status in (401, 403) else "url, method, params, headers and body")
        raise UserError(f"evaluate system {name!r}: {req['method']} {req['url']} answered HTTP {status} for "
                        f"query {qid!r} ({said!r}); asking again will not help: check {hint}") from None
    except TransientExhausted as exc:
        raise TransientExhausted(f"evaluate system {name!r}: {req['method']} {req['url']} kept failing for query "
                                 f"{qid!r} ({str(exc.__cause__ or exc)[:200]}). Answers so far are cached: run "
                                 f"the workflow again when the service is up, or raise max_attempts / "
                                 f"timeout_s") from None


def _timing(answers: list[tuple], t_query: float, failed: int, version: str | None) -> dict[str, Any]:
    """The run's timing record: requests, retries, cached and failed answers, the latencies (the live
    answers', else the cached ones')."""
    live_ms = [float(a[2]) for a in answers if not a[3] and a[2] is not None]
    cached_ms = [float(a[2]) for a in answers if a[3] and a[2] is not None]
    sent = sum(a[4] for a in answers)
    live = sum(1 for a in answers if not a[3])
    timing = {"query_seconds": round(t_query, 4), "requests_sent": sent, "retries": sent - live,
              "cached_answers": len(answers) - live, "failed_answers": failed,
              "latency_from_cache": not live_ms and bool(cached_ms), **latency_summary(live_ms or cached_ms),
              "system_version": version}
    timing["query_latency_ms"] = timing["latency_ms_mean"]
    return timing

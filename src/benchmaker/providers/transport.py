"""Synchronous transport: bounded concurrency, Retry-After honoured, backoff on 429 / 5xx / network.

Transport-level retries (rate limits, server errors, lost connections) do not count as attempts of
an item: the request never produced an answer. What the server answers with a 4xx other than 429 is
an ``api_error`` outcome that counts as an attempt.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, Mapping, TypeVar

from ..logs import get_logger
from .parse import Outcome, parse_body

__all__ = ["SyncTransport", "retry_after_seconds"]

log = get_logger("providers.transport")
T = TypeVar("T")


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if ra:
        try:
            return max(0.0, float(ra))
        except ValueError:
            from email.utils import parsedate_to_datetime

            try:
                return max(0.0, parsedate_to_datetime(ra).timestamp() - time.time())
            except (TypeError, ValueError):
                return None
    return None


class SyncTransport:
    def __init__(self, client, api: str, *, concurrency: int = 8, max_transport_retries: int = 8,
                 base_delay: float = 1.0, max_delay: float = 60.0, sleep: Callable[[float], None] = time.sleep):
        self.client, self.api = client, api
        self.concurrency = max(1, int(concurrency))
        self.max_transport_retries = max_transport_retries
        self.base_delay, self.max_delay = base_delay, max_delay
        self.sleep = sleep
        self.sent = 0                 # HTTP requests actually sent (incl. transport retries)
        self.waits: list[float] = []  # every back-off delay, for reporting and tests
        self._lock = threading.Lock()

    def _delay(self, attempt: int, headers: Mapping[str, str] | None) -> float:
        ra = retry_after_seconds(headers)
        if ra is not None:
            return min(ra, self.max_delay * 5)
        return min(self.max_delay, self.base_delay * (2 ** attempt)) * (0.5 + random.random() / 2)

    def send(self, body: dict) -> Outcome:
        import openai

        from .openai import call

        for attempt in range(self.max_transport_retries + 1):
            with self._lock:
                self.sent += 1
            try:
                resp = call(self.client, self.api, body)
            except (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError,
                    openai.APITimeoutError, openai.ConflictError) as exc:
                status = getattr(exc, "status_code", None)
                headers = getattr(getattr(exc, "response", None), "headers", None)
                if attempt >= self.max_transport_retries:
                    return Outcome(False, reason="api_error",
                                   detail=f"gave up after {attempt + 1} tries: {type(exc).__name__} {status or ''}")
                d = self._delay(attempt, headers)
                with self._lock:
                    self.waits.append(d)
                log.debug("transport: %s (status %s); retrying in %.2f s", type(exc).__name__, status, d)
                self.sleep(d)
                continue
            except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
                # a rejected key: every later request would fail the same way
                from ..errors import key_rejected

                raise key_rejected("openai", exc.status_code, getattr(exc, "message", "") or str(exc)) from exc
            except openai.APIStatusError as exc:
                if exc.status_code >= 500:
                    if attempt < self.max_transport_retries:
                        d = self._delay(attempt, exc.response.headers)
                        self.waits.append(d)
                        self.sleep(d)
                        continue
                msg = getattr(exc, "message", "") or str(exc)
                return Outcome(False, reason="api_error", detail=f"HTTP {exc.status_code}: {msg[:400]}")
            return parse_body(resp, self.api)
        return Outcome(False, reason="api_error", detail="transport retries exhausted")

    def map(self, jobs: Iterable[T], render: Callable[[T], dict]) -> Iterator[tuple[T, Outcome]]:
        """Send ``render(job)`` for every job with bounded concurrency; yields (job, outcome) as done."""

        def one(job: T) -> tuple[T, Outcome]:
            try:
                body = render(job)
            except Exception as exc:  # an unreadable image: a loss, not a crash
                return job, Outcome(False, reason="bad_input", detail=f"{type(exc).__name__}: {exc}")
            return job, self.send(body)

        jobs = list(jobs)
        if self.concurrency == 1 or len(jobs) <= 1:
            for j in jobs:
                yield one(j)
            return
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="llm") as ex:
            # submit in windows so that a huge job list does not hold every pending future at once
            window = self.concurrency * 4
            it = iter(jobs)
            futures = set()
            from concurrent.futures import FIRST_COMPLETED, wait

            for j in it:
                futures.add(ex.submit(one, j))
                if len(futures) >= window:
                    done, futures = wait(futures, return_when=FIRST_COMPLETED)
                    for f in done:
                        yield f.result()
            for f in futures:
                yield f.result()

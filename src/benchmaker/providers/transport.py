"""Synchronous transport: bounded concurrency; every call through the one retry policy
(:mod:`benchmaker.providers.retry`: Retry-After honoured, back-off with jitter, a time budget).

Transport-level retries (rate limits, server errors, lost connections) do not count as attempts of
an item: the request never produced an answer. What the server answers with a 4xx other than
408 / 409 / 429 is an ``api_error`` outcome that counts as an attempt, except 401 / 403 (a bad key
fails every request alike), which stops the rule with what to do.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator, TypeVar

from ..logs import get_logger
from ..settings_schema import LLM, default
from .parse import Outcome, parse_body
from .retry import PermanentAPIError, RetryPolicy, TransientExhausted, retry_after_seconds

__all__ = ["SyncTransport", "retry_after_seconds"]

log = get_logger("providers.transport")
T = TypeVar("T")


class SyncTransport:
    """Sends request bodies with bounded concurrency. Providers override :meth:`_call` (one HTTP
    request, raising the SDK's errors) and :meth:`_parse` (response -> :class:`Outcome`)."""

    name = "openai"

    def __init__(self, client, api: str, *, concurrency: int = default(f"{LLM}.concurrency"),
                 max_transport_retries: int = 8,
                 base_delay: float = 1.0, max_delay: float = 60.0, sleep: Callable[[float], None] = time.sleep,
                 policy: RetryPolicy | None = None):
        self.client, self.api = client, api
        self.concurrency = max(1, int(concurrency))
        self.policy = policy or RetryPolicy(max_tries=max_transport_retries + 1, base_delay=base_delay,
                                            max_delay=max_delay, sleep=sleep)
        self.sent = 0                 # HTTP requests actually sent (incl. transport retries)
        self._lock = threading.Lock()

    @property
    def waits(self) -> list[float]:
        """Every back-off delay, for reporting and tests."""
        return self.policy.waits

    def _call(self, body: dict) -> Any:
        from .openai import call

        return call(self.client, self.api, body)

    def _parse(self, resp: Any) -> Outcome:
        return parse_body(resp, self.api)

    def _counted(self, body: dict) -> Any:
        with self._lock:
            self.sent += 1
        return self._call(body)

    def send(self, body: dict) -> Outcome:
        try:
            resp = self.policy.call(lambda: self._counted(body), f"{self.name} request")
        except TransientExhausted as exc:
            return Outcome(False, reason="api_error", detail=str(exc)[:500])
        except PermanentAPIError as exc:
            if exc.status in (401, 403) or (exc.status == 400 and "api key" in str(exc).lower()):
                # a rejected key: every later request would fail the same way (one short block, benchmaker.errors)
                from ..errors import key_rejected

                # the provider's words only: the hint for its status (a 400 reads "malformed or too
                # large") would contradict the key message
                raise key_rejected(self.name, exc.status, exc.detail) from exc
            return Outcome(False, reason="api_error", detail=str(exc)[:500])
        return self._parse(resp)

    def map(self, jobs: Iterable[T], render: Callable[[T], dict | Outcome]) -> Iterator[tuple[T, Outcome]]:
        """Send ``render(job)`` for every job with bounded concurrency; yields (job, outcome) as done.
        ``render`` may return an :class:`Outcome` instead of a body: the job's answer is known
        without sending anything (another job paid for the same bytes)."""

        def one(job: T) -> tuple[T, Outcome]:
            try:
                body = render(job)
            except Exception as exc:  # an unreadable image: a loss, not a crash
                return job, Outcome(False, reason="bad_input", detail=f"{type(exc).__name__}: {exc}")
            if isinstance(body, Outcome):
                return job, body
            return job, self.send(body)

        jobs = list(jobs)
        if self.concurrency == 1 or len(jobs) <= 1:
            for j in jobs:
                yield one(j)
            return
        from concurrent.futures import FIRST_COMPLETED, wait

        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="llm") as ex:
            # at most ``concurrency`` requests in flight plus as many queued (not sent, so not paid);
            # every finished request is handed over at once, in the order they finish, so the caller
            # records its cost and caches its answer before anything else is waited for: a kill loses
            # at most the requests in flight
            window = self.concurrency * 2
            it = iter(jobs)
            futures: set = set()
            for j in it:
                futures.add(ex.submit(one, j))
                if len(futures) >= window:
                    break
            while futures:
                done, futures = wait(futures, return_when=FIRST_COMPLETED)
                for f in done:
                    yield f.result()
                for j in it:
                    futures.add(ex.submit(one, j))
                    if len(futures) >= window:
                        break

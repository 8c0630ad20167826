"""One retry policy for every provider API call: create, upload, poll, list, download, cancel, sync.

A call that fails with a *transient* error (HTTP 408 / 409 / 429 / 5xx, a timeout, a reset or
refused connection) is tried again after a back-off: the server's ``Retry-After`` /
``retry-after-ms`` header (or Gemini's ``RetryInfo.retryDelay``) when it gives one, else exponential
back-off with full jitter (``base_delay * 2**n``, capped at ``max_delay``, times a random factor in
[0.5, 1)). Tries stop when ``max_tries`` is reached or the next wait would pass ``budget_seconds``
(the total time one call may spend waiting); the call then raises :class:`TransientExhausted`, whose
message says that nothing was lost and the workflow can simply be run again. Anything else (a 400, a
401, a 404, …) is *permanent* and raises :class:`PermanentAPIError` at once, with what to do.

Config (``llm_common`` / per adapter): ``retry_max_tries`` (default 10), ``retry_base_delay``
(1 s), ``retry_max_delay`` (60 s), ``retry_budget_seconds`` (900 s).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..logs import get_logger
from ..settings_schema import LLM, default, filled

__all__ = [
    "PermanentAPIError",
    "RetryPolicy",
    "TransientExhausted",
    "classify",
    "retry_after_seconds",
    "status_of",
]

log = get_logger("providers.retry")
T = TypeVar("T")
TRANSIENT_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 520, 522, 524, 529})


class TransientExhausted(RuntimeError):
    """A call kept failing transiently for longer than the retry budget."""


class PermanentAPIError(RuntimeError):
    """The provider refused a call in a way that trying again will not change."""

    def __init__(self, message: str, status: int | None = None, detail: str | None = None):
        super().__init__(message)
        self.status = status
        self.detail = message if detail is None else detail   # the provider's own message, without our hint


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date)."""
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


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an SDK error (openai ``status_code``, google-genai ``code``), if any."""
    for attr in ("status_code", "code"):
        v = getattr(exc, attr, None)
        if isinstance(v, int):
            return v
    resp = getattr(exc, "response", None)
    v = getattr(resp, "status_code", None)
    return v if isinstance(v, int) else None


def _retry_info(exc: BaseException) -> float | None:
    """Retry-After of the error's response, else a ``google.rpc.RetryInfo`` delay in its body."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is not None:
        try:
            d = retry_after_seconds({k: headers.get(k) for k in ("retry-after", "retry-after-ms") if headers.get(k)})
        except Exception:  # noqa: BLE001 - odd header objects
            d = None
        if d is not None:
            return d
    body = getattr(exc, "details", None) or getattr(exc, "body", None) or {}
    err = body.get("error", body) if isinstance(body, dict) else {}
    for det in (err.get("details") or []) if isinstance(err, dict) else []:
        if isinstance(det, dict) and str(det.get("@type", "")).endswith("RetryInfo"):
            m = re.fullmatch(r"\s*([0-9.]+)s\s*", str(det.get("retryDelay") or ""))
            if m:
                return float(m.group(1))
    return None


def _network_errors() -> tuple[type, ...]:
    out: list[type] = [ConnectionError, TimeoutError]
    for mod, names in (("httpx2", ("TransportError",)), ("httpx", ("TransportError",)),
                       ("openai", ("APIConnectionError", "APITimeoutError")),
                       ("requests", ("ConnectionError", "Timeout"))):
        try:
            m = __import__(mod)
        except ImportError:
            continue
        out += [getattr(m, n) for n in names if hasattr(m, n)]
    return tuple(out)


_NET: tuple[type, ...] | None = None


def classify(exc: BaseException) -> tuple[bool, float | None]:
    """(transient?, server-requested delay in seconds) of an exception raised by an API call."""
    global _NET
    if _NET is None:
        _NET = _network_errors()
    status = status_of(exc)
    if status is not None:
        return status in TRANSIENT_STATUS or status >= 500, _retry_info(exc)
    if isinstance(exc, _NET):
        return True, None
    return False, None


def _hint(status: int | None) -> str:
    if status in (401, 403):
        return ("the provider rejected the API key or its permissions: check the key in the environment "
                "variable named by vision.<adapter>.api_key_env / judge.<adapter>.api_key_env (default OPENAI_API_KEY, "
                "GEMINI_API_KEY), and that the account may use this model and API; nothing was paid for the "
                "rejected call. Rerun the same command once the key is fixed")
    if status == 404:
        return ("the provider does not know this object or model: check model / base_url; a batch or file "
                "that no longer exists is resubmitted after deleting the stage's state dir under .batches/")
    if status in (400, 413, 422):
        return ("the provider rejected the request as malformed or too large: check model, api, "
                "max_output_tokens, image_max_side and max_bytes_per_batch in the config")
    return "see the provider's message above; fix the cause and run the workflow again (answers so far are kept)"


@dataclass
class RetryPolicy:
    # the defaults are llm_common's retry_* settings (config/schema.yaml)
    max_tries: int = default(f"{LLM}.retry_max_tries")
    base_delay: float = float(default(f"{LLM}.retry_base_delay"))
    max_delay: float = float(default(f"{LLM}.retry_max_delay"))
    budget_seconds: float = float(default(f"{LLM}.retry_budget_seconds"))
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    waits: list = field(default_factory=list, repr=False)          # every wait, for reports and tests

    @classmethod
    def from_settings(cls, s: Mapping[str, Any] | None, **kw: Any) -> RetryPolicy:
        s = filled(LLM, s)
        return cls(max_tries=int(s["retry_max_tries"]), base_delay=float(s["retry_base_delay"]),
                   max_delay=float(s["retry_max_delay"]), budget_seconds=float(s["retry_budget_seconds"]), **kw)

    def delay(self, n: int, requested: float | None) -> float:
        if requested is not None:
            return min(requested, max(self.max_delay * 5, self.max_delay))
        return min(self.max_delay, self.base_delay * (2 ** n)) * (0.5 + random.random() / 2)

    def call(self, fn: Callable[[], T], what: str, *, on_retry: Callable[[BaseException], Any] | None = None) -> T:
        """``fn()``, tried again on transient errors within the budget. ``on_retry(exc)`` runs before
        each new try (e.g. to look up whether a create went through despite the error); a non-None
        result of it is returned instead of calling ``fn`` again."""
        waited = 0.0
        n = 0
        while True:
            try:
                return fn()
            except PermanentAPIError:
                raise
            except Exception as exc:
                transient, requested = classify(exc)
                status = status_of(exc)
                msg = str(getattr(exc, "message", "") or exc)[:300]
                if not transient:
                    if status is None:
                        raise
                    raise PermanentAPIError(f"{what}: HTTP {status}: {msg}. What to do: {_hint(status)}",
                                            status, msg) from exc
                d = self.delay(n, requested)
                n += 1
                if n >= self.max_tries or waited + d > self.budget_seconds:
                    raise TransientExhausted(
                        f"{what}: still failing after {n} tries over {waited:.0f} s "
                        f"({type(exc).__name__}{f' HTTP {status}' if status else ''}: {msg}). Nothing is lost: "
                        "run the workflow again later (answers and batches so far are kept), or raise "
                        "retry_budget_seconds / retry_max_tries") from exc
                log.info("%s: %s%s; retrying in %.2f s (try %d)", what, type(exc).__name__,
                         f" HTTP {status}" if status else "", d, n + 1)
                self.waits.append(d)
                self.sleep(d)
                waited += d
                if on_retry is not None:
                    try:
                        got = on_retry(exc)
                    except Exception as exc2:  # noqa: BLE001 - the look-up is best effort; the next try decides
                        log.info("%s: look-up before the next try failed: %s", what, type(exc2).__name__)
                        got = None
                    if got is not None:
                        return got

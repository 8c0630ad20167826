"""Gemini sync transport (one ``generate_content`` per request, through the shared retry policy)
and the runner (client, key, prices, rendering; sync or batch)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

from ...logs import get_logger
from ...losses import Losses
from ...settings_schema import LLM, default, filled
from ..cost import Price, Usage
from ..engine import Item, Runner
from ..parse import Outcome
from ..transport import SyncTransport
from .client import LONG_CONTEXT_PRICES, LONG_CONTEXT_TOKENS, _lookup, gemini_price, gemini_settings, make_client
from .wire import gemini_request_key, parse_response, render_request, request_to_sdk, response_dict

log = get_logger("providers.gemini")


# -- sync transport -----------------------------------------------------------------------------------
class GeminiTransport(SyncTransport):
    """:class:`SyncTransport` (thread pool, back-off, counters) sending ``generate_content`` calls."""

    name = "gemini"

    def __init__(self, client: Any = None, *, client_factory: Any = None,
                 concurrency: int = default(f"{LLM}.concurrency"), **kw: Any):
        super().__init__(client, "gemini", concurrency=concurrency, **kw)
        self._factory = client_factory

    def _get_client(self):
        with self._lock:
            if self.client is None:
                self.client = self._factory()
            return self.client

    def _call(self, body: dict) -> Any:
        req = request_to_sdk(body)
        return self._get_client().models.generate_content(
            model=req["model"], contents=req["contents"],
            config={**req["config"], "automatic_function_calling": {"disable": True}})

    def _parse(self, resp: Any) -> Outcome:
        return parse_response(response_dict(resp))


# -- the runner ---------------------------------------------------------------------------------------
class GeminiRunner(Runner):
    """:class:`Runner` with Gemini's client, request rendering, cache key, prices and batch jobs."""

    def __init__(self, *, stage: str, item_type: str, settings: Mapping[str, Any], cache_dir: str | None,
                 client: Any = None):
        s = gemini_settings(filled(LLM, settings))
        price = gemini_price(s["model"], s.get("prices") or {})
        # hand the shared runner a known price so that it neither warns nor looks in OpenAI's table
        shared = {**s, "prices": {"input": price.input, "cached_input": price.cached_input,
                                  "output": price.output}} if price.known else s
        super().__init__(stage=stage, item_type=item_type, settings=shared, cache_dir=cache_dir, client=client)
        self.settings = s
        self.price = price
        self.long_price = (gemini_price(s["model"], s.get("prices") or {}, long_context=True)
                           if not s.get("prices") and _lookup(LONG_CONTEXT_PRICES, s["model"]) else None)
        self.cache_dir = cache_dir
        if not price.known:
            log.warning("%s: no price known for Gemini model %r and no `prices` configured; costs are reported "
                        "as 0", stage, s["model"])

    def make_client(self):
        return make_client(self.settings)

    def batch_backend(self):
        if getattr(self, "_backend", None) is None:
            from .backend import GeminiBatchBackend

            self._backend = GeminiBatchBackend(self)
        return self._backend

    def request_key(self, spec) -> str:
        return gemini_request_key(spec, self.llm)

    def render(self, item: Item) -> dict:
        return render_request(item.spec, self.llm)

    def price_of(self, usage: Usage) -> Price:
        if self.long_price is not None and usage.input_tokens > LONG_CONTEXT_TOKENS:
            return self.long_price
        return self.price

    def settle(self, item: Item, outcome: Outcome, *, attempt: int, mode: str, **kw: Any) -> dict | None:
        base = self.price
        self.price = self.price_of(outcome.usage)     # settle runs on the calling thread only
        try:
            return super().settle(item, outcome, attempt=attempt, mode=mode, **kw)
        finally:
            self.price = base

    def run_sync(self, items: Iterable[Item], losses: Losses, *, transport=None) -> dict[str, dict]:
        if transport is None:
            # the client (and so the key) is only needed when something is actually sent
            transport = GeminiTransport(self._client, client_factory=lambda: self.client,
                                        concurrency=int(self.settings["concurrency"]), policy=self.policy)
        return super().run_sync(items, losses, transport=transport)

    # -- batch mode -------------------------------------------------------------------------------
    def run(self, items: list[Item], losses: Losses) -> dict[str, dict]:
        """``mode: batch`` (default) or ``mode: sync``, as configured."""
        if self.settings["mode"] == "batch":
            return self.run_batch(items, losses, wait=bool(self.settings["wait"]),
                                  poll_seconds=float(self.settings["poll_seconds"]))
        return self.run_sync(items, losses)

    def run_batch(self, items: Iterable[Item], losses: Losses, *, state_dir: str | None = None,
                  wait: bool = default(f"{LLM}.wait"),
                  poll_seconds: float = default(f"{LLM}.poll_seconds")) -> dict[str, dict]:
        """The shared build -> submit -> collect (:func:`benchmaker.providers.batch.run_batch`) in one
        call, with state under ``<cache_dir>/gemini-batches``; returns item_id -> answer."""
        from ..batch import run_batch

        if state_dir is None:
            if self.cache_dir:
                state_dir = str(Path(self.cache_dir) / "gemini-batches")
            else:
                state_dir = tempfile.mkdtemp(prefix="bm-gemini-batches-")
                log.warning("%s: batch mode without a cache dir: batch state in %s, an interrupted run cannot "
                            "resume", self.stage, state_dir)
        return run_batch(self, list(items), losses, state_dir=state_dir, wait=wait, poll_seconds=poll_seconds)

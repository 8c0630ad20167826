"""What every LLM adapter shares: cache look-up, attempts, validation, losses and cost rows.

An adapter turns its rows into :class:`Item` (an id, a :class:`RequestSpec`, an optional extra
check of the answer). :class:`Runner` then serves what the cache already has, sends the rest (sync
here; batch in :mod:`benchmaker.providers.batch`), validates every answer against the request's
schema and the adapter's check, retries the failures only (new requests) up to ``max_attempts``,
and records each paid request in ``cost_rows`` and each final failure in the losses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from ..logs import get_logger, progress
from ..losses import Losses
from ..settings_schema import LLM, filled
from .cache import ResponseCache
from .cost import Price, cost_row, price_for
from .parse import Outcome, validate_answer
from .spec import LLMSettings, RequestSpec, render_body, request_key

__all__ = ["Item", "Runner"]

log = get_logger("providers")


@dataclass
class Item:
    item_id: str
    spec: RequestSpec
    check: Callable[[dict], str | None] | None = None
    key: str = ""
    wire: str = ""          # the key of the bytes actually sent (providers/claims.py), once rendered


class Runner:
    def __init__(self, *, stage: str, item_type: str, settings: Mapping[str, Any], cache_dir: str | None,
                 client: Any = None):
        self.stage, self.item_type = stage, item_type
        self.settings = filled(LLM, settings)    # the schema's defaults for what a caller left out
        self.llm = LLMSettings.from_config(self.settings)
        self.cache = ResponseCache(cache_dir)
        self.price: Price = price_for(self.llm.model, self.settings.get("prices") or {})
        self.batch_discount = float(self.settings["batch_discount"])
        self.max_attempts = int(self.settings["max_attempts"])
        self._client = client
        self.policy = self.retry_policy()
        self.cost_rows: list[dict] = []
        # streaming: when set, cost rows go to this callable instead of ``cost_rows`` (flat memory)
        self.cost_sink: Callable[[dict], None] | None = None
        # crash safety: when set, each paid row is appended here as it arrives (see providers/ledger.py)
        # and only the rows answered from the cache go to ``cost_rows`` / ``cost_sink``
        self.ledger = None
        self.cost_total = 0.0
        self.cost_count = 0
        self.sent = 0
        if not self.price.known:
            log.warning("%s: no price known for model %r and no `prices` configured; costs are reported as 0",
                        stage, self.llm.model)

    # -- pieces shared with batch mode -------------------------------------------------------
    # provider hooks: each provider's subclass (providers/openai/runner.py, providers/gemini/runner.py)
    # overrides these two and inherits the rest; providers/runners.py picks the subclass
    def make_client(self):
        raise NotImplementedError(f"{type(self).__name__}: a provider runner makes its client "
                                  "(benchmaker.providers.runners.provider_runner)")

    def batch_backend(self):
        """This provider's Batch API (:class:`~benchmaker.providers.backend.BatchBackend`)."""
        raise NotImplementedError(f"{type(self).__name__}: a provider runner has the Batch API "
                                  "(benchmaker.providers.runners.provider_runner)")

    def retry_policy(self):
        """The one retry policy of every API call of this runner (settings ``retry_*``)."""
        from .retry import RetryPolicy

        return RetryPolicy.from_settings(self.settings)

    def request_key(self, spec) -> str:
        return request_key(spec, self.llm)

    @property
    def client(self):
        if self._client is None:
            self._client = self.make_client()
        return self._client

    def keyed(self, items: Iterable[Item]) -> list[Item]:
        out = []
        for it in items:
            it.key = it.key or self.request_key(it.spec)
            out.append(it)
        return out

    def from_cache(self, item: Item, mode: str) -> dict | None:
        rec = self.cache.get(item.key)
        if rec is None:
            return None
        obj = rec.get("answer")
        if not isinstance(obj, dict) or validate_answer(obj, item.spec.schema, item.check) is not None:
            return None
        self._cost(cost_row(stage=self.stage, item_id=item.item_id, model=self.llm.model, mode=mode,
                            usage=_usage(rec), price=self.price, batch_discount=self.batch_discount,
                            attempt=0, cached=True))
        return obj

    def _cost(self, row: dict, rid: str | None = None, *, record: bool = True) -> None:
        """Account for one cost row; ``rid`` names what was paid for (a batch row's batch and custom
        id); ``record=False``: already in the ledger (a batch re-read after an interruption)."""
        self.cost_total += row["cost_usd"]
        self.cost_count += not row["cached"]
        if self.ledger is not None and not row["cached"]:
            if record:
                self.ledger.append(row, rid)
            return
        if self.cost_sink is not None:
            self.cost_sink(row)
        else:
            self.cost_rows.append(row)

    def settle(self, item: Item, outcome: Outcome, *, attempt: int, mode: str, rid: str | None = None,
               record: bool = True) -> dict | None:
        """The one place an answer is accepted: record its cost (before anything else), validate it,
        cache it if good; returns the answer or None."""
        if outcome.paid:
            self._cost(cost_row(stage=self.stage, item_id=item.item_id, model=self.llm.model, mode=mode,
                                usage=outcome.usage, price=self.price, batch_discount=self.batch_discount,
                                attempt=attempt), rid, record=record)
        return self.accept(item, outcome)

    def accept(self, item: Item, outcome: Outcome) -> dict | None:
        """Validate an answer and cache it if good (under the item's key and its request bytes'),
        recording no cost: :meth:`settle` without the bill (a batch row another shard paid for, read
        by a collect that takes its work over, providers/batch_wait.py)."""
        if not outcome.ok:
            return None
        problem = validate_answer(outcome.obj, item.spec.schema, item.check)
        if problem is not None:
            outcome.ok, outcome.reason, outcome.detail = False, "schema_violation", problem
            return None
        u = outcome.usage
        rec = {"answer": outcome.obj, "model": self.llm.model, "usage": {
            "input_tokens": u.input_tokens, "cached_input_tokens": u.cached_input_tokens,
            "output_tokens": u.output_tokens, "reasoning_tokens": u.reasoning_tokens}}
        self.cache.put(item.key, rec)
        if item.wire and item.wire != item.key:   # the same bytes sent by another item / job find it too
            self.put_wire(item.wire, item.key)
        return outcome.obj

    def put_wire(self, wire: str, key: str) -> None:
        """Record that the answer to the request bytes ``wire`` is the cache entry ``key``: a reference
        (``{"ref": key}``), not a second copy of the answer, written right after the entry itself.
        Inside the cache's bulk block (batch collect) it is appended to the same pack segment as the
        answer (published with it: no file per answer); otherwise (sync mode: each answer durable at
        once) it is a small loose file in ``<cache>/wire/``, beside the answers' own files."""
        if self.cache.dir is None:
            return
        if self.cache.in_bulk:
            self.cache.put(wire, {"ref": key})
        else:
            self.wire_cache.put(wire, {"ref": key})

    def wire_record(self, wire: str, *, fresh: bool = False) -> dict | None:
        """The cache record of the answer to the request bytes ``wire`` (paid by any job): through a
        reference in the main cache (pack segments) or in ``<cache>/wire/``; a full copy there (what
        caches written before references held) is used as it is. None: no answer (or a reference
        whose entry is gone). ``fresh``: see segments another job published a moment ago (the check
        after winning a claim, :meth:`ResponseCache.get`)."""
        if not wire or self.cache.dir is None:
            return None
        rec = self.cache.get(wire, fresh=fresh)
        if rec is None:
            rec = self.wire_cache.get(wire)
        if rec is not None and "answer" not in rec and isinstance(rec.get("ref"), str):
            rec = self.cache.get(rec["ref"], fresh=fresh)
        return rec if rec is not None and "answer" in rec else None

    @property
    def wire_cache(self) -> ResponseCache:
        """Sync mode's references by the bytes actually sent (``<cache>/wire/``, providers/claims.py),
        beside the content-keyed cache (see :meth:`put_wire`)."""
        if getattr(self, "_wire_cache", None) is None:
            self._wire_cache = ResponseCache(self.cache.dir / "wire" if self.cache.dir is not None else None)
        return self._wire_cache

    def _wire_answer(self, item: Item, *, fresh: bool = False) -> dict | None:
        """A valid cached answer to the very bytes of ``item``'s request (paid by another job)."""
        rec = self.wire_record(item.wire, fresh=fresh) if item.wire else None
        obj = rec.get("answer") if rec else None
        if not isinstance(obj, dict) or validate_answer(obj, item.spec.schema, item.check) is not None:
            return None
        return obj

    def _claimed_render(self, claims):
        """``render`` for the sync transport: each distinct request body is sent by one job only
        (providers/claims.py); an item whose bytes another job answers (or is answering) gets that
        answer as an unpaid :class:`Outcome` (``reason`` "shared")."""

        def render(item: Item) -> dict | Outcome:
            from .claims import wire_key

            body = self.render(item)
            item.wire = wire_key(body)
            obj = self._wire_answer(item)
            if obj is None:
                if not claims.claim(item.wire):
                    obj = claims.wait(item.wire, lambda: self._wire_answer(item, fresh=True))
                elif (obj := self._wire_answer(item, fresh=True)) is not None:
                    claims.release(item.wire)       # answered (and released) just before our claim
            if obj is not None:
                return Outcome(True, obj=obj, reason="shared")
            return body

        return render

    def render(self, item: Item) -> dict:
        return render_body(item.spec, self.llm)

    # -- sync mode ---------------------------------------------------------------------------
    def run_sync(self, items: Iterable[Item], losses: Losses, *, transport=None) -> dict[str, dict]:
        """Answer every item; each distinct request content (cache key) is sent at most once and its
        answer handed to every item that shares it (its cost is recorded once, on the first)."""
        items = self.keyed(items)
        results: dict[str, dict] = {}
        pending: list[Item] = []
        same: dict[str, list[Item]] = {}       # content key -> later items with that content
        for it in items:
            if it.key in same:
                same[it.key].append(it)
                continue
            obj = self.from_cache(it, "sync")
            if obj is not None:
                results[it.item_id] = obj
            else:
                same[it.key] = []
                pending.append(it)
        n_dup = sum(len(v) for v in same.values())
        log.info("%s: %d items, %d from cache, %d to send (%d more share their content)", self.stage, len(items),
                 len(results), len(pending), n_dup)
        if not pending:
            return results
        if transport is None:
            from .transport import SyncTransport

            transport = SyncTransport(self.client, self.llm.api, concurrency=int(self.settings["concurrency"]),
                                      policy=self.policy)
        from .claims import Claims

        claims = Claims(self.cache.dir)
        try:
            self._send_sync(pending, same, results, losses, transport, claims, items)
        finally:
            claims.release_all()
        if claims.waited:
            log.info("%s: %d request(s) answered by another job that sent the same bytes", self.stage,
                     claims.waited)
        return results

    def _send_sync(self, pending, same, results, losses, transport, claims, items) -> None:
        last: dict[str, Outcome] = {}
        attempts_of: dict[str, int] = {}
        render = self._claimed_render(claims)
        for attempt in range(1, self.max_attempts + 1):
            if not pending:
                break
            failed: list[Item] = []
            bar = progress(total=len(pending), desc=f"{self.stage} attempt {attempt}", unit="req")
            for it, outcome in transport.map(pending, render):
                bar.update(1)
                attempts_of[it.item_id] = attempt
                if outcome.reason == "shared":      # another job paid for these bytes: as from the cache
                    self._cost(cost_row(stage=self.stage, item_id=it.item_id, model=self.llm.model, mode="sync",
                                        usage=outcome.usage, price=self.price, batch_discount=self.batch_discount,
                                        attempt=0, cached=True))
                    outcome.reason = None
                obj = self.settle(it, outcome, attempt=attempt, mode="sync")
                claims.release(it.wire)
                if obj is None:
                    last[it.item_id] = outcome
                    if outcome.reason != "bad_input":
                        failed.append(it)
                else:
                    results[it.item_id] = obj
                    for other in same.get(it.key, ()):
                        results[other.item_id] = obj
            bar.close()
            if failed:
                log.info("%s: attempt %d: %d failed (%s)", self.stage, attempt, len(failed),
                         _reason_counts(last, failed))
            pending = failed
        self.sent += transport.sent
        by_id = {it.item_id: it for it in items}
        for item_id, oc in last.items():
            if item_id in results:
                continue
            for it in (by_id[item_id], *same.get(by_id[item_id].key, ())):
                losses.add(self.item_type, it.item_id, oc.reason or "api_error", oc.detail,
                           attempts=attempts_of.get(item_id, 1))


def _usage(rec: dict):
    from .cost import Usage

    u = rec.get("usage") or {}
    return Usage(int(u.get("input_tokens", 0)), int(u.get("cached_input_tokens", 0)),
                 int(u.get("output_tokens", 0)), int(u.get("reasoning_tokens", 0)))


def _reason_counts(last: dict[str, Outcome], failed: list[Item]) -> str:
    from collections import Counter

    c = Counter(last[it.item_id].reason for it in failed)
    return ", ".join(f"{k}: {v}" for k, v in c.most_common())

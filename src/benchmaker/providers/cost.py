"""Cost from actual usage: input, cached input, output and reasoning tokens times a price table.

Prices are USD per million tokens at standard (synchronous) rates; batch requests get
``batch_discount`` (0.5 at OpenAI). Reasoning tokens are billed as output tokens and are already
included in ``output_tokens`` by the API; they are reported separately, never added twice.
A model is matched exactly, or as a dated snapshot (``gpt-5-mini-2025-08-07`` -> ``gpt-5-mini``);
never by a looser prefix, which would price ``gpt-5.4`` or ``o3-pro`` as ``gpt-5`` or ``o3``. Config
``prices`` overrides the table for the configured model. An unknown model without configured prices
costs 0 and is reported as such, with a warning (a self-hosted server, usually).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from ..settings_schema import LLM, default

__all__ = ["PRICES", "PRICES_DATE", "Usage", "Price", "price_for", "cost_usd", "usage_from_body", "cost_row"]

# USD per 1M tokens: (input, cached input, output), Standard tier, short context, as listed on
# OpenAI's pricing page (https://platform.openai.com/docs/pricing) in June 2026 (PRICES_DATE). Batch is
# half of this (batch_discount). Models without a cached-input discount (the *-pro models) list the
# input price as their cached price. Prices change: override them with `prices` in the config.
PRICES_DATE = "2026-06"
PRICES: dict[str, tuple[float, float, float]] = {
    "gpt-5.5": (5.00, 0.50, 30.00),
    "gpt-5.5-pro": (30.00, 30.00, 180.00),
    "gpt-5.4": (2.50, 0.25, 15.00),
    "gpt-5.4-mini": (0.75, 0.075, 4.50),
    "gpt-5.4-nano": (0.20, 0.02, 1.25),
    "gpt-5.4-pro": (30.00, 30.00, 180.00),
    "gpt-5.2": (1.75, 0.175, 14.00),
    "gpt-5.2-pro": (21.00, 21.00, 168.00),
    "gpt-5.1": (1.25, 0.125, 10.00),
    "gpt-5": (1.25, 0.125, 10.00),
    "gpt-5-mini": (0.25, 0.025, 2.00),
    "gpt-5-nano": (0.05, 0.005, 0.40),
    "gpt-5-pro": (15.00, 15.00, 120.00),
    "gpt-4.1": (2.00, 0.50, 8.00),
    "gpt-4.1-mini": (0.40, 0.10, 1.60),
    "gpt-4.1-nano": (0.10, 0.025, 0.40),
    "gpt-4o": (2.50, 1.25, 10.00),
    "gpt-4o-mini": (0.15, 0.075, 0.60),
    "o3": (2.00, 0.50, 8.00),
    "o3-pro": (20.00, 20.00, 80.00),
    "o3-mini": (1.10, 0.55, 4.40),
    "o4-mini": (1.10, 0.275, 4.40),
    "o1": (15.00, 7.50, 60.00),
}
# a dated snapshot of a listed model costs what the model costs: gpt-5-mini-2025-08-07 -> gpt-5-mini
_SNAPSHOT = re.compile(r"^(?P<base>.+?)-(?:\d{4}-\d{2}-\d{2})$")


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.input_tokens + other.input_tokens,
                     self.cached_input_tokens + other.cached_input_tokens,
                     self.output_tokens + other.output_tokens,
                     self.reasoning_tokens + other.reasoning_tokens)


@dataclass(frozen=True)
class Price:
    input: float
    cached_input: float
    output: float
    known: bool = True


def price_for(model: str, overrides: Mapping[str, float] | None = None) -> Price:
    """The price of ``model``: config overrides win, then the exact name, then the name of a dated
    snapshot (``<model>-YYYY-MM-DD``). Anything else (a variant such as ``gpt-5.4-mini`` when only
    ``gpt-5.4`` were listed, or a self-hosted model) is unknown: never priced as a lookalike."""
    base: tuple[float, float, float] | None = PRICES.get(model)
    if base is None:
        m = _SNAPSHOT.match(model)
        if m:
            base = PRICES.get(m.group("base"))
    ov = dict(overrides or {})
    if base is None and not ov:
        return Price(0.0, 0.0, 0.0, known=False)
    b = base or (0.0, 0.0, 0.0)
    p_in = float(ov.get("input", b[0]))
    p_cached = float(ov.get("cached_input", b[1] if base else p_in))
    return Price(p_in, p_cached, float(ov.get("output", b[2])))


def cost_usd(usage: Usage, price: Price, *, batch: bool = False,
             batch_discount: float = default(f"{LLM}.batch_discount")) -> float:
    cached = min(usage.cached_input_tokens, usage.input_tokens)
    uncached = usage.input_tokens - cached
    usd = (uncached * price.input + cached * price.cached_input + usage.output_tokens * price.output) / 1e6
    if batch:
        usd *= (1.0 - batch_discount)
    return usd


def _int(x: Any) -> int:
    try:
        return int(x or 0)
    except (TypeError, ValueError):
        return 0


def usage_from_body(body: Mapping[str, Any] | None) -> Usage:
    """Usage of one Responses-API or Chat-Completions response body (either naming)."""
    u = (body or {}).get("usage") or {}
    if not u:
        return Usage()
    inp = _int(u.get("input_tokens", u.get("prompt_tokens")))
    out = _int(u.get("output_tokens", u.get("completion_tokens")))
    in_det = u.get("input_tokens_details") or u.get("prompt_tokens_details") or {}
    out_det = u.get("output_tokens_details") or u.get("completion_tokens_details") or {}
    return Usage(inp, _int(in_det.get("cached_tokens")), out, _int(out_det.get("reasoning_tokens")))


def cost_row(*, stage: str, item_id: str, model: str, mode: str, usage: Usage, price: Price,
             batch_discount: float, attempt: int, cached: bool = False) -> dict:
    usd = 0.0 if cached else cost_usd(usage, price, batch=(mode == "batch"), batch_discount=batch_discount)
    return {
        "stage": stage, "item_id": item_id, "model": model, "mode": mode,
        "input_tokens": 0 if cached else usage.input_tokens,
        "cached_input_tokens": 0 if cached else usage.cached_input_tokens,
        "output_tokens": 0 if cached else usage.output_tokens,
        "reasoning_tokens": 0 if cached else usage.reasoning_tokens,
        "cost_usd": round(usd, 10), "attempt": int(attempt), "cached": bool(cached),
    }

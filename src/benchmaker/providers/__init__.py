"""What the LLM providers share: request specs and cache keys, the response cache, cost from usage,
sync transport with retries, answer parsing and validation, and the Batch API state machine.

Provider specifics live in one module each (:mod:`benchmaker.providers.openai`).

The names below are imported from their modules on first use (PEP 562), so that importing one
submodule (``providers.records`` to write a stage's empty cost file, as the CLIP vision job does)
does not import the request engine, the response cache and the price tables.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_HOMES = {"cache": ("ResponseCache", "content_key"),
          "cost": ("PRICES", "Price", "Usage", "cost_usd", "price_for", "usage_from_body"),
          "engine": ("Item", "Runner"),
          "spec": ("ImageRef", "LLMSettings", "RequestSpec", "Text", "render_body", "request_key")}
_HOME = {name: module for module, names in _HOMES.items() for name in names}

__all__ = ["ResponseCache", "content_key", "PRICES", "Price", "Usage", "cost_usd", "price_for", "usage_from_body",
           "Item", "Runner", "ImageRef", "LLMSettings", "RequestSpec", "Text", "render_body", "request_key"]

if TYPE_CHECKING:
    from .cache import ResponseCache, content_key
    from .cost import PRICES, Price, Usage, cost_usd, price_for, usage_from_body
    from .engine import Item, Runner
    from .spec import ImageRef, LLMSettings, RequestSpec, Text, render_body, request_key


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value
    return value

"""What the LLM providers share: request specs and cache keys, the response cache, cost from usage,
sync transport with retries, answer parsing and validation, and the Batch API state machine.

Provider specifics live in one module each (:mod:`benchmaker.providers.openai`).
"""

from .cache import ResponseCache, content_key
from .cost import PRICES, Price, Usage, cost_usd, price_for, usage_from_body
from .engine import Item, Runner
from .spec import ImageRef, LLMSettings, RequestSpec, Text, render_body, request_key

__all__ = ["ResponseCache", "content_key", "PRICES", "Price", "Usage", "cost_usd", "price_for", "usage_from_body",
           "Item", "Runner", "ImageRef", "LLMSettings", "RequestSpec", "Text", "render_body", "request_key"]

"""The runner of each API adapter: the one place that knows every provider (the engine knows none,
so no provider module imports a module that imports it back)."""

from __future__ import annotations

from typing import Any

from .engine import Runner

__all__ = ["provider_runner", "PROVIDERS"]

PROVIDERS = ("openai", "gemini")


def provider_runner(adapter: str, **kw: Any) -> Runner:
    """The runner of an API adapter (``openai`` or ``gemini``): the same batch rules serve both."""
    if adapter == "gemini":
        from .gemini import GeminiRunner

        return GeminiRunner(**kw)
    if adapter != "openai":
        raise ValueError(f"adapter {adapter!r} has no Batch API runner ({', '.join(PROVIDERS)})")
    from .openai.runner import OpenAIRunner

    return OpenAIRunner(**kw)

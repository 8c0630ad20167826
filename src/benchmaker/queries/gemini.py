"""The ``gemini`` query writer: the ``openai`` writer's items, checks and batch rules on the Gemini
provider (seeds at ``MEDIA_RESOLUTION_LOW``), sync or batch."""

from __future__ import annotations

from typing import Any

from ..losses import Losses
from ..providers.gemini import GeminiRunner
from .openai import OpenAIWriter

__all__ = ["GeminiWriter"]


class GeminiWriter(OpenAIWriter):
    provider = "gemini"

    def make_runner(self, settings: dict[str, Any], cache_dir: str | None, client: Any):
        return GeminiRunner(stage="queries", item_type="query", settings=settings, cache_dir=cache_dir, client=client)

    def answers(self, items: list, losses: Losses) -> dict[str, dict]:
        return self.runner.run(items, losses)

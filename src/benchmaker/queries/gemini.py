"""The ``gemini`` query writer: the ``openai`` writer's items, checks and batch rules on the Gemini
provider (seeds at ``MEDIA_RESOLUTION_LOW``), sync or batch."""

from __future__ import annotations

from ..losses import Losses
from .openai import OpenAIWriter

__all__ = ["GeminiWriter"]


class GeminiWriter(OpenAIWriter):
    provider = "gemini"

    def answers(self, items: list, losses: Losses) -> dict[str, dict]:
        return self.runner.run(items, losses)

"""The OpenAI runner: the provider engine (benchmaker.providers.engine.Runner) with OpenAI's client
and Batch API (also any OpenAI-compatible server through ``base_url``)."""

from __future__ import annotations

from ..engine import Runner

__all__ = ["OpenAIRunner"]


class OpenAIRunner(Runner):
    def make_client(self):
        from . import make_client

        return make_client(self.settings)

    def batch_backend(self):
        """OpenAI's Batch API (:class:`~benchmaker.providers.backend.BatchBackend`)."""
        if getattr(self, "_backend", None) is None:
            from .backend import OpenAIBatchBackend

            self._backend = OpenAIBatchBackend(self)
        return self._backend

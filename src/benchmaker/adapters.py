"""Adapter registries: an adapter is a class named by ``"module:Class"`` and chosen by config name.

Modules are imported only when their adapter is chosen, so picking ``rules`` never imports openai and
picking ``openai`` never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping

__all__ = ["load_adapter"]


def load_adapter(stage: str, registry: Mapping[str, str], name: str, **kwargs: Any) -> Any:
    """Instantiate adapter ``name`` of ``stage`` from ``registry`` with ``kwargs``."""
    if name not in registry:
        raise ValueError(f"{stage}.adapter: unknown adapter {name!r} (known: {', '.join(registry)})")
    module, _, cls = registry[name].partition(":")
    klass = getattr(importlib.import_module(module), cls)
    return klass(**kwargs)

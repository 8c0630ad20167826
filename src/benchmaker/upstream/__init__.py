"""Migrating from ``imsearch_benchmaker`` (``benchmaker import-upstream``, docs/upstream.md): its
``config.toml`` becomes this project's config (:mod:`.convert`) and its paid-for outputs are imported
(:mod:`.outputs`)."""

from .convert import UPSTREAM_KEYS, ImportReport, convert_config
from .outputs import import_upstream

__all__ = ["import_upstream", "convert_config", "ImportReport", "UPSTREAM_KEYS"]

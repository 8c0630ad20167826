"""Preprocess: scan the image folder, inspect every image, apply the rights map and metadata.

``run(...)`` is the stage entry point (see rules/preprocess.smk and docs/preprocess.md). Modules:
``scan`` (read-only folder walk), ``inspect`` (one file: checks, hashes, quarantine reasons),
``rights`` (rights map), ``metadata`` (metadata.jsonl merge), ``stage`` (orchestration and outputs).
"""

from .inspect import REASONS
from .rights import RightsMap, RightsMapError, load_rights_map
from .stage import inspect_corpus, run

__all__ = ["run", "inspect_corpus", "REASONS", "RightsMap", "RightsMapError", "load_rights_map"]

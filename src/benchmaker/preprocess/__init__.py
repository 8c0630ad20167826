"""Preprocess: scan the image folder, inspect every image, apply the rights map and metadata.

``run(...)`` is the stage entry point (see rules/preprocess.smk and docs/preprocess.md). Modules:
``scan`` (read-only folder walk), ``inspect`` (one file: checks, hashes, quarantine reasons),
``rights`` (rights map), ``metadata`` (metadata.jsonl merge), ``stage`` (orchestration and outputs:
``run`` for a whole folder, ``run_shard`` + ``merge`` for the workflow's per-shard jobs fed by
``listing``, the change-detection listing written when the workflow is parsed).
"""

from .inspect import REASONS
from .rights import RightsMap, RightsMapError, load_rights_map
from .stage import inspect_corpus, merge, run, run_shard

__all__ = ["run", "run_shard", "merge", "inspect_corpus", "REASONS", "RightsMap", "RightsMapError", "load_rights_map"]

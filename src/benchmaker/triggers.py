"""Which settings are rerun triggers: every setting either changes a stage's output bytes (and then
it is a rule param, so Snakemake reruns the rule when it changes, and part of the cache key, so the
rerun recomputes) or it changes only speed or where caches live (and then it is not a trigger).

The runtime keys below reach the stage through a param that Snakemake does not compare (see
``not_a_trigger`` in rules/common.smk); all other keys of the section stay rule params. Used by
rules/common.smk, rules/vision.smk and rules/similarity.smk; nothing here imports torch.

* ``similarity``: model, pretrained, precision, device change embeddings (device and precision are
  part of the numerics in the embedding cache key, ``similarity.model.numerics``), logit_column and
  rank_column change qrels_with_score; batch_size and num_workers do not (every forward pass has
  ``ENCODE_BATCH`` rows whatever the batch size) and cache_dir does not (a cached embedding has the
  same bits as a fresh one).
* ``vision.clip``: the same split; prompt_template and tag_threshold change annotations.
* ``vision.openai`` / ``vision.gemini`` (the single ``vision`` rule, sync mode): concurrency only
  decides how many requests are in flight; the batch-mode keys are unused there. Answers are cached
  by request content, so a rerun pays nothing either way.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

__all__ = ["output_settings", "SIMILARITY_RUNTIME", "CLIP_VISION_RUNTIME", "LLM_SYNC_RUNTIME", "RECORD_DROPS",
           "vision_runtime_keys", "split_runtime", "without_runtime"]

SIMILARITY_RUNTIME = ("batch_size", "num_workers", "cache_dir")
CLIP_VISION_RUNTIME = ("batch_size", "num_workers", "embedding_cache_dir")
LLM_SYNC_RUNTIME = ("concurrency", "poll_seconds", "wait", "completion_window", "max_requests_per_batch",
                    "max_bytes_per_batch")


def vision_runtime_keys(adapter: str) -> tuple[str, ...]:
    """The settings of ``vision.<adapter>`` that the single ``vision`` rule gets outside its params."""
    if adapter == "clip":
        return CLIP_VISION_RUNTIME
    if adapter in ("openai", "gemini"):
        return LLM_SYNC_RUNTIME
    return ()


def split_runtime(section: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[dict, dict]:
    """(settings that change the output, runtime settings) of a config section."""
    return ({k: v for k, v in section.items() if k not in keys},
            {k: v for k, v in section.items() if k in keys})


# left out of the config recorded with the dataset (export's public_config param, config.yaml and the
# card), so that changing them does not rerun export either: they are triggers of no rule
RECORD_DROPS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("similarity",): SIMILARITY_RUNTIME,
    ("vision", "clip"): ("batch_size", "num_workers"),
}


def without_runtime(config: Mapping[str, Any]) -> dict:
    """A deep copy of ``config`` without the ``RECORD_DROPS`` keys."""
    out = copy.deepcopy(dict(config))
    for path, keys in RECORD_DROPS.items():
        node: Any = out
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            for k in keys:
                node.pop(k, None)
    return out


def output_settings(settings: Mapping[str, Any], keys: tuple[str, ...] = LLM_SYNC_RUNTIME) -> dict:
    """``settings`` without the runtime ``keys``, also inside a judge's ``adapter_settings``: the part
    of an API rule's settings that decides its output, given to the rule as its ``triggers`` param
    (trigger-only, never passed to the stage) while the whole settings reach the stage through
    ``not_a_trigger``. So concurrency, polling, waiting and how requests are cut into batches never
    make a collect, submit or judge job out of date (answers are cached by request content)."""
    out = {k: v for k, v in settings.items() if k not in keys}
    if isinstance(out.get("adapter_settings"), Mapping):
        out["adapter_settings"] = {k: v for k, v in out["adapter_settings"].items() if k not in keys}
    return out

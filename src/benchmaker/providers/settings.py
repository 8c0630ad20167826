"""Which LLM settings each batch rule receives (used by rules/vision.smk and rules/judge.smk).

Snakemake reruns a rule when its params change, so each rule gets only the settings that shape its
own output: ``vision_build`` / ``judge_build`` those that shape a request (and its cache key),
``*_submit`` those that shape how batches are created; ``*_collect`` gets everything (it is cheap
to rerun: it re-reads downloaded results and pays nothing).
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["BATCH_ADAPTERS", "REQUEST_KEYS", "BATCH_KEYS", "request_settings", "batch_settings",
           "judge_settings", "is_batch"]

BATCH_ADAPTERS = ("openai", "gemini")   # every provider with a BatchBackend
REQUEST_KEYS = (
    "model", "base_url", "api_key_env", "api", "max_output_tokens", "reasoning_effort", "temperature",
    "prompts", "metadata_columns", "image_detail", "image_transport", "image_max_side", "send_thumbnails",
    "labels", "rationale", "prompt_cache_key",
)
BATCH_KEYS = ("model", "base_url", "api_key_env", "api", "completion_window", "max_requests_per_batch",
              "max_bytes_per_batch")


def _pick(section: Mapping[str, Any], keys: tuple[str, ...] | None) -> dict:
    return dict(section) if keys is None else {k: v for k, v in section.items() if k in keys}


def request_settings(section: Mapping[str, Any]) -> dict:
    return _pick(section, REQUEST_KEYS)


def batch_settings(section: Mapping[str, Any]) -> dict:
    return _pick(section, BATCH_KEYS)


def is_batch(stage_cfg: Mapping[str, Any]) -> bool:
    adapter = stage_cfg["adapter"]
    return adapter in BATCH_ADAPTERS and (stage_cfg.get(adapter) or {}).get("mode") == "batch"


def judge_settings(judge_cfg: Mapping[str, Any], keys: tuple[str, ...] | None = None) -> dict:
    """The judge rule's ``settings`` param: stage-wide keys plus ``adapter_settings`` (judge.<adapter>)."""
    adapter = judge_cfg["adapter"]
    top = {k: v for k, v in judge_cfg.items() if k not in ("rules", "openai", "gemini")}
    return _pick(top, keys) | {"adapter_settings": _pick(judge_cfg.get(adapter) or {}, keys)}

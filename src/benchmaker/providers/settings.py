"""Which LLM settings each batch rule receives (used by rules/vision.smk and rules/judge.smk).

Snakemake reruns a rule when its params change, so each rule gets only the settings that shape its
own output: ``vision_build`` / ``judge_build`` those that shape a request (and its cache key: the
schema marks them ``x-request: true``); ``*_submit`` gets every setting but compares none (how
batches are cut is decided once; the journal never resubmits); ``*_collect`` gets everything and
compares what decides its output (``benchmaker.triggers``: all but the ``x-runtime`` knobs; it is
cheap to rerun: it re-reads downloaded results and pays nothing).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..triggers import schema_at

__all__ = ["BATCH_ADAPTERS", "REQUEST", "request_keys", "request_settings", "judge_settings", "is_batch",
           "query_settings", "LABELLING_ONLY"]

BATCH_ADAPTERS = ("openai", "gemini")   # every provider with a BatchBackend
REQUEST = "x-request"


def request_keys(path: str) -> tuple[str, ...]:
    """The keys of the config section at ``path`` that shape a request (``x-request: true``)."""
    props = schema_at(path).get("properties") or {}
    return tuple(k for k, v in props.items() if v.get(REQUEST))


def _pick(section: Mapping[str, Any], keys: tuple[str, ...] | None) -> dict:
    return dict(section) if keys is None else {k: v for k, v in section.items() if k in keys}


def request_settings(section: Mapping[str, Any], path: str) -> dict:
    """The settings of ``section`` (the LLM config at ``path``, e.g. ``vision.openai``) that shape a request."""
    return _pick(section, request_keys(path))


def is_batch(stage_cfg: Mapping[str, Any]) -> bool:
    adapter = stage_cfg["adapter"]
    return adapter in BATCH_ADAPTERS and stage_cfg[adapter]["mode"] == "batch"


def judge_settings(judge_cfg: Mapping[str, Any], *, requests_only: bool = False) -> dict:
    """The judge rule's ``settings`` param: stage-wide keys plus ``adapter_settings`` (judge.<adapter>);
    with ``requests_only`` only the keys that shape a request (``x-request: true``)."""
    adapter = judge_cfg["adapter"]
    top = {k: v for k, v in judge_cfg.items() if k not in ("rules", "openai", "gemini")}
    adapter_settings = judge_cfg.get(adapter) or {}
    if requests_only:
        return _pick(top, request_keys("judge")) | {"adapter_settings": request_settings(adapter_settings,
                                                                                          f"judge.{adapter}")}
    return top | {"adapter_settings": dict(adapter_settings)}


# judge.<adapter> settings that only the labelling reads: its prompts, the candidates' images and how
# they are sent (the query writer sends its seeds at its own low detail: queries.prompts.WRITER_IMAGE)
LABELLING_ONLY = ("prompts", "send_thumbnails", "image_detail", "image_max_side")


def query_settings(queries_cfg: Mapping[str, Any], judge_cfg: Mapping[str, Any], *,
                   requests_only: bool = False) -> dict:
    """The query writer's ``settings`` param: on the judge's adapter. The offline writer (judge.adapter
    ``rules``) gets ``queries.rules``; an API writer the judge's provider settings (judge.<adapter>:
    model, server, mode, retries, prices) without what only labelling reads (:data:`LABELLING_ONLY`),
    with the writer's own ``prompts`` and, when set, ``model``. With ``requests_only`` only the keys
    that shape a request (``x-request: true``)."""
    adapter = judge_cfg["adapter"]
    if adapter not in BATCH_ADAPTERS:
        return {} if requests_only else dict(queries_cfg.get("rules") or {})
    llm = {k: v for k, v in (judge_cfg.get(adapter) or {}).items() if k not in LABELLING_ONLY}
    if "prompts" in queries_cfg:
        llm["prompts"] = queries_cfg["prompts"]
    if queries_cfg.get("model") is not None:
        llm["model"] = queries_cfg["model"]
    return request_settings(llm, f"judge.{adapter}") if requests_only else llm

"""The settings schema (config/schema.yaml, shipped as package data) and its defaults: loading it,
resolving ``$ref``, filling defaults into a section. A foundation module: it imports nothing of the
project, so any stage may read its defaults here without reaching benchmaker.config (whose cross-key
checks import the stages)."""

from __future__ import annotations

import copy
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

import yaml

__all__ = ["load_schema", "resolve_schema", "filled", "default", "kind_defaults", "LLM"]

# the path of the settings every LLM section shares (judge.openai, vision.gemini, a reranker's llm ...)
LLM = "$defs.llm_common"


# libyaml's parser when PyYAML was built with it: the same safe loading, ~8x less CPU (0.13 -> 0.016 s
# per read of the 40 kB schema, read by the Snakefile and by every stage that fills its defaults)
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_schema() -> dict:
    return copy.deepcopy(_schema())


@lru_cache(maxsize=1)
def _schema() -> dict:
    """The schema, read once per process (never mutated here: :func:`load_schema` hands out copies)."""
    text = resources.files("benchmaker").joinpath("schemas/config.schema.yaml").read_text()
    return yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 (a safe loader)


def resolve_schema(node: dict, schema: dict) -> dict:
    """``node`` with its ``$ref`` to the schema's ``$defs`` resolved (the node's own keys win)."""
    defs = schema.get("$defs", {})
    while "$ref" in node:
        name = node["$ref"].split("/")[-1]
        merged = dict(defs[name])
        merged.update({k: v for k, v in node.items() if k != "$ref"})
        node = merged
    return node


def _fill_defaults(cfg: dict, schema: dict) -> None:
    """Fill defaults, resolving $ref to $defs (done by hand: simpler than a resolver and exact)."""

    def resolve(s: dict) -> dict:
        return resolve_schema(s, schema)

    def walk(instance: Any, s: dict) -> None:
        s = resolve(s)
        if not isinstance(instance, dict):
            return
        for prop, sub in s.get("properties", {}).items():
            sub_r = resolve(sub)
            if prop not in instance and "default" in sub_r:
                instance[prop] = copy.deepcopy(sub_r["default"])
            if prop in instance:
                walk(instance[prop], sub_r)
        addl = s.get("additionalProperties")
        if isinstance(addl, dict):
            for k, v in instance.items():
                if k not in s.get("properties", {}):
                    walk(v, addl)

    walk(cfg, schema)
    _fill_context_defaults(cfg, schema, resolve)


def _fill_context_defaults(instance: Any, s: dict, resolve, context: str | None = None) -> None:
    """Within an array item of a ``kind`` (``evaluate.systems``: a reranker), a setting that the item
    holds without a value gets the schema's ``x-default-<kind>`` (a reranker's ``llm.mode`` is
    ``x-default-rerank: sync``). Done when the config is loaded, so that the declared context default
    wins wherever the config goes next: Snakemake's ``validate(config, schema)`` fills the plain
    ``default`` (batch) only into keys still missing."""
    s = resolve(s)
    if isinstance(instance, list) and isinstance(s.get("items"), dict):
        for item in instance:
            kind = item.get("kind") if isinstance(item, dict) else None
            _fill_context_defaults(item, s["items"], resolve, kind if isinstance(kind, str) else context)
        return
    if not isinstance(instance, dict):
        return
    for prop, sub in s.get("properties", {}).items():
        sub_r = resolve(sub)
        if prop not in instance and context is not None and f"x-default-{context}" in sub_r:
            instance[prop] = copy.deepcopy(sub_r[f"x-default-{context}"])
        if prop in instance:
            _fill_context_defaults(instance[prop], sub_r, resolve, context)


def _node(path: str) -> tuple[dict, dict]:
    """(schema, the resolved node of a setting path: ``summary``, ``vision.clip``, ``evaluate.systems.[]``,
    ``$defs.llm_common``)."""
    schema = _schema()
    parts = [p for p in path.split(".") if p]
    node: dict = schema
    if parts and parts[0] == "$defs":
        node, parts = schema["$defs"][parts[1]], parts[2:]
    for part in parts:
        node = resolve_schema(node, schema)
        node = node["items"] if part == "[]" else node["properties"][part]
    return schema, resolve_schema(node, schema)


def filled(path: str, value: Mapping[str, Any] | None) -> dict:
    """A config section (``summary``, ``vision.clip``, :data:`LLM`) with the schema's defaults filled
    in: stage functions called with a partial section (library callers, tests) read every key from
    here, so that no default is written a second time in code."""
    schema, node = _node(path)
    out = copy.deepcopy(dict(value or {}))
    _fill_defaults(out, {"$defs": schema.get("$defs", {}), **node})
    return out


def default(path: str, under: str | None = None) -> Any:
    """The schema's default of one setting (``evaluate.depth``, ``$defs.llm_common.model``): for a
    value that is not read from a section (a fallback where a caller passed nothing). ``under``: the
    default the setting has in that context where the schema declares one (``x-default-gemini``)."""
    _, node = _node(path)
    if under is not None and f"x-default-{under}" in node:
        return copy.deepcopy(node[f"x-default-{under}"])
    if "default" not in node and "x-default-from" in node:     # a default that is another setting's
        return default(node["x-default-from"])
    if "default" not in node:
        raise KeyError(f"config/schema.yaml: {path} has no default")
    return copy.deepcopy(node["default"])


def kind_defaults(path: str) -> dict[str, dict[str, Any]]:
    """Per kind, the settings (and their defaults) that the items of ``path`` take: the schema's
    ``x-kind-defaults`` (``evaluate.systems.[]``: a clip system's batch_size, an http system's method)."""
    _, node = _node(path)
    return copy.deepcopy(node["x-kind-defaults"])

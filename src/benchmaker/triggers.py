"""Which settings are rerun triggers, derived from their one declaration in ``config/schema.yaml``.

Every setting either decides a stage's output bytes or is a runtime knob (speed, concurrency, where
caches live). The schema marks the runtime knobs with ``x-runtime: true``; everything else decides
output. Rules split a config section with :func:`split_runtime` (or :func:`output_settings`): the
output part is an ordinary rule param (so Snakemake reruns the rule when it changes, and it is part
of the cache keys), the runtime part reaches the job through ``not_a_trigger`` (benchmaker's
Snakemake compatibility module: a param Snakemake never compares). The config recorded with the
dataset (:func:`without_runtime`) leaves every runtime knob out, so that changing one reruns no rule
at all. tests/test_triggers.py changes every key of the schema one at a time and checks, by dry run,
which stages are planned. Nothing here imports torch or Snakemake.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any, Mapping

from .settings_schema import load_schema, resolve_schema

__all__ = ["RUNTIME", "schema_at", "runtime_keys", "split_runtime", "output_settings", "runtime_settings",
           "without_runtime", "setting_paths"]

RUNTIME = "x-runtime"
LIKE = "x-like"


@lru_cache(maxsize=1)
def _schema() -> dict:
    return load_schema()


def _child(node: dict, part: str) -> dict | None:
    """The sub-schema of ``node`` for ``part`` (a property name, or ``[]`` for an array's items).
    A node marked ``x-like: <path>`` (an object validated as another section, e.g. the second
    judge's overrides) has the children of that section."""
    node = resolve_schema(node, _schema())
    if node.get(LIKE):
        node = schema_at(node[LIKE])
    if part == "[]":
        items = node.get("items")
        return items if isinstance(items, dict) else None
    props = node.get("properties") or {}
    if part in props:
        return props[part]
    addl = node.get("additionalProperties")
    return addl if isinstance(addl, dict) else None


def schema_at(path: str) -> dict:
    """The (resolved) schema of the setting at a dotted ``path``: ``similarity``, ``vision.openai``,
    ``evaluate.systems.[].llm``. Raises KeyError for a path the schema does not declare."""
    node: dict | None = _schema()
    for part in [p for p in path.split(".") if p]:
        node = _child(node, part) if node is not None else None
        if node is None:
            raise KeyError(f"config/schema.yaml declares no setting {path!r}")
    return resolve_schema(node, _schema())


def _is_runtime(node: dict | None) -> bool:
    return bool(node) and bool(resolve_schema(node, _schema()).get(RUNTIME))


def runtime_keys(path: str) -> tuple[str, ...]:
    """The keys of the section at ``path`` that the schema marks ``x-runtime: true``."""
    props = schema_at(path).get("properties") or {}
    return tuple(k for k, v in props.items() if _is_runtime(v))


def _split(value: Any, node: dict | None) -> tuple[Any, Any]:
    if node is not None and isinstance(value, list):
        items = _child(node, "[]")
        parts = [_split(v, items) for v in value]
        return [o for o, _ in parts], ([r or {} for _, r in parts] if any(r for _, r in parts) else None)
    if not isinstance(value, Mapping) or node is None:
        return value, None
    node = resolve_schema(node, _schema())
    out: dict = {}
    run: dict = {}
    for k, v in value.items():
        sub = _child(node, k)
        if _is_runtime(sub):
            run[k] = v
            continue
        o, r = _split(v, sub)
        out[k] = o
        if r:
            run[k] = r
    return out, run


def split_runtime(section: Mapping[str, Any], path: str) -> tuple[dict, dict]:
    """(the settings that decide the output, the runtime knobs) of the config section at ``path``,
    nested sections included (a runtime knob of ``judge.openai`` lands in ``runtime["openai"]``)."""
    out, run = _split(dict(section), schema_at(path))
    return out, run or {}


def output_settings(section: Mapping[str, Any], path: str) -> dict:
    """``section`` (the config at ``path``) without its runtime knobs: a rule's trigger params."""
    return split_runtime(section, path)[0]


def runtime_settings(section: Mapping[str, Any], path: str) -> dict:
    """Only the runtime knobs of ``section`` (the config at ``path``)."""
    return split_runtime(section, path)[1]


def without_runtime(config: Mapping[str, Any]) -> dict:
    """A deep copy of a whole config without any runtime knob (the config recorded in the dataset)."""
    return copy.deepcopy(_split(dict(config), _schema())[0])


def setting_paths() -> list[tuple[str, dict]]:
    """Every leaf setting the schema declares, as (dotted path, resolved schema), in schema order;
    array items appear as ``<path>.[]``. The trigger test walks this list."""
    out: list[tuple[str, dict]] = []

    def walk(prefix: str, node: dict) -> None:
        node = resolve_schema(node, _schema())
        props = node.get("properties")
        if props:
            for k, sub in props.items():
                walk(f"{prefix}.{k}" if prefix else k, sub)
            return
        if node.get("type") == "array" and isinstance(node.get("items"), dict) and \
                resolve_schema(node["items"], _schema()).get("properties"):
            walk(f"{prefix}.[]", node["items"])
            return
        out.append((prefix, node))

    walk("", _schema())
    return out

"""Config values that name a local file or folder, read from the schema's ``x-path`` marking.

Every config key whose value may name something on the user's disk is marked in
``config/schema.yaml``; nothing else in benchmaker keeps a list of such keys. The marking:

``x-path: file`` / ``x-path: dir``
    the value names a local file / folder (relative: from the directory snakemake runs in).
``x-path-prefix: "local-dir:"``
    only a value with this prefix names a path (the part after it); any other value is a name
    (an open_clip architecture, ``hf-hub:org/repo``).
``x-path-if-pathlike: true``
    the value may also be a name (a ``pretrained`` tag); it names a path when it looks like one
    (contains ``/``, starts with ``~`` or ends with a weight suffix), decided by the name alone so
    that the controller and a pod without the controller's disk decide alike.
``x-path-use: stage`` (default) | ``volume`` | ``output``
    ``stage``: an input that the controller copies to the workflow's storage under a default storage
    provider (``--profile nrp``, rules/cluster.smk); ``volume``: too large to stage, the pods read it
    from a mounted volume (``paths.image_root``: ``BENCHMAKER_K8S_PVC``); ``output``: a folder the
    workflow writes, which must be relative under a default storage (``paths.results``);
    ``controller``: read in place by a rule that always runs on the controller (a Milvus Lite file,
    queried by the local rule ``evaluate_api``), so neither staged nor on a pod volume.
``x-like: judge`` (or ``x-schema: "#/properties/judge"``)
    an object validated as that section (``audit.second_judge.judge``): its paths are walked there.

Storage URLs (``s3://...``, ``https://...``) are never local paths. Used by the workflow's staging,
the pods' path mapping (benchmaker.staging), the dry-run / ``validate-config`` checks
(benchmaker.preflight) and tests/test_staging.py, which fails for a marked key that is not staged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

__all__ = ["PathKey", "ConfigPath", "path_keys", "config_paths", "looks_like_path", "WEIGHT_SUFFIXES"]

#: weight file suffixes (what open_clip loads from a checkpoint file or a ``local-dir:`` folder)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt")
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
USES = ("stage", "volume", "output", "controller")


@dataclass(frozen=True)
class PathKey:
    """One marked key of the schema; ``pointer`` is dotted, ``[]`` for list items (``evaluate.systems[].path``)."""

    pointer: str
    kind: str            # "file" | "dir" | "any" (either: a Milvus Lite database is a file or a folder)
    use: str = "stage"   # "stage" | "volume" | "output" | "controller"
    prefix: str = ""
    if_pathlike: bool = False


@dataclass(frozen=True)
class ConfigPath:
    """One local path a config names: where (``key``, with list indexes), how it is written
    (``value``) and the path itself (``path``: ``value`` without the ``local-dir:`` prefix)."""

    key: str
    pointer: str
    kind: str
    use: str
    value: str
    path: str


def looks_like_path(value: str) -> bool:
    """A value that names a file rather than a tag (same rule as the model loader)."""
    value = str(value)
    return "/" in value or value.startswith("~") or value.endswith(WEIGHT_SUFFIXES)


def _schema(schema: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if schema is not None:
        return schema
    from .config import load_schema

    return load_schema()


def _resolve(root: Mapping[str, Any], node: Mapping[str, Any], seen: frozenset) -> tuple[Mapping, frozenset]:
    while isinstance(node, Mapping) and "$ref" in node:
        ref = node["$ref"]
        if ref in seen:
            return {}, seen
        seen = seen | {ref}
        target: Any = root
        for part in ref.lstrip("#/").split("/"):
            target = target[part]
        # a $ref beside other keys (x-path, description): the local keys win
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node, seen


def _key(node: Mapping[str, Any], pointer: str) -> PathKey | None:
    kind = node.get("x-path")
    if kind is None:
        return None
    if kind not in ("file", "dir", "any"):
        raise ValueError(f"config schema: {pointer}: x-path must be file, dir or any, not {kind!r}")
    use = node.get("x-path-use", "stage")
    if use not in USES:
        raise ValueError(f"config schema: {pointer}: x-path-use must be one of {USES}, not {use!r}")
    if kind == "any" and use == "stage":  # staging copies a file (stage_file) or a folder (stage_folder)
        raise ValueError(f"config schema: {pointer}: x-path: any (a file or a folder) cannot be staged; "
                         "say which it is, or mark it x-path-use: controller")
    return PathKey(pointer, kind, use, str(node.get("x-path-prefix") or ""), bool(node.get("x-path-if-pathlike")))


def _like(node: Mapping[str, Any]) -> str | None:
    """The schema this node is validated as: ``x-like: judge`` (a section's dotted path, the marker the
    rerun triggers read too, benchmaker.triggers) or an ``x-schema`` JSON pointer."""
    if node.get("x-like"):
        return "#/properties/" + "/properties/".join(str(node["x-like"]).split("."))
    return node.get("x-schema")


def _walk_schema(root, node, pointer: str, seen: frozenset) -> Iterator[PathKey]:
    node, seen = _resolve(root, node, seen)
    if not isinstance(node, Mapping):
        return
    key = _key(node, pointer)
    if key is not None:
        yield key
    ref = _like(node)
    if ref is not None and ref not in seen:
        yield from _walk_schema(root, {"$ref": ref}, pointer, seen)
    for name, sub in (node.get("properties") or {}).items():
        yield from _walk_schema(root, sub, f"{pointer}.{name}" if pointer else name, seen)
    if isinstance(node.get("additionalProperties"), Mapping):
        yield from _walk_schema(root, node["additionalProperties"], f"{pointer}.*", seen)
    if isinstance(node.get("items"), Mapping):
        yield from _walk_schema(root, node["items"], f"{pointer}[]", seen)


def path_keys(schema: Mapping[str, Any] | None = None) -> list[PathKey]:
    """Every key the schema marks with ``x-path`` (default: benchmaker's own schema)."""
    root = _schema(schema)
    return list(_walk_schema(root, root, "", frozenset()))


def _walk_config(root, node, value, key: str, pointer: str, seen: frozenset) -> Iterator[ConfigPath]:
    node, seen = _resolve(root, node, seen)
    if not isinstance(node, Mapping):
        return
    mark = _key(node, pointer)
    if mark is not None and isinstance(value, str) and value:
        path = value
        if mark.prefix:
            path = value[len(mark.prefix):] if value.startswith(mark.prefix) else ""
        elif mark.if_pathlike and not looks_like_path(value):
            path = ""
        if path and not _URL.match(path):
            yield ConfigPath(key, pointer, mark.kind, mark.use, value, path)
    if isinstance(value, Mapping):
        ref = _like(node)
        if ref is not None and ref not in seen:
            yield from _walk_config(root, {"$ref": ref}, value, key, pointer, seen)
        props = node.get("properties") or {}
        extra = node.get("additionalProperties")
        for name, sub in value.items():
            child = props.get(name, extra if isinstance(extra, Mapping) else None)
            if child is not None:
                yield from _walk_config(root, child, sub, f"{key}.{name}" if key else str(name),
                                        f"{pointer}.{name if name in props else '*'}" if pointer
                                        else str(name), seen)
    elif isinstance(value, list) and isinstance(node.get("items"), Mapping):
        for i, sub in enumerate(value):
            yield from _walk_config(root, node["items"], sub, f"{key}[{i}]", f"{pointer}[]", seen)


def config_paths(cfg: Mapping[str, Any], schema: Mapping[str, Any] | None = None, *,
                 use: str | None = None) -> list[ConfigPath]:
    """Every local path that ``cfg`` names (only those of one ``use`` if given), in config order."""
    root = _schema(schema)
    out = list(_walk_config(root, root, cfg, "", "", frozenset()))
    return [p for p in out if use is None or p.use == use]

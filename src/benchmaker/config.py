"""Configuration: load one YAML file, validate it against the JSON schema, fill defaults.

The schema (``config/schema.yaml``, shipped in the package as ``schemas/config.schema.yaml``) is the one
source of truth. Errors name the offending key by its path (``judge.rules.relevant_min_jaccard``).
Secrets are never read from config: only the *name* of an environment variable is configurable.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping

import yaml
from jsonschema import Draft202012Validator

from .errors import ConfigError  # noqa: F401 - re-exported: raised and caught as config.ConfigError
from .settings_schema import _fill_defaults, filled, load_schema, resolve_schema  # noqa: F401 - re-exported

__all__ = [
    "ConfigError",
    "load_config",
    "validate_config",
    "yaml_error_message",
    "load_schema",
    "resolve_schema",
    "filled",
    "results_dir",
    "RESERVED_COLUMNS",
]


# Canonical column keys that facet names must not shadow (facets become columns of the dataset).
from .formats import RESERVED_COLUMNS  # noqa: E402,F401 - re-exported (kept where stages import it)

# keys a release retired: (section, key) -> what to do instead. A config that still sets one fails with
# that message (never silently ignored, never aliased: one key holds one setting).
# keys a config may no longer set (dotted path -> the fix), one message each, before the schema's own checks
RETIRED_KEYS: dict[str, str] = {
    "plan.phash_max_distance": (
        "the near-duplicate threshold is one setting, preprocess.near_duplicate_threshold (default 6): the "
        "planner keeps every member of a seed's duplicate group (images.jsonl's duplicate_group) out of its "
        "query's pools; delete plan.phash_max_distance, or move its value to preprocess.near_duplicate_threshold"),
    "judge.rules.query_tags": "moved to queries.rules.query_tags (the query writer, docs/judge-rules.md)",
}


def _retired(cfg: Mapping[str, Any]) -> list[str]:
    """One message per retired key the config still sets (with its value where the key moved)."""
    found = []
    for dotted, fix in RETIRED_KEYS.items():
        node: Any = cfg
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping) and parts[-1] in node:
            found.append(f"{dotted} was retired: {fix}" + (f"; write `{fix.split()[2]}: {node[parts[-1]]}`"
                                                            if fix.startswith("moved to ") else ""))
    return found


def _path(error) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "<top level>"


def _format_error(error) -> str:
    where = _path(error)
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        allowed = ", ".join(sorted(error.schema.get("properties", {}))) or "(none)"
        keys = ", ".join(f"{where + '.' if where != '<top level>' else ''}{k}" for k in extra)
        return f"unknown key {keys} (allowed here: {allowed})"
    if error.validator == "required":
        return f"missing key at {where}: {error.message}"
    if error.validator == "pattern" and error.schema.get("description"):  # what the pattern is for
        return f"{where}: {error.message} ({error.schema['description']})"
    return f"{where}: {error.message}"


def _schema_ordered(instance: Any, node: dict, schema: dict) -> Any:
    """``instance`` with every mapping's declared keys in schema order (other keys after them)."""
    node = resolve_schema(node, schema)
    if isinstance(instance, list):
        items = node.get("items")
        return [_schema_ordered(v, items, schema) if isinstance(items, dict) else v for v in instance]
    if not isinstance(instance, dict):
        return instance
    props = node.get("properties") or {}
    addl = node.get("additionalProperties")
    out = {k: _schema_ordered(instance[k], props[k], schema) for k in props if k in instance}
    for k, v in instance.items():
        if k not in out:
            out[k] = _schema_ordered(v, addl, schema) if isinstance(addl, dict) else v
    return out


def validate_config(cfg: Mapping[str, Any], *, base_dir: str | Path | None = None) -> dict:
    """Validate a config mapping, fill defaults, run cross-key checks. Returns a new dict."""
    cfg = copy.deepcopy(dict(cfg))
    retired = _retired(cfg)
    if retired:
        raise ConfigError("invalid configuration:\n  - " + "\n  - ".join(retired))
    schema = load_schema()
    validator = Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (len(list(e.absolute_path)), _path(e)))
    if errors:
        msgs = "\n  - ".join(_format_error(e) for e in errors[:20])
        raise ConfigError(f"invalid configuration:\n  - {msgs}")
    _fill_defaults(cfg, schema)
    # keys in the schema's order, whatever the file's order: the config a rule compares and the
    # dataset records must not depend on where a key was written (or whether it was written at all)
    cfg = _schema_ordered(cfg, schema, schema)
    # a second pass: defaults themselves must be valid (guards schema typos)
    errors = list(validator.iter_errors(cfg))
    if errors:
        raise ConfigError("invalid configuration after filling defaults: " + _format_error(errors[0]))
    _cross_checks(cfg)
    _mark_smoke_test(cfg)
    if base_dir is not None:
        cfg.setdefault("_base_dir", str(Path(base_dir).resolve()))
    return cfg


# settings that moved to another section: (old path, new path); a config that still has one gets one
# error naming the new place instead of the schema's "additional property" message
def _mark_smoke_test(cfg: dict) -> None:
    """benchmark.smoke_test / smoke_reason from the models and the flag (benchmaker.smoke)."""
    from .smoke import smoke_reasons

    reasons = smoke_reasons(cfg)
    if reasons:
        bench = cfg["benchmark"]
        bench["smoke_test"] = True
        known = [r for r in (bench.get("smoke_reason") or "").split("; ") if r]
        bench["smoke_reason"] = "; ".join(dict.fromkeys([*known, *reasons]))


def _cross_checks(cfg: dict) -> None:
    facets = cfg["facets"]
    taxonomy = facets["taxonomy"]
    booleans = facets.get("boolean", [])
    problems: list[str] = []
    for name in list(taxonomy) + list(booleans):
        if name in RESERVED_COLUMNS or name in cfg["columns"].values():
            problems.append(f"facets: facet name '{name}' collides with a built-in column name")
    both = set(taxonomy) & set(booleans)
    if both:
        problems.append(f"facets.boolean: {sorted(both)} also listed in facets.taxonomy")
    tags = facets["tags"]
    if tags["min"] > tags["max"]:
        problems.append(f"facets.tags.min ({tags['min']}) is greater than facets.tags.max ({tags['max']})")
    vocab = tags["vocabulary"]
    if vocab and tags["min"] > len(vocab):
        problems.append(f"facets.tags.min ({tags['min']}) exceeds the vocabulary size ({len(vocab)})")
    all_facets = set(taxonomy) | set(booleans)
    plan = cfg["plan"]
    for key in ("core_facets", "off_facets", "diversity_facets"):
        for f in plan[key]:
            if f not in all_facets:
                problems.append(f"plan.{key}: '{f}' is not a facet (known: {', '.join(sorted(all_facets))})")
    if plan["neg_hard"] + plan["neg_nearmiss"] + plan["neg_easy"] != plan["neg_total"]:
        problems.append(
            "plan.neg_total: must equal neg_hard + neg_nearmiss + neg_easy "
            f"({plan['neg_hard']} + {plan['neg_nearmiss']} + {plan['neg_easy']} != {plan['neg_total']})"
        )
    cols = cfg["columns"]
    seen: dict[str, str] = {}
    for key, name in cols.items():
        if name in seen:
            problems.append(f"columns.{key}: name '{name}' already used by columns.{seen[name]}")
        seen[name] = key
    for stage in ("vision", "judge"):
        sec = cfg[stage]
        if sec["adapter"] in ("openai", "gemini"):
            llm = sec[sec["adapter"]]
            if llm.get("image_transport") == "url" and not cfg["preprocess"]["image_base_url"] and stage == "vision":
                problems.append(f"{stage}.{sec['adapter']}.image_transport: 'url' needs preprocess.image_base_url")
    meta = cfg["vision"]["metadata"]
    for key in ("tags_column", "summary_column"):
        if meta.get(key) in RESERVED_COLUMNS | set(cols.values()):
            problems.append(f"vision.metadata.{key}: '{meta[key]}' is a built-in column name, which preprocess "
                            "keeps out of images.jsonl; give the labels their own name (e.g. label_tags)")
    from .audit_settings import audit_problems  # the judge audit's strata and facets (docs/audit.md)

    problems += audit_problems(cfg)
    if cfg.get("evaluate", {}).get("systems"):  # names, kinds, references (docs/evaluate.md)
        from .evaluate_settings import check_systems

        try:
            check_systems(cfg["evaluate"])
        except ConfigError as exc:
            problems.append(str(exc))
        for f in cfg["evaluate"].get("facets") or []:
            if f not in all_facets:
                problems.append(f"evaluate.facets: '{f}' is not a facet (known: {', '.join(sorted(all_facets))})")
        problems += _bm25_field_problems(cfg["evaluate"]["systems"], list(taxonomy) + list(booleans))
    for f in meta.get("facet_columns") or {}:  # the metadata adapter refuses them (benchmaker.vision.metadata)
        if f not in all_facets:
            problems.append(f"vision.metadata.facet_columns: '{f}' is not a facet (facets: "
                            f"{', '.join(list(taxonomy) + list(booleans))})")
    from .evaluate_settings import compare_problems, deepen_systems  # deepen: the workflow's own check

    problems += compare_problems(cfg.get("evaluate") or {})  # the metrics per_query.csv holds (docs/evaluate.md)

    try:
        deepen_systems(cfg.get("deepen") or {}, (cfg.get("evaluate") or {}).get("systems") or [])
    except ConfigError as exc:
        problems.append(str(exc))
    if problems:
        raise ConfigError("invalid configuration:\n  - " + "\n  - ".join(problems))


def _bm25_field_problems(systems: list, facets: list[str]) -> list[str]:
    """Messages for bm25 ``fields`` that are not columns of annotations.jsonl (the bm25 job reads them there)."""
    from .formats import KINDS

    known = [c for c, dtype in KINDS["annotations"].required.items() if dtype is not None and c != "image_id"] + facets
    out = []
    for i, s in enumerate(systems):
        if isinstance(s, Mapping) and s.get("kind") == "bm25":
            out += [f"evaluate.systems[{i}].fields: '{f}' is not a text column of annotations.jsonl "
                    f"({', '.join(known)})"
                    for f in s.get("fields") or [] if f not in known]
    return out


def yaml_error_message(path: str | Path, exc: yaml.YAMLError) -> str:
    """``<path>:<line>:<column>: not valid YAML: <problem> (...)``: the one wording of a YAML syntax
    error in a config file: :func:`load_config`, ``validate-config`` (benchmaker.preflight) and
    Snakemake's own reading of config files (benchmaker.snakemake_compat.explain_config_yaml_errors)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    detail = f"{context}, {problem}" if context else problem
    return (f"{where}: not valid YAML: {detail} (check the indentation and quoting on that line or the "
            "one before it; tabs are not allowed)")


def load_config(path: str | Path, overrides: Mapping[str, Any] | None = None) -> dict:
    """Load a YAML config file, apply nested overrides, validate and fill defaults."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_error_message(path, exc)) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping")
    if overrides:
        raw = deep_merge(raw, overrides)
    return validate_config(raw)


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict:
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def results_dir(cfg: Mapping[str, Any]) -> str:
    return f"{cfg['paths']['results']}/{cfg['benchmark']['name']}"


"""The ``evaluate`` section's declaration in code: the system kinds, each kind's defaults, and the
cross-key checks that ``benchmaker.config.validate_config`` runs on ``evaluate.systems`` (names, kinds,
references, the ``http`` and ``milvus`` systems' settings). A foundation module: it imports nothing of
the stages, so validating a config never loads the evaluate stage (docs/evaluate.md).
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from .errors import ConfigError
from .settings_schema import default, filled, kind_defaults
from .triggers import runtime_keys

__all__ = ["COLLECTION_KINDS", "COMMON", "CUTOFF_METRICS", "DEFAULTS", "EMBEDDING_KEYS", "HTTP_DEFAULTS", "KINDS",
           "LIVE_KINDS", "LIVE_RUNTIME", "MAX_LIMIT", "MEASURES", "MILVUS_DEFAULTS", "MODEL_KINDS",
           "FUSION_METHODS", "FUSION_NORMS", "PLACEHOLDERS", "TRAINED_FUSION_METHODS", "WEIGHTED_FUSION_METHODS",
           "WHOLE_METRICS", "check_http", "check_hybrid", "check_milvus", "check_systems", "compare_problems",
           "deepen_systems", "evaluation_metric_problem", "has_corpus_scope", "metric_problem", "render",
           "reuses_similarity_embeddings", "runs_model", "system_settings"]


# ranx's metrics as the evaluate stage computes them (benchmaker.evaluate.metrics.ranx_metrics): these at each
# cutoff k (``ndcg@10``), those over the whole ranking (``map``); other settings naming metrics are checked here
CUTOFF_METRICS = ("ndcg", "precision", "recall", "hit_rate")
WHOLE_METRICS = ("map", "mrr")


def metric_problem(name: Any) -> str | None:
    """Why ``name`` is not a metric the project computes with ranx (None when it is one)."""
    s = str(name)
    base, at, k = s.partition("@")
    if (at and base in CUTOFF_METRICS and k.isdigit() and int(k) > 0) or (not at and s in WHOLE_METRICS):
        return None
    return (f"{s!r} is not a metric benchmaker computes (ranx's names: "
            + ", ".join(f"{m}@k" for m in CUTOFF_METRICS) + ", " + ", ".join(WHOLE_METRICS)
            + "; k a positive integer, e.g. ndcg@10)")


# the measures per_query.csv holds beside ranx's metrics, at each cutoff k (benchmaker.evaluate.stage): not
# ranx's, never gated by default
MEASURES = ("diversity", "judged")


def evaluation_metric_problem(name: Any, ks: Sequence[int]) -> str | None:
    """Why ``name`` is not a column of the evaluate stage's ``per_query.csv`` at cutoffs ``ks``
    (``evaluate.k``), the metrics an evaluation comparison can compare and gate (None when it is one)."""
    s = str(name)
    base, at, k = s.partition("@")
    known = ", ".join([f"{m}@k" for m in CUTOFF_METRICS] + list(WHOLE_METRICS) + [f"{m}@k" for m in MEASURES])
    if metric_problem(s) is not None and not (at and base in MEASURES and k.isdigit() and int(k) > 0):
        return f"{s!r} is not a metric the evaluate stage writes ({known}; k one of evaluate.k, e.g. ndcg@{ks[0]})"
    if at and str(int(k)) != k:
        return f"{s!r} is not a column of per_query.csv: write {base}@{int(k)}"
    if at and int(k) not in ks:
        return (f"{s!r}: evaluate.k is {list(ks)}, so no evaluation has {base}@{k} to compare (add {k} to "
                f"evaluate.k, or name {base}@{ks[0]})")
    return None


def compare_problems(evaluate: Mapping[str, Any]) -> list[str]:
    """Messages naming the key, for ``evaluate.compare.metrics`` that the evaluate stage does not write (a name
    no column of ``per_query.csv`` has would be compared and gated nowhere, silently)."""
    ks = [int(k) for k in filled("evaluate", evaluate)["k"]]
    metrics = filled("evaluate.compare", (evaluate or {}).get("compare"))["metrics"] or []
    return [f"evaluate.compare.metrics: {why}" for m in metrics if (why := evaluation_metric_problem(m, ks))]


# an http system's settings and defaults: the schema's (evaluate.systems x-kind-defaults)
HTTP_DEFAULTS: dict[str, Any] = {k: v for k, v in kind_defaults("evaluate.systems.[]")["http"].items()
                                 if k != "sees_judge_text"}
PLACEHOLDERS = ("query", "query_json", "query_url", "query_id", "depth")


def _values(query_id: str, text: str, depth: int) -> dict[str, str]:
    return {"query": text, "query_json": json.dumps(text, ensure_ascii=False), "query_url": quote(text, safe=""),
            "query_id": query_id, "depth": str(depth)}


def render(template: Any, query_id: str, text: str, depth: int) -> Any:
    """The template with its placeholders filled: a string that is exactly ``$depth`` becomes the
    integer, exactly ``$query`` / ``$query_id`` the string; any other string is filled with
    :class:`string.Template` (``$$`` is a literal ``$``); dicts and lists are walked."""
    vals = _values(query_id, text, depth)
    if isinstance(template, Mapping):
        return {str(k): render(v, query_id, text, depth) for k, v in template.items()}
    if isinstance(template, list):
        return [render(v, query_id, text, depth) for v in template]
    if isinstance(template, str):
        if template in ("$depth", "${depth}"):
            return depth
        return string.Template(template).substitute(vals)
    return template


def check_http(s: Mapping[str, Any], where: str) -> None:
    """Config errors of an http system, naming the key."""
    if not s.get("url") or not isinstance(s["url"], str):
        raise ConfigError(f"{where}.url: an http system needs the search service's URL")
    if str(s.get("method") or "").upper() not in ("GET", "POST"):
        raise ConfigError(f"{where}.method: {s.get('method')!r} is not GET or POST")
    for key in ("url", "params", "body", "headers"):
        try:
            render(s.get(key), "q", "text", 1)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"{where}.{key}: bad placeholder {exc} (known: "
                              f"{', '.join('$' + p for p in PLACEHOLDERS)}; write $$ for a literal $)") from None
    import jmespath
    from jmespath.exceptions import JMESPathError

    for key in ("results", "id", "score"):
        if s.get(key) is not None:
            try:
                jmespath.compile(str(s[key]))
            except JMESPathError as exc:
                raise ConfigError(f"{where}.{key}: {s[key]!r} is not a JMESPath expression ({exc})") from None
    if s.get("id_regex") is not None:
        try:
            rx = re.compile(str(s["id_regex"]))
        except re.error as exc:
            raise ConfigError(f"{where}.id_regex: {exc}") from None
        if rx.groups < 1:
            raise ConfigError(f"{where}.id_regex: needs a group (image_id) that captures the image id")
    if s.get("score_order") not in ("desc", "asc"):
        raise ConfigError(f"{where}.score_order: {s.get('score_order')!r} is not desc (higher is better) or asc")
    if s.get("auth_env") is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(s["auth_env"])):
        raise ConfigError(f"{where}.auth_env: the NAME of an environment variable holding the secret, "
                          f"not the secret itself")


# a milvus system's settings and defaults: the schema's (evaluate.systems x-kind-defaults)
MILVUS_DEFAULTS: dict[str, Any] = {k: v for k, v in kind_defaults("evaluate.systems.[]")["milvus"].items()
                                   if k != "sees_judge_text"}
MAX_LIMIT = 16384  # Milvus's topk limit


def check_milvus(s: Mapping[str, Any], where: str) -> None:
    if bool(s.get("uri")) == bool(s.get("db_file")):
        raise ConfigError(f"{where}: a milvus system needs exactly one of uri (a Milvus server, "
                          f"http://host:19530) and db_file (a Milvus Lite database file)")
    if not s.get("collection"):
        raise ConfigError(f"{where}.collection: the Milvus collection to search")
    if not s.get("model"):
        raise ConfigError(f"{where}.model: the open_clip model that encodes the query text (the model whose "
                          f"image embeddings the collection holds)")
    if str(s.get("metric")).upper() not in ("COSINE", "IP", "L2"):
        raise ConfigError(f"{where}.metric: {s.get('metric')!r} is not COSINE, IP or L2")
    legs = s.get("legs")
    if legs is not None:
        if not isinstance(legs, list) or len(legs) < 2:
            raise ConfigError(f"{where}.legs: a hybrid search has at least two legs ({{field, weight}}, text: true "
                              f"for a BM25 sparse field); without legs anns_field is searched")
        for j, leg in enumerate(legs):
            if not isinstance(leg, Mapping) or not leg.get("field") or not isinstance(leg.get("weight"), (int, float)):
                raise ConfigError(f"{where}.legs[{j}]: needs field and weight")
            extra = sorted(set(leg) - {"field", "weight", "text", "search_params"})
            if extra:
                raise ConfigError(f"{where}.legs[{j}]: unknown key(s) {extra} (field, weight, text, search_params)")
    if not 1 <= int(s["depth"]) <= MAX_LIMIT:
        raise ConfigError(f"{where}.depth: Milvus returns at most {MAX_LIMIT} hits per search")


# a hybrid system's ranx.fuse methods and normalisations (ranx.fusion.fusion_switch, ranx.normalization.norm_switch)
# as the hybrid's job calls them, with weights at most (benchmaker.evaluate.systems.hybrid_run): these take none,
FUSION_METHODS = ("rrf", "sum", "max", "min", "med", "anz", "mnz", "isr", "log_isr", "logn_isr", "bordafuse",
                  "condorcet")
# these need one weight per fused system,
WEIGHTED_FUSION_METHODS = ("wsum", "wmnz", "mixed", "w_bordafuse", "w_condorcet")
# and these parameters that ranx.optimize_fusion trains on judged queries (or gmnz's gamma, rbc's phi)
TRAINED_FUSION_METHODS = ("bayesfuse", "mapfuse", "posfuse", "probfuse", "segfuse", "slidefuse", "gmnz", "rbc")
FUSION_NORMS = ("min-max", "min_max", "max", "sum", "zmuv", "rank", "borda", "min-max-inverted", "min_max_inverted")


def check_hybrid(s: Mapping[str, Any], where: str) -> None:
    """Config errors of a hybrid system's ``method``, ``norm`` and ``weights`` (what ranx.fuse would refuse in
    the job, after every fused system ran), naming the key."""
    method, norm, weights = s.get("method"), s.get("norm"), s.get("weights")
    if method in TRAINED_FUSION_METHODS:
        raise ConfigError(f"{where}.method: {method!r} needs parameters trained on judged queries "
                          f"(ranx.optimize_fusion), which a hybrid system does not take; use one of "
                          f"{', '.join(FUSION_METHODS + WEIGHTED_FUSION_METHODS)}")
    if method not in FUSION_METHODS + WEIGHTED_FUSION_METHODS:
        raise ConfigError(f"{where}.method: {method!r} is not a ranx fusion method ({', '.join(FUSION_METHODS)}; "
                          f"with weights: {', '.join(WEIGHTED_FUSION_METHODS)})")
    if method in WEIGHTED_FUSION_METHODS and weights is None:
        raise ConfigError(f"{where}.weights: method {method!r} needs one weight per fused system "
                          f"(e.g. weights: [0.5, 0.5] for two)")
    if method in FUSION_METHODS and weights is not None:
        raise ConfigError(f"{where}.weights: method {method!r} takes no weights (weighted methods: "
                          f"{', '.join(WEIGHTED_FUSION_METHODS)}; or drop weights)")
    if norm is not None and norm not in FUSION_NORMS:
        raise ConfigError(f"{where}.norm: {norm!r} is not a ranx normalisation ({', '.join(FUSION_NORMS)}; "
                          f"null = none)")


KINDS = ("clip", "bm25", "hybrid", "rerank", "trec_run", "http", "milvus")
MODEL_KINDS = ("clip",)  # kinds that run a model in the job itself (GPU resources)
# kinds that query a running service: their jobs run where the credentials and the network are (local
# rule evaluate_api, as rerankers); their LIVE_RUNTIME keys are never rerun triggers
LIVE_KINDS = ("http", "milvus")
# kinds whose run also holds the top depth of the judged collection (the sage view is then exact)
COLLECTION_KINDS = ("clip", "bm25")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# per kind, the settings a system takes and their defaults: the schema's (evaluate.systems x-kind-defaults)
DEFAULTS: dict[str, dict[str, Any]] = kind_defaults("evaluate.systems.[]")
COMMON = ("name", "kind", "depth", "sees_judge_text", "version")


def system_settings(system: Mapping[str, Any], depth: int | None = None) -> dict[str, Any]:
    """A system's dict with the kind's defaults filled in (``depth``: evaluate.depth, by default the
    schema's)."""
    if depth is None:
        depth = default("evaluate.systems.[].depth")
    kind = system.get("kind")
    out = {"depth": depth, **DEFAULTS.get(kind, {}), **dict(system)}
    if kind == "rerank":
        out["llm"] = dict(out.get("llm") or {})
    return out


# the settings that decide a clip model's embeddings' values: the model identity (architecture, weights:
# similarity/model.py's model_id) and the numerics a job computes with (precision, device; the pass
# size follows the device kind). The similarity stage's embed rules take exactly these
# (rules/common.smk similarity_model_params + similarity.device); batch_size, num_workers change speed only
EMBEDDING_KEYS = ("model", "pretrained", "precision", "device")


def reuses_similarity_embeddings(system: Mapping[str, Any], similarity: Mapping[str, Any]) -> bool:
    """Whether a ``clip`` system's embeddings are the similarity stage's: the same :data:`EMBEDDING_KEYS`
    as written in the config (defaults filled; ``similarity`` is the config's section). Its job then
    ranks from the files ``embed_images`` / ``embed_queries`` wrote (no model, no GPU, nothing encoded:
    ``evaluate.systems.reused_clip_run``). Decided from the config alone, when the DAG is built:
    settings that resolve to the same values on one machine but are written differently (``device:
    auto`` vs ``cpu``) are not the same, since the jobs may run on other machines."""
    if system.get("kind") != "clip":
        return False
    s = system_settings(system)
    sim = filled("similarity", similarity)
    return all(s.get(k) == sim.get(k) for k in EMBEDDING_KEYS)


def runs_model(system: Mapping[str, Any], similarity: Mapping[str, Any]) -> bool:
    """Whether a system's job loads a model itself (rule ``evaluate_model``, GPU resources): a kind of
    :data:`MODEL_KINDS` that does not reuse the similarity stage's embeddings."""
    return system.get("kind") in MODEL_KINDS and not reuses_similarity_embeddings(system, similarity)


def check_systems(evaluate: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Validate ``evaluate.systems`` (names, kinds, references); errors name the key path."""
    systems = list((evaluate or {}).get("systems") or [])
    depth = int(filled("evaluate", evaluate)["depth"])
    names: dict[str, int] = {}
    out = []
    for i, s in enumerate(systems):
        where = f"evaluate.systems[{i}]"
        if not isinstance(s, Mapping):
            raise ConfigError(f"{where}: must be a mapping with name and kind")
        name, kind = s.get("name"), s.get("kind")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ConfigError(f"{where}.name: {name!r} must be a file-safe token (letters, digits, . _ -; at most "
                              "64 characters, starting with a letter or digit)")
        if name in names:
            raise ConfigError(f"{where}.name: {name!r} is already the name of evaluate.systems[{names[name]}]")
        names[name] = i
        if kind not in KINDS:
            raise ConfigError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}")
        allowed = set(COMMON) | set(DEFAULTS[kind])
        extra = sorted(set(s) - allowed)
        if extra:
            raise ConfigError(f"{where}: key(s) {extra} do not apply to kind {kind!r} (allowed: {sorted(allowed)})")
        out.append(system_settings(s, depth))
    for i, s in enumerate(out):
        where = f"evaluate.systems[{i}]"
        if s["kind"] == "clip" and not s.get("model"):
            raise ConfigError(f"{where}.model: a clip system needs an open_clip model (e.g. ViT-B-32, "
                              "hf-hub:org/repo, local-dir:/path)")
        if s["kind"] == "trec_run" and not s.get("path"):
            raise ConfigError(f"{where}.path: a trec_run system needs the run file's path")
        if s["kind"] == "http":
            check_http(s, where)
        if s["kind"] == "hybrid":
            check_hybrid(s, where)
        if s["kind"] == "milvus":
            check_milvus(s, where)
        refs = s.get("systems") if s["kind"] == "hybrid" else ([s.get("base")] if s["kind"] == "rerank" else [])
        key = "systems" if s["kind"] == "hybrid" else "base"
        if s["kind"] == "hybrid" and len(refs or []) < 2:
            raise ConfigError(f"{where}.systems: a hybrid fuses at least two systems (by name)")
        if s["kind"] == "hybrid" and s.get("weights") is not None and len(s["weights"]) != len(refs):
            raise ConfigError(f"{where}.weights: one weight per fused system ({len(refs)})")
        for r in refs or []:
            if r not in names:
                raise ConfigError(f"{where}.{key}: {r!r} is not the name of a configured system")
            if r == s["name"]:
                raise ConfigError(f"{where}.{key}: a system cannot use its own run")
        if s["kind"] == "rerank" and s["provider"] not in ("openai", "gemini"):
            raise ConfigError(f"{where}.provider: {s['provider']!r} is not openai or gemini")
    # no cycles (hybrid of a rerank of the hybrid ...)
    by = {s["name"]: s for s in out}

    def deps(s):
        return s.get("systems") if s["kind"] == "hybrid" else ([s["base"]] if s["kind"] == "rerank" else [])

    for s in out:
        seen, stack = set(), list(deps(s))
        while stack:
            n = stack.pop()
            if n == s["name"]:
                raise ConfigError(f"evaluate.systems: {s['name']!r} depends on itself through {sorted(seen)}")
            if n not in seen:
                seen.add(n)
                stack += deps(by[n])
    return out


# keys of the live kinds that change speed only (how many requests in flight, how long to wait, how
# often to try, whether a cached answer may be reused, queries per search call): the schema's x-runtime
# keys of an evaluate system that a live kind takes. Never rerun triggers, never in a run's recorded settings
LIVE_RUNTIME = tuple(k for k in runtime_keys("evaluate.systems.[]") if any(k in DEFAULTS[kind] for kind in LIVE_KINDS))


def has_corpus_scope(system: Mapping[str, Any]) -> bool:
    """Whether a system's run ranks the whole corpus (else it ranks the judged pools only: a reranker or
    a trec_run with ``scope: pool``). Only those get the corpus, condensed and sage views."""
    kind = system.get("kind")
    return not (kind in ("rerank", "trec_run") and (system.get("scope") or DEFAULTS[kind]["scope"]) == "pool")


def deepen_systems(deepen: Mapping[str, object], systems: Sequence[Mapping[str, object]]) -> list[str]:
    """The deepen systems (``deepen.systems``, or every corpus-ranked evaluate system), checked: a
    ``ConfigError`` names the key when deepening is enabled without systems or names an unknown or
    pool-only system (here, below the stages, so that ``validate_config`` runs the same check as the
    workflow: docs/deepen.md)."""
    if not deepen.get("enabled"):
        return []
    ranked = [str(s["name"]) for s in systems if has_corpus_scope(s)]
    names = [str(n) for n in (deepen.get("systems") or [])] or ranked
    for i, n in enumerate(deepen.get("systems") or []):
        if n not in {str(s["name"]) for s in systems}:
            raise ConfigError(f"deepen.systems[{i}]: {n!r} is not an evaluate system "
                              f"(evaluate.systems: {[s['name'] for s in systems]})")
        if n not in ranked:
            raise ConfigError(f"deepen.systems[{i}]: {n!r} ranks only the judged pools (nothing to deepen); "
                              f"corpus-ranked systems: {ranked}")
    if len(set(names)) != len(names):
        raise ConfigError(f"deepen.systems: a system is listed twice ({names})")
    if not names:
        raise ConfigError("deepen.enabled: true needs at least one corpus-ranked system in evaluate.systems "
                          "(or set deepen.enabled: false)")
    return names

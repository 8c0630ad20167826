"""Migrating from ``imsearch_benchmaker``, the config: its ``config.toml`` -> this project's config.

``convert_config(upstream_mapping)``: every key upstream documents (docs/upstream.md, "Migrating") is
mapped to this project's config, which is validated before it is written. Keys without an equivalent
are listed, never dropped silently; secrets (``_openai_api_key``, ``_hf_token``, ``_email``) are dropped
with a warning (keys come from environment variables here). Prices keep their meaning: upstream only
ran the OpenAI Batch API and its ``price_per_million_*`` are the prices it paid, i.e. batch prices, so
the imported adapters say ``mode: batch`` with ``prices`` = upstream's and ``batch_discount: 0`` (the
discount is already in the prices and is not applied twice). Its outputs: :mod:`.outputs`.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..config import ConfigError, validate_config
from ..errors import UserError
from ..logs import get_logger
from ..settings_schema import default

__all__ = ["convert_config", "read_toml", "ImportReport", "UPSTREAM_KEYS", "COLUMN_KEYS"]

log = get_logger("upstream")

SECRETS = ("_openai_api_key", "_hf_token", "_email", "_gemini_api_key", "_google_api_key")

COLUMN_KEYS = {
    "column_image": "image", "column_image_id": "image_id", "column_mime_type": "mime_type",
    "column_license": "license", "column_doi": "doi", "column_original_dataset_name": "original_dataset_name",
    "column_query": "query_text", "column_query_id": "query_id", "column_relevance": "relevance_label",
    "column_tags": "tags", "column_summary": "summary", "column_confidence": "confidence",
    "query_plan_seed_image_ids_column": "seed_image_ids",
    "query_plan_candidate_image_ids_column": "candidate_image_ids", "image_url_temp_column": "image_url",
}
PLAN_KEYS = {
    "query_plan_num_seeds": "num_seeds", "query_plan_core_facets": "core_facets",
    "query_plan_off_facets": "off_facets", "query_plan_diversity_facets": "diversity_facets",
    "query_plan_neg_total": "neg_total", "query_plan_neg_hard": "neg_hard",
    "query_plan_neg_nearmiss": "neg_nearmiss", "query_plan_neg_easy": "neg_easy",
    "query_plan_random_seed": "random_seed",
}
OUTPUT_PATHS = ("images_jsonl", "seeds_jsonl", "annotations_jsonl", "query_plan_jsonl", "qrels_jsonl",
                "qrels_with_score_jsonl", "summary_output_dir", "hf_dataset_dir", "hf_dataset_card_path")
# keys that are understood but have no equivalent, with the reason shown in the report
NO_EQUIVALENT = {
    "log_level": "logging: the terminal shows progress and warnings; BENCHMAKER_VERBOSE=1 shows everything",
    "upload_use_local_image_paths": "the export always embeds the image bytes from paths.image_root",
    "_hf_num_proc": "the export writes parquet itself",
    "hf_dataset_card_path": "the dataset card is generated from the data (docs/export.md)",
    "vision_config.stage": "fixed stage names",
    "judge_config.stage": "fixed stage names",
    "judge_config.max_candidates": "never used upstream; pool sizes are plan.*_total",
    "vision_config.price_per_million_image_input_tokens": "the Responses API reports no image tokens",
    "vision_config.price_per_million_image_output_tokens": "the Responses API reports no image tokens",
    "judge_config.price_per_million_image_input_tokens": "the Responses API reports no image tokens",
    "judge_config.price_per_million_image_output_tokens": "the Responses API reports no image tokens",
    "similarity_config.use_safetensors": "open_clip reads safetensors when present",
    "similarity_config.adapter": "similarity always uses open_clip",
}
AUTHOR_FIELDS = ("email", "affiliation", "orcid", "github")
TOP_KEYS = ({"benchmark_name", "benchmark_description", "benchmark_author", "_affiliation", "_orcid", "_github",
             *(f"benchmark_author_{k}" for k in AUTHOR_FIELDS),
             "image_root_dir", "meta_json", "metadata_jsonl", "image_base_url", "_hf_repo_id", "_hf_private",
             "vision_config", "judge_config", "similarity_config"}
            | set(COLUMN_KEYS) | set(PLAN_KEYS) | set(OUTPUT_PATHS) | {"columns_taxonomy", "columns_boolean"}
            | set(SECRETS) | {k for k in NO_EQUIVALENT if "." not in k})
LLM_KEYS = {"adapter", "model", "system_prompt", "user_prompt", "max_output_tokens", "reasoning_effort",
            "image_detail", "completion_window", "price_per_million_input_tokens",
            "price_per_million_cached_input_tokens", "price_per_million_output_tokens",
            "max_images_per_batch", "max_queries_per_batch", "controlled_tag_vocab", "min_tags", "max_tags",
            "vision_metadata_columns", "stage", "max_candidates", "price_per_million_image_input_tokens",
            "price_per_million_image_output_tokens", "temperature"}
SIM_KEYS = {"adapter", "model", "model_name", "device", "torch_dtype", "use_safetensors", "col_name"}
UPSTREAM_KEYS = sorted(TOP_KEYS | {f"vision_config.{k}" for k in LLM_KEYS} | {f"judge_config.{k}" for k in LLM_KEYS}
                       | {f"similarity_config.{k}" for k in SIM_KEYS})

# transformers CLIP names upstream used -> open_clip (architecture, pretrained tag)
HF_TO_OPEN_CLIP = {
    "openai/clip-vit-base-patch32": ("ViT-B-32", "openai"),
    "openai/clip-vit-base-patch16": ("ViT-B-16", "openai"),
    "openai/clip-vit-large-patch14": ("ViT-L-14", "openai"),
    "openai/clip-vit-large-patch14-336": ("ViT-L-14-336", "openai"),
}
DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", None: "auto"}


@dataclass
class ImportReport:
    config_path: str = ""
    benchmark: str = ""
    mapped: list[str] = field(default_factory=list)         # "upstream -> ours"
    unknown: list[str] = field(default_factory=list)        # keys upstream does not document either
    no_equivalent: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    vision_cached: int = 0
    vision_skipped: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [f"wrote {self.config_path} (benchmark {self.benchmark}); check it: benchmaker validate-config "
               f"{self.config_path}"]
        out += [f"  mapped: {m}" for m in self.mapped]
        out += [f"warning: secret {s} dropped: keys come from environment variables here "
                "(OPENAI_API_KEY, HF_TOKEN)" for s in self.secrets]
        out += [f"not imported (no equivalent): {k}" for k in self.no_equivalent]
        out += [f"warning: unknown upstream key {k}: not imported" for k in self.unknown]
        out += [f"note: {n}" for n in self.notes]
        out += [f"wrote {f}" for f in self.files]
        if self.files or self.vision_cached:
            out.append(f"vision: {self.vision_cached} upstream annotation(s) stored as cached answers: the vision "
                       "stage sends no request (and pays nothing) for those images")
            for reason, n in sorted(self.vision_skipped.items()):
                out.append(f"  vision: {n} upstream annotation(s) not reusable: {reason}")
        return out


def _slug(name: str) -> str:
    s = re.sub(r"[^a-z0-9._-]+", "-", str(name).lower()).strip("-._")
    return s or "imported"


def read_toml(path: Path) -> dict:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"upstream config not found: {path}") from None
    if path.suffix.lower() in (".toml", ".tml"):
        try:
            return tomllib.loads(raw.decode("utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"{path}: not valid TOML: {exc}") from None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise UserError(f"{path}: not valid JSON (upstream reads .toml/.tml as TOML, anything else as JSON): "
                        f"{exc}") from None


def _split_judge_prompts(cfg: dict, ad: str, rep: ImportReport) -> None:
    """Upstream's judge wrote the query and labelled in one request; here the queries stage writes it
    from the seed alone, before the judge labels (docs/judge-rules.md, Method). Upstream's judge system
    prompt (the domain: who searches, what counts) instructs both; its user prompt, whose tasks are
    writing query_text and then labelling, becomes the writer's (the labelling keeps the built-in one,
    which gives the query and its narrative)."""
    prompts = cfg["judge"][ad].pop("prompts", None) or {}
    if not prompts:
        return
    cfg["queries"] = {"prompts": dict(prompts)}
    if prompts.get("system"):
        cfg["judge"][ad]["prompts"] = {"system": prompts["system"]}
    rep.mapped = [m for m in rep.mapped if not m.startswith("judge_config.user_prompt")]
    for up, ours in (("system_prompt", "system"), ("user_prompt", "user")):
        if prompts.get(ours):
            rep.mapped.append(f"judge_config.{up} -> queries.prompts.{ours} (the query writer)")
    rep.notes.append("judge: upstream's judge wrote query_text and labelled in one request; here queries are "
                     "written from the seed alone first (queries stage), then labelled: judge_config.system_prompt "
                     "instructs both, judge_config.user_prompt the writer")


def _llm(sec: Mapping[str, Any], stage: str, rep: ImportReport) -> dict:
    out: dict[str, Any] = {"mode": "batch", "image_transport": "url"} if stage == "vision" else {"mode": "batch"}
    for k in ("model", "max_output_tokens", "reasoning_effort", "completion_window", "temperature"):
        if sec.get(k) is not None:
            out[k] = sec[k]
            rep.mapped.append(f"{stage}_config.{k} -> {stage}.openai.{k}")
    if stage == "vision" and sec.get("image_detail") is not None:
        out["image_detail"] = sec["image_detail"]
        rep.mapped.append("vision_config.image_detail -> vision.openai.image_detail")
    prompts = {}
    for up, ours in (("system_prompt", "system"), ("user_prompt", "user")):
        if sec.get(up):
            prompts[ours] = sec[up]
            rep.mapped.append(f"{stage}_config.{up} -> {stage}.openai.prompts.{ours}")
    if prompts:
        out["prompts"] = prompts
    shard = sec.get("max_images_per_batch" if stage == "vision" else "max_queries_per_batch")
    if shard:
        out["max_requests_per_batch"] = int(shard)
        rep.mapped.append(f"{stage}_config.max_{'images' if stage == 'vision' else 'queries'}_per_batch -> "
                          f"{stage}.openai.max_requests_per_batch")
    prices = {}
    for up, ours in (("price_per_million_input_tokens", "input"),
                     ("price_per_million_cached_input_tokens", "cached_input"),
                     ("price_per_million_output_tokens", "output")):
        if sec.get(up) is not None:
            prices[ours] = float(sec[up])
            rep.mapped.append(f"{stage}_config.{up} -> {stage}.openai.prices.{ours}")
    if prices:
        out["prices"] = prices
        out["batch_discount"] = 0.0
        rep.notes.append(f"{stage}: upstream's prices are the Batch API prices it paid; imported with mode: batch "
                         "and batch_discount: 0, so the discount is not applied twice (to run in sync mode, "
                         "set the list prices and remove batch_discount)")
    if stage == "vision" and sec.get("vision_metadata_columns"):
        out["metadata_columns"] = list(sec["vision_metadata_columns"])
        rep.mapped.append("vision_config.vision_metadata_columns -> vision.openai.metadata_columns")
    return out


def convert_config(up: Mapping[str, Any], *, results: str | None = None) -> tuple[dict, ImportReport]:
    """An upstream config mapping -> (a validated benchmaker config, the report); ``results``: the
    results folder (paths.results, by default the schema's)."""
    if results is None:
        results = default("paths.results")
    rep = ImportReport()
    _sort_keys(up, rep)
    cfg: dict[str, Any] = {"benchmark": _benchmark(up, rep), "paths": _paths(up, results, rep)}
    cols = {ours: up[k] for k, ours in COLUMN_KEYS.items() if up.get(k)}
    rep.mapped += [f"{k} -> columns.{ours}" for k, ours in COLUMN_KEYS.items() if up.get(k)]
    vis = up.get("vision_config") or {}
    cfg["facets"] = _facets(up, vis, rep)
    if up.get("image_base_url"):
        cfg["preprocess"] = {"image_base_url": up["image_base_url"]}
        rep.mapped.append("image_base_url -> preprocess.image_base_url")
    cfg.update(_llm_adapters(up, vis, rep))
    cfg["similarity"] = _similarity(up.get("similarity_config") or {}, rep)
    if vis.get("adapter") != "openai" and "model" in cfg["similarity"]:
        cfg.setdefault("vision", {})["clip"] = {k: cfg["similarity"][k] for k in ("model", "pretrained")}
    cfg["plan"] = _plan(up, rep)
    if cols:
        cfg["columns"] = cols
    export = _export(up, rep)
    if export:
        cfg["export"] = export
    rep.no_equivalent += [f"{k} (an output path: outputs go to <paths.results>/<benchmark.name>/)"
                          for k in OUTPUT_PATHS if k in up and k != "hf_dataset_card_path"]
    try:
        validated = validate_config(cfg)
    except ConfigError as exc:
        raise UserError(f"the converted config is not valid: {exc}\n(fix the upstream file, or edit the "
                        "converted config and check it with `benchmaker validate-config`)") from None
    rep.benchmark = validated["benchmark"]["name"]
    return cfg, rep


def _sort_keys(up: Mapping[str, Any], rep: ImportReport) -> None:
    """Report the upstream keys that are unknown, secrets or without an equivalent here."""
    for k in up:
        if k not in TOP_KEYS:
            rep.unknown.append(k)
        elif k in SECRETS:
            rep.secrets.append(k)
        elif k in NO_EQUIVALENT:
            rep.no_equivalent.append(f"{k} ({NO_EQUIVALENT[k]})")
    for name in ("vision_config", "judge_config", "similarity_config"):
        sec = up.get(name) or {}
        known = SIM_KEYS if name == "similarity_config" else LLM_KEYS
        for k in sec:
            full = f"{name}.{k}"
            if k.startswith("_") or k in ("api_key", "openai_api_key"):
                rep.secrets.append(full)
            elif k not in known:
                rep.unknown.append(full)
            elif full in NO_EQUIVALENT:
                rep.no_equivalent.append(f"{full} ({NO_EQUIVALENT[full]})")


def _benchmark(up: Mapping[str, Any], rep: ImportReport) -> dict[str, Any]:
    """The ``benchmark`` section: name (a slug), title, description, the author."""
    name = up.get("benchmark_name") or "imported"
    bench: dict[str, Any] = {"name": _slug(name), "title": str(name)}
    rep.mapped.append("benchmark_name -> benchmark.name (slug) + benchmark.title")
    if up.get("benchmark_description"):
        bench["description"] = up["benchmark_description"]
        rep.mapped.append("benchmark_description -> benchmark.description")
    if up.get("benchmark_author"):
        author = {"name": up["benchmark_author"]}
        for k in AUTHOR_FIELDS:         # upstream's benchmark_author_<field> (older files: _<field>;
            # ``_email`` is a secret there, never the author's)
            for src in (f"benchmark_author_{k}", *((f"_{k}",) if f"_{k}" not in SECRETS else ())):
                if up.get(src):
                    author[k] = str(up[src])
                    rep.mapped.append(f"{src} -> benchmark.authors[0].{k}")
                    break
        bench["authors"] = [author]
        rep.mapped.append("benchmark_author -> benchmark.authors[0].name")
    return bench


def _paths(up: Mapping[str, Any], results: str, rep: ImportReport) -> dict[str, Any]:
    """The ``paths`` section: the image folder, the rights map and the metadata file."""
    paths: dict[str, Any] = {"image_root": up.get("image_root_dir") or "images", "results": results}
    if not up.get("image_root_dir"):
        rep.notes.append("image_root_dir is not set upstream: paths.image_root set to 'images'; fix it")
    else:
        rep.mapped.append("image_root_dir -> paths.image_root")
    if up.get("meta_json"):
        paths["rights_map"] = up["meta_json"]
        rep.mapped.append("meta_json -> paths.rights_map (same default / files / prefixes format)")
    if up.get("metadata_jsonl"):
        paths["metadata_jsonl"] = up["metadata_jsonl"]
        rep.mapped.append("metadata_jsonl -> paths.metadata_jsonl")
    return paths


def _facets(up: Mapping[str, Any], vis: Mapping[str, Any], rep: ImportReport) -> dict[str, Any]:
    """The ``facets`` section: upstream's taxonomy, boolean columns and tag vocabulary and counts."""
    tags: dict[str, Any] = {}
    if vis.get("controlled_tag_vocab"):
        tags["vocabulary"] = list(vis["controlled_tag_vocab"])
        rep.mapped.append("vision_config.controlled_tag_vocab -> facets.tags.vocabulary")
    # upstream's defaults are 14 and 25 tags
    tags["min"] = int(vis.get("min_tags") if vis.get("min_tags") is not None else 14)
    tags["max"] = int(vis.get("max_tags") if vis.get("max_tags") is not None else 25)
    rep.mapped.append("vision_config.min_tags / max_tags -> facets.tags.min / max (upstream defaults 14 / 25)")
    rep.mapped.append("columns_taxonomy / columns_boolean -> facets.taxonomy / facets.boolean")
    return {"taxonomy": dict(up.get("columns_taxonomy") or {}), "boolean": list(up.get("columns_boolean") or []),
            "tags": tags}


def _llm_adapters(up: Mapping[str, Any], vis: Mapping[str, Any], rep: ImportReport) -> dict[str, Any]:
    """The ``vision`` and ``judge`` sections (and ``queries``, upstream's judge prompts split) where upstream
    used an API model (else ours' defaults)."""
    out: dict[str, Any] = {}
    vis_adapter = vis.get("adapter")
    if vis_adapter == "openai":
        out["vision"] = {"adapter": "openai", "openai": _llm(vis, "vision", rep)}
        if not up.get("image_base_url"):
            out["vision"]["openai"]["image_transport"] = "base64"
            rep.notes.append("no image_base_url upstream: vision sends images inline (base64); upstream annotations "
                             "were made from URLs, so they are not reused as cached answers")
    elif vis_adapter:
        rep.notes.append(f"vision_config.adapter {vis_adapter!r} has no equivalent; vision uses the clip adapter")
    judge = up.get("judge_config") or {}
    if judge.get("adapter") in ("openai", "gemini"):
        ad = judge["adapter"]
        out["judge"] = {"adapter": ad, "labels": "binary", ad: _llm(judge, "judge", rep)}
        rep.notes.append("judge: upstream judged binary labels only; imported as judge.labels: binary")
        _split_judge_prompts(out, ad, rep)
    elif judge.get("adapter"):
        rep.notes.append(f"judge_config.adapter {judge['adapter']!r} has no equivalent; judge uses the rules adapter")
    return out


def _similarity(sim: Mapping[str, Any], rep: ImportReport) -> dict[str, Any]:
    """The ``similarity`` section: the model (open_clip's name for upstream's Hugging Face one), device,
    precision and the column of upstream's logit-scaled score."""
    sim_out: dict[str, Any] = {}
    model = sim.get("model") or sim.get("model_name")
    if model:
        if model in HF_TO_OPEN_CLIP:
            sim_out["model"], sim_out["pretrained"] = HF_TO_OPEN_CLIP[model]
        else:
            sim_out["model"], sim_out["pretrained"] = f"hf-hub:{model}", None
            rep.notes.append(f"similarity: {model!r} is loaded as hf-hub:{model} (the repo must hold open_clip "
                             "weights, e.g. apple/DFN5B-CLIP-ViT-H-14-378); else set similarity.model")
        rep.mapped.append(f"similarity_config.{'model' if sim.get('model') else 'model_name'} -> similarity.model "
                          f"{sim_out['model']} / pretrained {sim_out['pretrained']}")
    if sim.get("device"):
        sim_out["device"] = sim["device"]
        rep.mapped.append("similarity_config.device -> similarity.device")
    if "torch_dtype" in sim:
        sim_out["precision"] = DTYPES.get(sim["torch_dtype"], "auto")
        rep.mapped.append("similarity_config.torch_dtype -> similarity.precision")
    col = sim.get("col_name") or "clip_score"
    # upstream's score was CLIP's logit (logit_scale x cosine); here clip_score is the cosine
    sim_out["logit_column"] = "clip_logit" if col == "clip_score" else col
    rep.mapped.append(f"similarity_config.col_name ({col}: upstream's logit-scaled score) -> similarity.logit_column "
                      f"{sim_out['logit_column']} (clip_score here is the cosine)")
    return sim_out


def _plan(up: Mapping[str, Any], rep: ImportReport) -> dict[str, Any]:
    """The ``plan`` section: upstream's query-plan keys, negatives only (it had no positive or neutral
    pools)."""
    plan = {ours: up[k] for k, ours in PLAN_KEYS.items() if up.get(k) is not None}
    rep.mapped += [f"{k} -> plan.{ours}" for k, ours in PLAN_KEYS.items() if up.get(k) is not None]
    if plan.get("random_seed") == 0:
        plan["random_seed"] = 42
        rep.notes.append("query_plan_random_seed 0 meant 42 upstream; imported as 42")
    plan.update({"pos_total": 0, "neutral_total": 0, "diversity_cap": 6})
    rep.notes.append("plan: upstream had no positive or neutral pools: plan.pos_total and plan.neutral_total are 0 "
                     "(raise them to get likely positives and neutrals judged too)")
    for k, v in (("neg_total", 30), ("neg_hard", 15), ("neg_nearmiss", 10), ("neg_easy", 5)):
        plan.setdefault(k, v)
    return plan


def _export(up: Mapping[str, Any], rep: ImportReport) -> dict[str, Any]:
    """The ``export`` section: the Hub repository and its visibility."""
    export: dict[str, Any] = {}
    if up.get("_hf_repo_id"):
        export["repo_id"] = up["_hf_repo_id"]
        rep.mapped.append("_hf_repo_id -> export.repo_id (token from HF_TOKEN)")
    if up.get("_hf_private") is not None:
        export["private"] = bool(up["_hf_private"])
        rep.mapped.append("_hf_private -> export.private")
    return export


# -- outputs ------------------------------------------------------------------------------------------

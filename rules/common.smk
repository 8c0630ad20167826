# Validation, shard list and input functions shared by every rule file. No rules here.
import hashlib
import json
import os
import re
import sys
from pathlib import Path

# the checkout's src/ is first on sys.path (the Snakefile puts it there)
# Snakemake internals used by the workflow: benchmaker/snakemake_compat.py (the Snakefile checked
# the Snakemake version first)
from benchmaker.snakemake_compat import (
    CompatError,
    default_storage_provider,
    is_main_process,
    not_a_trigger,
)

from benchmaker.config import ConfigError, validate_config, results_dir
from benchmaker.config_paths import looks_like_path
from benchmaker.sharding import shard_groups, shard_names
from benchmaker.versions import stage_version

# which settings are rerun triggers: the schema's `x-runtime: true` marker (benchmaker/triggers.py);
# runtime knobs reach jobs through not_a_trigger(...), never as compared params
from benchmaker.triggers import output_settings, split_runtime, without_runtime

try:
    _validated = validate_config(config)
    # missing paths fail here, before planning (benchmaker.preflight; `benchmaker validate-config` runs the same)
    from benchmaker.preflight import workflow_preflight

    workflow_preflight(
        _validated,
        main_process=is_main_process(workflow),
        remote_storage=default_storage_provider(workflow) is not None,
    )
except ConfigError as exc:
    raise WorkflowError(str(exc))
# validate_config checked the config against the schema as the installed package ships it
# (benchmaker/schemas/, as a job in a pod has no checkout; docs/clusters.md) and filled its defaults.
# No second check by snakemake.utils.validate, which read the same schema again with a pure-Python
# YAML parser (~0.2 s of CPU in every Snakemake process, pods and dry runs included).
config.clear()
config.update(_validated)

RESULTS = results_dir(config)
LOGS = f"{RESULTS}/logs"
BENCH = f"{RESULTS}/benchmarks"
SHARDS = shard_names(config["n_shards"])
COLUMNS = config["columns"]
FACETS = config["facets"]
IMAGE_ROOT = config["paths"]["image_root"]
VISION_ADAPTER = config["vision"]["adapter"]
JUDGE_ADAPTER = config["judge"]["adapter"]
API_ADAPTERS = ("openai", "gemini")
# image embeddings cache shared by embed_images and the clip vision adapter (docs/similarity.md)
EMBED_CACHE = (
    config["similarity"]["cache_dir"]
    or f"{config['paths']['results']}/.cache/embeddings"
)


wildcard_constraints:
    shard=r"\d{5}",
    pixels=r"[0-9a-f]{10}",


def _names_regex(names):
    """A wildcard constraint that matches exactly ``names`` (none: nothing)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!x)x"


def optional_path(path):
    """An input that is used only when configured."""
    return [path] if path else []


def preprocess_inputs(wildcards):
    # the controller writes the listing (below); under default storage it is staged like any local input
    out = {"listing": workflow_input(f"{LISTING}/{wildcards.shard}.tsv", folder=False)}
    if config["paths"]["rights_map"]:
        out["rights_map"] = workflow_input(config["paths"]["rights_map"])
    if config["paths"]["metadata_jsonl"]:
        out["metadata"] = workflow_input(config["paths"]["metadata_jsonl"])
    return out


def plan_inputs(wildcards):
    out = {
        "annotations": f"{RESULTS}/annotations.jsonl",
        "images": f"{RESULTS}/images.jsonl",
        # columnar copies of their index columns, written by the merges (benchmaker.columnar)
        "annotations_columns": f"{RESULTS}/annotations.columns.parquet",
        "images_columns": f"{RESULTS}/images.columns.parquet",
    }
    if config["paths"]["pools_file"]:
        # fixed pools (benchmaker.plan.pools): the seeds file is not read then
        out["pools_file"] = workflow_input(config["paths"]["pools_file"])
    elif config["paths"]["seeds_file"]:
        out["seeds_file"] = workflow_input(config["paths"]["seeds_file"])
    return out


def judge_reuse_inputs(wildcards):
    """Labels already paid for (paths.judge_reuse_file, benchmaker.judge.reuse), staged under nrp."""
    if config["paths"]["judge_reuse_file"]:
        return {"reuse": workflow_input(config["paths"]["judge_reuse_file"])}
    return {}


def similarity_model_params():
    """Only what changes image embeddings (never column names or the judge)."""
    sim = config["similarity"]
    return {k: sim[k] for k in ("model", "pretrained", "precision")}


def pixel_model_params(spec):
    """What decides a pixel store's pixels (decode_images): the model, and the pretrained tag (a tag
    may bring its own input size or resize mode; a checkpoint file does not:
    similarity.pixels.pixel_spec). ``spec``: a model section (similarity, vision.clip).
    """
    pretrained = spec.get("pretrained")
    tag = pretrained and not looks_like_path(pretrained)
    return {"model": spec["model"], "pretrained": pretrained if tag else None}


def pixel_key(spec):
    """The folder of a model section's pixel stores, pixels/<key>/ (docs/similarity.md): the first 10
    hex digits of the sha256 of its pixel_model_params, so that two sections whose pixels are decided
    alike (the similarity stage and the clip vision adapter on one model) read one store, and changing
    one section's model never changes the store the other reads."""
    text = json.dumps(pixel_model_params(spec), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def pixel_store(spec, shard="{shard}"):
    """{"pixels": .npy, "pixel_index": .parquet} of a model section's pixel store of ``shard``."""
    base = f"{RESULTS}/pixels/{pixel_key(spec)}/{shard}"
    return {"pixels": f"{base}.npy", "pixel_index": f"{base}.parquet"}


# key -> model section of every pixel store this run decodes: the similarity stage's, and the clip
# vision adapter's (the same key when both decide the pixels alike)
PIXEL_SETS = {pixel_key(config["similarity"]): config["similarity"]}
if VISION_ADAPTER == "clip":
    PIXEL_SETS.setdefault(pixel_key(config["vision"]["clip"]), config["vision"]["clip"])


def public_config():
    """The config as recorded in the dataset card: keys starting with '_' are private and dropped,
    and so are runtime knobs that change no output (benchmaker.triggers.RECORD_DROPS).
    """

    def clean(obj):
        if isinstance(obj, dict):
            return {k: clean(v) for k, v in obj.items() if not str(k).startswith("_")}
        if isinstance(obj, list):
            return [clean(v) for v in obj]
        return obj

    return without_runtime(clean(config))


# -- the losses and cost files that the summary and the export count --------------------------------
# Declared with each stage (benchmaker/stages.py: `losses=`, `costs=`); a `{wildcard}` there is one of
# the sets of items below. The optional ones are counted whenever their stage is part of the run (its
# jobs are in the DAG of `all`), whether or not its report is shown, so that no spend or loss is left
# out of the totals: the evaluate systems when systems are configured, the second judge when the audit
# runs one (rules/audit_common.smk), the deepened systems when deepening is on. The summary and the
# export then wait for those jobs (the evaluate aggregate only when the leaderboard is in the report).
from benchmaker.stages import (
    ESTIMATE_FILE,
    PILOT_COSTS_FILE,
    counted_files,
    counted_stages,
    needs_gpu,
    outside_stages,
)


def counted_items():
    return {
        "shard": SHARDS,
        "evaluate_system": [s["name"] for s in EVAL_SYSTEMS],
        "judge2": [AUDIT["second_judge"]["name"]] if AUDIT_ON and JUDGE2 else [],
        "deepen_system": list(DEEPEN_SYSTEMS) if DEEPEN_ON else [],
    }


def loss_files(wildcards=None):
    """The losses files the report and the card count (losses by stage)."""
    return counted_files("losses", RESULTS, counted_items())


def loss_stages():
    """The stage each of loss_files() is counted under (None: its rows' own): `evaluate: <system>`,
    `deepen: <system>`, `audit_judge2` (benchmaker/stages.py `counted_as`)."""
    return counted_stages("losses", counted_items())


def outside_loss_stages():
    """The stages of loss_stages() that are not the benchmark's own losses (`outside_benchmark`)."""
    return outside_stages(counted_items())


def pilot_cost_files():
    """The pilot's cost rows (`benchmaker estimate --pilot`, benchmaker.estimate.PILOT_COSTS_FILE) when a
    pilot was sent: paid outside the workflow, counted in its totals under their own stage.
    """
    p = f"{RESULTS}/{PILOT_COSTS_FILE}"
    return [p] if os.path.exists(p) else []


def cost_files(wildcards=None):
    """The cost files of the paying stages (empty files for the offline adapters and the systems that
    pay nothing) that the report's and the card's API costs total, and the pilot's (pilot_cost_files).
    """
    return counted_files("costs", RESULTS, counted_items()) + pilot_cost_files()


def cost_stages():
    """The stage each of cost_files() is counted under (its rows are relabelled at read): the stage's
    name, or `evaluate: <system>`, `deepen: <system>` (benchmaker/stages.py `counted_as`); the totals
    name them all, the ones that paid nothing too. The pilot's rows: their own stage (None).
    """
    return counted_stages("costs", counted_items()) + [None] * len(pilot_cost_files())


def estimate_inputs(wildcards=None):
    """{"estimate": <results>/estimate/estimate.json} for the summary when an estimate was recorded
    (`benchmaker estimate --record` or `--pilot`): the report shows it beside the bill.
    """
    p = f"{RESULTS}/{ESTIMATE_FILE}"
    return {"estimate": p} if os.path.exists(p) else {}


def similarity_weight_inputs(wildcards):
    """Local weights as inputs, so that replacing a checkpoint file reruns the embed rules
    (staged to the storage under --profile nrp: rules/cluster.smk)."""
    return model_weight_inputs(config["similarity"])


# -- change detection: the image folder is part of the DAG (docs/architecture.md) ---------------------
# While the Snakefile is parsed (before the DAG exists) the image folder is listed -- one stat per file,
# no image opened -- into shards/listing/{shard}.tsv, and a shard's listing is rewritten only when its
# content changed. Adding, removing or changing images thus makes exactly the affected shards' preprocess
# jobs (and what follows) out of date, and `snakemake -n` shows them. Jobs that Snakemake starts in a
# separate process (cluster jobs, --mode remote/subprocess) parse the Snakefile again: they use the
# listing the controller wrote and never rescan.
from benchmaker.preprocess.listing import write_listings

LISTING = f"{RESULTS}/shards/listing"

if is_main_process(workflow):
    try:
        _listing = write_listings(
            IMAGE_ROOT,
            LISTING,
            config["preprocess"],
            config["n_shards"],
            exclude_dirs=[config["paths"]["results"], ".snakemake"],
        )
    except FileNotFoundError as exc:
        raise WorkflowError(str(exc))
    if _listing.changed:
        _names = ", ".join(_listing.changed[:8]) + (
            ", ..." if len(_listing.changed) > 8 else ""
        )
        print(
            f"benchmaker: {IMAGE_ROOT}: {_listing.files} image file(s); listing of "
            f"{len(_listing.changed)} shard(s) changed ({_names}) -> their preprocess jobs are out of date",
            file=sys.stderr,
        )

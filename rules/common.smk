# Validation, shard list and input functions shared by every rule file. No rules here.
import os
import sys
from pathlib import Path

# the library is importable from an installed environment; the checkout's src/ wins so that the
# workflow always runs the library version it ships with (shared file systems, k8s source archives)
sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from snakemake.utils import validate

from benchmaker.snakemake_compat import CompatError, check_snakemake, not_a_trigger

try:  # Snakemake internals used by the workflow: benchmaker/snakemake_compat.py
    check_snakemake()
except CompatError as exc:
    raise WorkflowError(str(exc))

from benchmaker.config import ConfigError, validate_config, results_dir
from benchmaker.sharding import shard_names
from benchmaker.versions import stage_version

# which settings are rerun triggers: the schema's `x-runtime: true` marker (benchmaker/triggers.py);
# runtime knobs reach jobs through not_a_trigger(...), never as compared params
from benchmaker.triggers import output_settings, split_runtime, without_runtime

try:
    _validated = validate_config(config)
    # missing paths fail here, before planning (benchmaker.preflight; `benchmaker validate-config` runs the same)
    from benchmaker.preflight import workflow_preflight

    workflow_preflight(_validated, workflow)
except ConfigError as exc:
    raise WorkflowError(str(exc))
config.clear()
config.update(_validated)
# the schema as the installed package ships it (benchmaker/schemas/): a job in a pod has no checkout
# (the controller Job's workflow folder is no git repository, so only Snakefiles, scripts and config
# files reach the pods; docs/clusters.md)
from importlib.resources import files as _package_files

validate(
    config, schema=str(_package_files("benchmaker") / "schemas" / "config.schema.yaml")
)

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
from benchmaker.stages import counted_files, counted_stages, outside_stages


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


def cost_files(wildcards=None):
    """The cost files of the paying stages (empty files for the offline adapters and the systems that
    pay nothing) that the report's and the card's API costs total."""
    return counted_files("costs", RESULTS, counted_items())


def cost_stages():
    """The stage each of cost_files() is counted under (its rows are relabelled at read): the stage's
    name, or `evaluate: <system>`, `deepen: <system>` (benchmaker/stages.py `counted_as`); the totals
    name them all, the ones that paid nothing too."""
    return counted_stages("costs", counted_items())


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

if workflow.is_main_process:
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


# ---- evaluate (rules/evaluate.smk, docs/evaluate.md) ----
import re as _re

from benchmaker.evaluate.systems import (
    LIVE_KINDS,
    check_systems,
    has_corpus_scope,
    reuses_similarity_embeddings,
    runs_model,
    sees_judge_text,
)

try:
    EVAL_SYSTEMS = check_systems(config.get("evaluate") or {})
except ConfigError as exc:
    raise WorkflowError(str(exc))
EVAL = f"{RESULTS}/evaluate"
EVAL_BY_NAME = {s["name"]: s for s in EVAL_SYSTEMS}


def _evaluate_baseline():
    """The files of evaluate.compare.baseline (a kept evaluation; a history folder: its latest snapshot)."""
    from benchmaker.evaluate.compare import baseline_files
    from benchmaker.errors import UserError

    base = ((config.get("evaluate") or {}).get("compare") or {}).get("baseline")
    if not base or not EVAL_SYSTEMS:
        return []
    try:
        files = baseline_files(base)
    except UserError as exc:
        raise WorkflowError(f"evaluate.compare.baseline: {exc}")
    if os.path.abspath(os.path.dirname(files[0])) == os.path.abspath(EVAL):
        raise WorkflowError(
            "evaluate.compare.baseline: names this run's own evaluate/ folder; keep a copy first "
            "(benchmaker keep-evaluation RESULTS HISTORY) and name the copy or the history folder"
        )
    return files


# the evaluate rule compares with it (evaluate/comparison.*; the report flags regressions)
EVAL_BASELINE = _evaluate_baseline()
# numba's JIT cache for ranx: per user, shared by every benchmark (compiling costs ~30 s per fresh
# folder otherwise); keyed by numba on source and CPU, so sharing is safe. NUMBA_CACHE_DIR wins.
NUMBA_CACHE = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
    "benchmaker",
    "numba",
)


def evaluate_uses_gpu(system):
    """Whether a system's job runs a model itself (it then gets GPU resources: rule evaluate_model);
    a clip system with the similarity stage's model reuses its embeddings instead (CPU job).
    """
    return runs_model(system, config["similarity"])


def evaluate_report_inputs(wildcards=None):
    """{"evaluation": leaderboard.csv} for summary and export when systems are configured and
    evaluate.report is true (the leaderboard then appears in report.html and the dataset card).
    """
    if EVAL_SYSTEMS and config["evaluate"]["report"]:
        return {
            "evaluation": f"{EVAL}/leaderboard.csv",
            # seed leakage per system (benchmaker.evaluate.leakage)
            "leakage": f"{EVAL}/leakage.json",
        }
    return {}


def _names_regex(names):
    return "|".join(_re.escape(n) for n in names) if names else "(?!x)x"


EVAL_MODEL_NAMES = [s["name"] for s in EVAL_SYSTEMS if evaluate_uses_gpu(s)]
# the systems whose runs rank the whole corpus: the evaluate rule writes their sage view (docs/evaluate.md)
EVAL_SAGE_NAMES = [s["name"] for s in EVAL_SYSTEMS if has_corpus_scope(s)]
# rerankers call an API: like the API vision/judge rules they run on the controller (keys, no time limit);
# so do the live systems (http, milvus): they query a running service where its network and keys are
EVAL_API_NAMES = [
    s["name"] for s in EVAL_SYSTEMS if s["kind"] == "rerank" or s["kind"] in LIVE_KINDS
]
EVAL_OTHER_NAMES = [
    s["name"]
    for s in EVAL_SYSTEMS
    if not evaluate_uses_gpu(s) and s["name"] not in EVAL_API_NAMES
]


def evaluate_system_inputs(wildcards):
    s = EVAL_BY_NAME[wildcards.system]
    out = {"qrels": f"{RESULTS}/qrels.jsonl", "images": f"{RESULTS}/images.jsonl"}
    if s["kind"] == "bm25":
        out["annotations"] = f"{RESULTS}/annotations.jsonl"
    if s["kind"] == "hybrid":
        out["component_runs"] = [f"{EVAL}/runs/{n}.trec" for n in s["systems"]]
    if s["kind"] == "rerank":
        out["component_runs"] = [f"{EVAL}/runs/{s['base']}.trec"]
    if s["kind"] == "trec_run":
        out["external"] = workflow_input(s["path"])
    # the similarity stage's embeddings when the system's model is its model (no model in the job);
    # else local weights (staged under --profile nrp: rules/cluster.smk)
    if reuses_similarity_embeddings(s, config["similarity"]):
        out["image_embeddings"] = expand(
            f"{RESULTS}/embeddings/images/{{shard}}.parquet", shard=SHARDS
        )
        out["query_embeddings"] = f"{RESULTS}/embeddings/queries.parquet"
        out["embed_losses"] = expand(
            f"{RESULTS}/losses/embed/{{shard}}.jsonl", shard=SHARDS
        )
    elif s["kind"] == "clip":
        out.update(model_weight_inputs(s))
    return out


def _evaluate_system(wildcards):
    """The system's own settings, with whether it sees what the judge saw (derived from the systems
    it fuses or reranks): editing another system never reruns this one."""
    s = EVAL_BY_NAME[wildcards.system]
    return {**s, "sees_judge_text": sees_judge_text(s, EVAL_SYSTEMS)}


def evaluate_system_params(wildcards, threads):
    """The `system` param: every setting of the system, runtime knobs included (a function of
    threads, so never compared: not_a_trigger). What reruns it: evaluate_system_triggers.
    """
    return _evaluate_system(wildcards)


def evaluate_system_triggers(wildcards):
    """The part of the system's settings that decides its run (schema evaluate.systems, without the
    `x-runtime: true` knobs: batch size, workers, a reranker's concurrency and polling).
    """
    return output_settings(_evaluate_system(wildcards), "evaluate.systems.[]")


# ---- deepen (rules/deepen.smk, docs/deepen.md): opt-in, after evaluate ----
from benchmaker.deepen.pairs import deepen_systems

try:
    DEEPEN_SYSTEMS = deepen_systems(config.get("deepen") or {}, EVAL_SYSTEMS)
except ConfigError as exc:
    raise WorkflowError(str(exc))
DEEPEN_ON = bool(DEEPEN_SYSTEMS)
DEEPEN = f"{RESULTS}/deepen"


def deepen_report_inputs(wildcards=None):
    """{"deepen": deepen/report.json} for summary and export when deepening is on and deepen.report
    is true (the report and the card then show what deepening changed; the dataset gets the deepened
    qrels)."""
    if DEEPEN_ON and config["deepen"]["report"]:
        return {"deepen": f"{DEEPEN}/report.json"}
    return {}

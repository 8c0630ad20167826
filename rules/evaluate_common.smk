# The evaluate stage's wiring (docs/evaluate.md): its systems from the config, the files each
# system's job reads, its params and triggers, the baseline it compares with. Included by
# rules/evaluate.smk; no rules here (Snakemake's lint wants functions apart from rules).
import re as _re

from benchmaker.evaluate.compare import COMPARISON_FILES as EVAL_COMPARISON_FILES
from benchmaker.evaluate.report import RESULT_FILES as EVAL_RESULT_FILES
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
# the judge's and the vision annotator's model names: the evaluate rule states which evaluated systems
# share their family (circularity, benchmaker.families, docs/trust.md)
from benchmaker.families import pipeline_models

PIPELINE_MODELS = pipeline_models(config)


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
    """{"evaluation": leaderboard.csv, "evaluation_files": its siblings} for summary and export when
    systems are configured and evaluate.report is true (the leaderboard then appears in report.html and
    the dataset card). Both read the result files beside the leaderboard (benchmaker.evaluate.report
    RESULT_FILES, sage/<system>.csv, the comparison with a baseline): each is declared, so that a pod is given it too.
    """
    if EVAL_SYSTEMS and config["evaluate"]["report"]:
        # trust: power and circularity, for the "How far to trust this benchmark" block (docs/trust.md)
        return {
            "evaluation": f"{EVAL}/leaderboard.csv",
            "trust": f"{EVAL}/trust.json",
            "evaluation_files": [
                f"{EVAL}/{name}"
                for name in EVAL_RESULT_FILES
                if name != "leaderboard.csv"
            ]
            + [f"{EVAL}/sage/{n}.csv" for n in EVAL_SAGE_NAMES]
            # the comparison with evaluate.compare.baseline, flagged in the report
            + (
                [f"{EVAL}/{name}" for name in EVAL_COMPARISON_FILES]
                if EVAL_BASELINE
                else []
            ),
        }
    return {}


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
        out["image_embeddings"] = IMAGE_EMBEDDINGS
        out["query_embeddings"] = f"{RESULTS}/embeddings/queries.parquet"
        out["embed_losses"] = EMBED_LOSSES
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

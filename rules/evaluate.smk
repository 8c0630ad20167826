# Evaluate retrieval systems on the benchmark (docs/evaluate.md). One job per configured system
# (evaluate.systems), each writing evaluate/runs/<name>.trec; the `evaluate` rule scores every run with
# ranx and writes the leaderboard, drill-downs and significance tests. Part of `all` only when systems
# are configured; `snakemake evaluate` always works (no systems = an empty leaderboard).
import re as _re

from benchmaker.evaluate.systems import MODEL_KINDS, check_systems, sees_judge_text

try:
    EVAL_SYSTEMS = check_systems(config.get("evaluate") or {})
except ConfigError as exc:
    raise WorkflowError(str(exc))
EVAL = f"{RESULTS}/evaluate"
EVAL_BY_NAME = {s["name"]: s for s in EVAL_SYSTEMS}
NUMBA_CACHE = f"{config['paths']['results']}/.cache/numba"


def evaluate_uses_gpu(system):
    """Whether a system's job runs a model itself (it then gets GPU resources: rule evaluate_model)."""
    return system["kind"] in MODEL_KINDS


def evaluate_report_inputs(wildcards=None):
    """{"evaluation": leaderboard.csv} for summary and export when systems are configured and
    evaluate.report is true (the leaderboard then appears in report.html and the dataset card).
    """
    if EVAL_SYSTEMS and (config.get("evaluate") or {}).get("report", True):
        return {"evaluation": f"{EVAL}/leaderboard.csv"}
    return {}


def _names_regex(names):
    return "|".join(_re.escape(n) for n in names) if names else "(?!x)x"


EVAL_MODEL_NAMES = [s["name"] for s in EVAL_SYSTEMS if evaluate_uses_gpu(s)]
EVAL_OTHER_NAMES = [s["name"] for s in EVAL_SYSTEMS if not evaluate_uses_gpu(s)]


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
        out["external"] = s["path"]
    if s["kind"] == "clip":
        model, pretrained = s["model"], s.get("pretrained")
        if model.startswith("local-dir:"):
            folder = Path(model[len("local-dir:") :]).expanduser()
            files = [folder / "open_clip_config.json"] + [
                f
                for ext in ("safetensors", "bin", "pth")
                for f in folder.glob(f"*.{ext}")
            ]
            out["weights"] = sorted(str(f) for f in files if f.is_file())
        elif pretrained and Path(pretrained).expanduser().is_file():
            out["weights"] = [str(Path(pretrained).expanduser())]
    return out


def evaluate_system_params(wildcards):
    """Only the system's own settings, with whether it sees what the judge saw (derived from the systems
    it fuses or reranks): editing another system never reruns this one."""
    s = EVAL_BY_NAME[wildcards.system]
    return {**s, "sees_judge_text": sees_judge_text(s, EVAL_SYSTEMS)}


rule evaluate_model:
    input:
        unpack(evaluate_system_inputs),
    output:
        run_file=f"{EVAL}/runs/{{system}}.trec",
        meta=f"{EVAL}/runs/{{system}}.json",
        losses=f"{RESULTS}/losses/evaluate/{{system}}.jsonl",
        costs=f"{RESULTS}/costs/evaluate/{{system}}.jsonl",
    log:
        f"{LOGS}/evaluate/{{system}}.log",
    benchmark:
        f"{BENCH}/evaluate/{{system}}.tsv"
    wildcard_constraints:
        system=_names_regex(EVAL_MODEL_NAMES),
    conda:
        "../envs/benchmaker.yaml"
    threads: 3
    resources:
        gpu=1,
        mem_mb=8000,
    params:
        system=evaluate_system_params,
        image_root=IMAGE_ROOT,
        cache_dir=EMBED_CACHE,
        columns=COLUMNS,
        version=stage_version("evaluate"),
    script:
        "../scripts/evaluate_system.py"


rule evaluate_system:
    input:
        unpack(evaluate_system_inputs),
    output:
        run_file=f"{EVAL}/runs/{{system}}.trec",
        meta=f"{EVAL}/runs/{{system}}.json",
        losses=f"{RESULTS}/losses/evaluate/{{system}}.jsonl",
        costs=f"{RESULTS}/costs/evaluate/{{system}}.jsonl",
    log:
        f"{LOGS}/evaluate/{{system}}.log",
    benchmark:
        f"{BENCH}/evaluate/{{system}}.tsv"
    wildcard_constraints:
        system=_names_regex(EVAL_OTHER_NAMES),
    conda:
        "../envs/benchmaker.yaml"
    threads: 1
    resources:
        mem_mb=4000,
    params:
        system=evaluate_system_params,
        image_root=IMAGE_ROOT,
        llm_cache_dir=f"{config['paths']['results']}/.cache/evaluate",
        facets=FACETS,
        columns=COLUMNS,
        numba_cache_dir=NUMBA_CACHE,
        version=stage_version("evaluate"),
    script:
        "../scripts/evaluate_system.py"


rule evaluate:
    input:
        qrels=f"{RESULTS}/qrels.jsonl",
        images=f"{RESULTS}/images.jsonl",
        annotations=f"{RESULTS}/annotations.jsonl",
        runs=[f"{EVAL}/runs/{s['name']}.trec" for s in EVAL_SYSTEMS],
        metas=[f"{EVAL}/runs/{s['name']}.json" for s in EVAL_SYSTEMS],
        image_embeddings=(
            expand(f"{RESULTS}/embeddings/images/{{shard}}.parquet", shard=SHARDS)
            if EVAL_SYSTEMS
            else []
        ),
    output:
        leaderboard_csv=f"{EVAL}/leaderboard.csv",
        leaderboard_json=f"{EVAL}/leaderboard.json",
        drilldown=f"{EVAL}/drilldown.csv",
        significance_csv=f"{EVAL}/significance.csv",
        per_query=f"{EVAL}/per_query.csv",
    log:
        f"{LOGS}/evaluate.log",
    benchmark:
        f"{BENCH}/evaluate.tsv"
    conda:
        "../envs/benchmaker.yaml"
    params:
        settings={
            k: v
            for k, v in config["evaluate"].items()
            if k not in ("systems", "report")
        },
        facets=FACETS,
        columns=COLUMNS,
        numba_cache_dir=NUMBA_CACHE,
        version=stage_version("evaluate"),
    script:
        "../scripts/evaluate.py"

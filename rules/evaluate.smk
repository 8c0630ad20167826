# Evaluate retrieval systems on the benchmark (docs/evaluate.md). One job per configured system
# (evaluate.systems), each writing evaluate/runs/<name>.trec; the `evaluate` rule scores every run with
# ranx and writes the leaderboard, drill-downs and significance tests, and the sage view of every
# corpus-ranked run (evaluate/sage/<name>.csv, sage_leaderboard.csv: as the Sage evaluator reports it).
# Part of `all` only when systems are configured; `snakemake evaluate` always works (no systems = an
# empty leaderboard).
# Helpers (EVAL_SYSTEMS, evaluate_uses_gpu, input/param functions) live in rules/evaluate_common.smk.
# Resources: a GPU (gpu_resources, rules/cluster.smk) only for the systems that run a model
# (evaluate_model: clip, unless its model is the similarity stage's: then evaluate_system ranks that
# stage's embeddings files, evaluate_settings.reuses_similarity_embeddings); mem_mb from the input
# sizes (benchmaker/resources.py, rules/resources.smk, where evaluate_model_mem_mb lives: Snakemake's
# lint wants no functions beside rules).


include: "evaluate_common.smk"


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
    # a model load, then the evaluate aggregate: the longest chain after the judge, so it starts
    # before bm25 and embed_queries when cores are scarce
    priority: 1
    conda:
        "../envs/benchmaker.yaml"
    # the main process feeds the model; a clip system's num_workers DataLoader processes decode images
    # (as embed_images); a milvus system embeds its queries only (no such setting: no workers)
    threads: lambda wc: int(EVAL_BY_NAME[wc.system].get("num_workers", 0)) + 1
    resources:
        **gpu_resources(needs_gpu("evaluate_model")),
        mem_mb=evaluate_model_mem_mb,
        runtime=evaluate_model_runtime,
    params:
        system=evaluate_system_params,
        triggers=evaluate_system_triggers,
        image_root=IMAGE_ROOT,
        cache_dir=not_a_trigger(EMBED_CACHE),
        columns=COLUMNS,
        version=stage_version("evaluate_system"),
    script:
        "../scripts/stage.py"


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
    # on the evaluate aggregate's chain too (a few seconds' work: bm25, or a clip system ranking the
    # similarity stage's embeddings, as in the example): before the audit jobs when cores are scarce
    priority: 1
    conda:
        "../envs/benchmaker.yaml"
    threads: 1
    resources:
        **gpu_resources(needs_gpu("evaluate_system")),
        mem_mb=RES.mem_mb("evaluate_system"),
    params:
        system=evaluate_system_params,
        triggers=evaluate_system_triggers,
        image_root=IMAGE_ROOT,
        llm_cache_dir=f"{config['paths']['results']}/.cache/evaluate",
        # rerank only: Batch API state (llm.mode: batch; its journal never submits twice) and the
        # crash-safe record of every paid request (providers/ledger.py), both outside the outputs
        batch_dir=lambda wc: f"{RESULTS}/.batches/evaluate/{wc.system}",
        ledger=lambda wc: f"{RESULTS}/.ledger/evaluate/{wc.system}.jsonl",
        benchmark=config["benchmark"]["name"],
        facets=FACETS,
        columns=COLUMNS,
        numba_cache_dir=not_a_trigger(NUMBA_CACHE),
        version=stage_version("evaluate_system"),
    script:
        "../scripts/stage.py"


# rerankers (API-bound): the same job as a local rule, as for the API vision/judge rules, so that they
# run where the API keys are and never under a cluster job's time limit (docs/clusters.md)
use rule evaluate_system as evaluate_api with:
    wildcard_constraints:
        system=_names_regex(EVAL_API_NAMES),


# (`localrule:` is not carried by `use rule ... with:`)
localrules:
    evaluate_api,


rule evaluate:
    input:
        qrels=f"{RESULTS}/qrels.jsonl",
        images=f"{RESULTS}/images.jsonl",
        annotations=f"{RESULTS}/annotations.jsonl",
        runs=[f"{EVAL}/runs/{s['name']}.trec" for s in EVAL_SYSTEMS],
        metas=[f"{EVAL}/runs/{s['name']}.json" for s in EVAL_SYSTEMS],
        image_embeddings=IMAGE_EMBEDDINGS if EVAL_SYSTEMS else [],
        # under a default storage (NRP) the folder the config names, staged (rules/cluster.smk)
        baseline=(
            workflow_input(config["evaluate"]["compare"]["baseline"])
            if STAGING and EVAL_BASELINE
            else EVAL_BASELINE
        ),
    output:
        leaderboard_csv=f"{EVAL}/leaderboard.csv",
        leaderboard_json=f"{EVAL}/leaderboard.json",
        drilldown=f"{EVAL}/drilldown.csv",
        significance_csv=f"{EVAL}/significance.csv",
        per_query=f"{EVAL}/per_query.csv",
        sage_leaderboard=f"{EVAL}/sage_leaderboard.csv",
        sage=[f"{EVAL}/sage/{n}.csv" for n in EVAL_SAGE_NAMES],
        # comparison.csv first (the stage writes the three files beside it: compare.COMPARISON_FILES)
        comparison=(
            [f"{EVAL}/{name}" for name in EVAL_COMPARISON_FILES]
            if EVAL_BASELINE
            else []
        ),
        # how far to trust it: power of the comparisons, circularity (benchmaker.evaluate.trust)
        trust=f"{EVAL}/trust.json",
        power=f"{EVAL}/power.csv",
        # how much the queries favour their seeds (benchmaker.evaluate.leakage, docs/evaluate.md)
        leakage=f"{EVAL}/leakage.json",
    log:
        f"{LOGS}/evaluate.log",
    benchmark:
        f"{BENCH}/evaluate.tsv"
    conda:
        "../envs/benchmaker.yaml"
    resources:
        mem_mb=RES.mem_mb("evaluate"),
    params:
        settings={
            k: v
            for k, v in config["evaluate"].items()
            if k not in ("systems", "report")
        },
        facets=FACETS,
        columns=COLUMNS,
        # the judge's and the vision annotator's models: circularity (benchmaker.families)
        models=PIPELINE_MODELS,
        numba_cache_dir=not_a_trigger(NUMBA_CACHE),
        version=stage_version("evaluate"),
    script:
        "../scripts/stage.py"

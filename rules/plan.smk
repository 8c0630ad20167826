rule plan:
    input:
        unpack(plan_inputs),
    output:
        plan=f"{RESULTS}/query_plan.jsonl",
        losses=f"{RESULTS}/losses/plan.jsonl",
    log:
        f"{LOGS}/plan.log",
    benchmark:
        f"{BENCH}/plan.tsv"
    conda:
        "../envs/benchmaker.yaml"
    threads: 2
    resources:
        mem_mb=RES.mem_mb("plan"),
        runtime=RES.runtime("plan"),
    params:
        settings=config["plan"],
        facets=FACETS,
        benchmark_name=config["benchmark"]["name"],
        columns=COLUMNS,
        version=stage_version("plan"),
    script:
        "../scripts/stage.py"

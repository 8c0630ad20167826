rule export:
    input:
        # the judge audit's report when the audit is enabled (rules/audit.smk)
        unpack(audit_input),
        # the leaderboard, only when evaluate.systems are configured (rules/evaluate.smk)
        unpack(evaluate_report_inputs),
        # the deepening report, only when deepen.enabled (rules/deepen.smk)
        unpack(deepen_report_inputs),
        # the losses and cost files of the stages (benchmaker/stages.py; rules/common.smk)
        losses=loss_files(),
        costs=cost_files(),
        images=f"{RESULTS}/images.jsonl",
        quarantine=f"{RESULTS}/quarantine.jsonl",
        annotations=f"{RESULTS}/annotations.jsonl",
        plan=f"{RESULTS}/query_plan.jsonl",
        scored=f"{RESULTS}/qrels_with_score.jsonl",
        summary=f"{RESULTS}/summary",
    output:
        dataset=directory(f"{RESULTS}/hf_dataset"),
    log:
        f"{LOGS}/export.log",
    benchmark:
        f"{BENCH}/export.tsv"
    conda:
        "../envs/benchmaker.yaml"
    resources:
        mem_mb=RES.mem_mb("export"),
        runtime=RES.runtime("export"),
        disk_mb=RES.disk_mb("export"),
    params:
        # the stage each losses and cost file is counted under, and the losses not the benchmark's
        # own (rules/common.smk)
        loss_stages=loss_stages(),
        cost_stages=cost_stages(),
        outside_stages=outside_loss_stages(),
        settings=config["export"],
        benchmark_meta=config["benchmark"],
        facets=FACETS,
        columns=COLUMNS,
        image_root=IMAGE_ROOT,
        similarity=similarity_model_params(),
        public_config=public_config(),
        version=stage_version("export"),
    script:
        "../scripts/stage.py"


# Explicit target, never part of `all`: snakemake upload (needs HF_TOKEN and export.repo_id).
rule upload:
    input:
        dataset=f"{RESULTS}/hf_dataset",
    output:
        receipt=f"{RESULTS}/upload.json",
    log:
        f"{LOGS}/upload.log",
    localrule: True
    conda:
        "../envs/benchmaker.yaml"
    resources:
        mem_mb=RES.mem_mb("submit"),
    params:
        settings=config["export"],
    script:
        "../scripts/stage.py"

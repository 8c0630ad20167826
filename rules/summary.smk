rule summary:
    input:
        # the judge audit's report when the audit is enabled (rules/audit.smk)
        unpack(audit_input),
        # the leaderboard, only when evaluate.systems are configured (rules/evaluate.smk)
        unpack(evaluate_report_inputs),
        # the deepening report, only when deepen.enabled (rules/deepen.smk)
        unpack(deepen_report_inputs),
        # the recorded estimate, only when `benchmaker estimate --record/--pilot` wrote one (rules/common.smk)
        unpack(estimate_inputs),
        # the losses and cost files of the stages (benchmaker/stages.py; rules/common.smk)
        losses=loss_files(),
        costs=cost_files(),
        images=f"{RESULTS}/images.jsonl",
        quarantine=f"{RESULTS}/quarantine.jsonl",
        annotations=f"{RESULTS}/annotations.jsonl",
        plan=f"{RESULTS}/query_plan.jsonl",
        scored=f"{RESULTS}/qrels_with_score.jsonl",
    output:
        summary=directory(f"{RESULTS}/summary"),
    log:
        f"{LOGS}/summary.log",
    benchmark:
        f"{BENCH}/summary.tsv"
    conda:
        "../envs/benchmaker.yaml"
    # the stage and its chart-rendering helper process (benchmaker.chart_png) work side by side
    threads: 2
    resources:
        mem_mb=RES.mem_mb("summary"),
        runtime=RES.runtime("summary"),
    params:
        # the stage each losses and cost file is counted under, and the losses not the benchmark's
        # own (rules/common.smk)
        loss_stages=loss_stages(),
        cost_stages=cost_stages(),
        outside_stages=outside_loss_stages(),
        settings=config["summary"],
        facets=FACETS,
        columns=COLUMNS,
        image_root=IMAGE_ROOT,
        # what the report shows of the benchmark (the card, export's, shows all of it)
        benchmark_meta={
            k: config["benchmark"][k]
            for k in (
                "name",
                "title",
                "description",
                "version",
                "smoke_test",
                "smoke_reason",
            )
        },
        version=stage_version("summary"),
    script:
        "../scripts/stage.py"

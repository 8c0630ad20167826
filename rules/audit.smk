# Judge audit (docs/audit.md): a stratified sample of judged pairs -> labelling files for people ->
# agreement of the judge with people (and with a second judge) -> audit/report/, read by the summary
# and the dataset card. Human label files are inputs of audit_report only: labels arriving later never
# re-draw the sample (audit_sample reads qrels, plan, annotations and, for its rank stratum, the evaluate
# stage's runs: nothing the audit writes).


include: "audit_common.smk"


if AUDIT_ON:

    rule audit_sample:
        input:
            qrels=f"{RESULTS}/qrels.jsonl",
            plan=f"{RESULTS}/query_plan.jsonl",
            annotations=f"{RESULTS}/annotations.jsonl",
            # the rank stratum (audit.strata: rank): the evaluated systems' runs, when systems are configured
            runs=audit_sample_runs,
        output:
            sample=f"{RESULTS}/audit/sample.jsonl",
            sample_meta=f"{RESULTS}/audit/sample.json",
        log:
            f"{LOGS}/audit_sample.log",
        benchmark:
            f"{BENCH}/audit_sample.tsv"
        localrule: True
        conda:
            "../envs/benchmaker.yaml"
        params:
            settings=audit_sample_settings(),
            systems=audit_sample_systems(),
            facets=FACETS,
            columns=COLUMNS,
            labels=config["judge"]["labels"],
            benchmark=config["benchmark"]["name"],
            version=stage_version("audit_sample"),
        script:
            "../scripts/stage.py"

    rule audit_labelling:
        input:
            sample=f"{RESULTS}/audit/sample.jsonl",
            sample_meta=f"{RESULTS}/audit/sample.json",
            images=f"{RESULTS}/images.jsonl",
        output:
            labelling=directory(f"{RESULTS}/audit/labelling"),
        log:
            f"{LOGS}/audit_labelling.log",
        benchmark:
            f"{BENCH}/audit_labelling.tsv"
        conda:
            "../envs/benchmaker.yaml"
        params:
            settings={
                k: AUDIT[k]
                for k in (
                    "show_judge_label",
                    "thumbnail_max_side",
                    "label_studio_image_prefix",
                )
            },
            image_root=IMAGE_ROOT,
            columns=COLUMNS,
            labels=config["judge"]["labels"],
            # what the page shows of the benchmark (its title)
            benchmark_meta={k: config["benchmark"][k] for k in ("name", "title")},
            version=stage_version("audit_labelling"),
        script:
            "../scripts/stage.py"

    if JUDGE2:

        rule audit_judge2:
            input:
                unpack(judge2_inputs),
            output:
                sub_plan=f"{JUDGE2_DIR}/plan.jsonl",
                qrels=f"{JUDGE2_DIR}/qrels.jsonl",
                losses=f"{JUDGE2_DIR}/losses.jsonl",
                costs=f"{JUDGE2_DIR}/costs.jsonl",
            log:
                f"{LOGS}/audit_judge2.log",
            benchmark:
                f"{BENCH}/audit_judge2.tsv"
            localrule: JUDGE2["adapter"] in API_ADAPTERS
            conda:
                "../envs/benchmaker.yaml"
            params:
                adapter=JUDGE2["adapter"],
                # every setting reaches the job; only those deciding labels are compared
                settings=not_a_trigger(judge_settings(JUDGE2)),
                triggers=judge_settings(output_settings(JUDGE2, "judge")),
                scope=AUDIT["second_judge"]["scope"],
                facets=FACETS,
                image_root=IMAGE_ROOT,
                columns=COLUMNS,
                cache_dir=f"{config['paths']['results']}/.cache/judge-audit/{AUDIT['second_judge']['name']}",
                # crash-safe record of every paid request (providers/ledger.py): outside the outputs
                ledger=f"{RESULTS}/.ledger/audit-judge2/{AUDIT['second_judge']['name']}.jsonl",
                version=stage_version("audit_judge2"),
            script:
                "../scripts/stage.py"

    rule audit_report:
        input:
            unpack(audit_report_inputs),
        output:
            report=directory(AUDIT_REPORT),
        log:
            f"{LOGS}/audit_report.log",
        benchmark:
            f"{BENCH}/audit_report.tsv"
        conda:
            "../envs/benchmaker.yaml"
        params:
            settings={
                k: AUDIT[k]
                for k in (
                    "seed",
                    "facets",
                    "require_complete",
                    "bootstrap",
                    "confidence",
                    "metrics",
                )
            },
            human_labels=AUDIT["human_labels"],
            judge2_name=AUDIT["second_judge"]["name"] if JUDGE2 else None,
            judge2_scope=AUDIT["second_judge"]["scope"] if JUDGE2 else "sample",
            systems=evaluate_systems(),
            labels=config["judge"]["labels"],
            facets=FACETS,
            columns=COLUMNS,
            # ranx's JIT cache, the evaluate stage's (the audit's ranking hands ranx the same codes)
            numba_cache_dir=not_a_trigger(NUMBA_CACHE),
            version=stage_version("audit_report"),
        script:
            "../scripts/stage.py"

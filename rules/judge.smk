# Judge: a label per planned candidate, against the query written before from the seed alone
# (queries.jsonl, rules/queries.smk: the judge never writes one). API adapters in batch mode run as
# judge_build -> judge_submit -> judge_collect; everything else as the single `judge` rule. Outputs
# either way: qrels.jsonl, losses/judge.jsonl, costs/judge.jsonl (empty for `rules`).
# Labels already paid for (paths.judge_reuse_file) are an input of the rules that decide what is sent
# (benchmaker.judge.reuse): a query they fully cover is answered from the file.
# Which settings each rule gets: benchmaker.providers.settings (imported in rules/vision.smk).

JUDGE_SETTINGS = judge_settings(config["judge"])
# what decides the judge's output: all but the `x-runtime: true` knobs (benchmaker/triggers.py)
JUDGE_TRIGGERS = judge_settings(output_settings(config["judge"], "judge"))
JUDGE_BATCH = is_batch(config["judge"])

if JUDGE_BATCH:

    rule judge_build:
        input:
            unpack(judge_reuse_inputs),
            plan=f"{RESULTS}/query_plan.jsonl",
            queries=f"{RESULTS}/queries.jsonl",
            annotations=f"{RESULTS}/annotations.jsonl",
            images=f"{RESULTS}/images.jsonl",
        output:
            requests=f"{RESULTS}/api/judge/requests.jsonl",
            manifest=f"{RESULTS}/api/judge/manifest.jsonl",
        log:
            f"{LOGS}/judge_build.log",
        benchmark:
            f"{BENCH}/judge_build.tsv"
        conda:
            "../envs/benchmaker.yaml"
        threads: 2
        resources:
            mem_mb=RES.mem_mb("judge"),
        params:
            settings=judge_settings(config["judge"], requests_only=True),
            adapter=JUDGE_ADAPTER,
            facets=FACETS,
            image_root=IMAGE_ROOT,
            columns=COLUMNS,
            cache_dir=f"{config['paths']['results']}/.cache/judge",
            version=stage_version("judge"),
        script:
            "../scripts/stage.py"

    rule judge_submit:
        input:
            requests=f"{RESULTS}/api/judge/requests.jsonl",
        output:
            submitted=f"{RESULTS}/api/judge/submitted.json",
        log:
            f"{LOGS}/judge_submit.log",
        localrule: True
        conda:
            "../envs/benchmaker.yaml"
        resources:
            mem_mb=RES.mem_mb("submit"),
        params:
            settings=not_a_trigger(JUDGE_SETTINGS),
            adapter=JUDGE_ADAPTER,
            state_dir=f"{RESULTS}/.batches/judge/all",
            benchmark=config["benchmark"]["name"],
            version=stage_version("judge"),
        script:
            "../scripts/stage.py"

    rule judge_collect:
        input:
            unpack(judge_reuse_inputs),
            plan=f"{RESULTS}/query_plan.jsonl",
            queries=f"{RESULTS}/queries.jsonl",
            annotations=f"{RESULTS}/annotations.jsonl",
            images=f"{RESULTS}/images.jsonl",
            manifest=f"{RESULTS}/api/judge/manifest.jsonl",
            submitted=f"{RESULTS}/api/judge/submitted.json",
        output:
            qrels=f"{RESULTS}/qrels.jsonl",
            losses=f"{RESULTS}/losses/judge.jsonl",
            costs=f"{RESULTS}/costs/judge.jsonl",
        log:
            f"{LOGS}/judge_collect.log",
        benchmark:
            f"{BENCH}/judge_collect.tsv"
        localrule: True
        conda:
            "../envs/benchmaker.yaml"
        resources:
            mem_mb=RES.mem_mb("judge"),
        params:
            settings=not_a_trigger(JUDGE_SETTINGS),
            triggers=JUDGE_TRIGGERS,
            adapter=JUDGE_ADAPTER,
            facets=FACETS,
            image_root=IMAGE_ROOT,
            columns=COLUMNS,
            state_dir=f"{RESULTS}/.batches/judge/all",
            benchmark=config["benchmark"]["name"],
            cache_dir=f"{config['paths']['results']}/.cache/judge",
            version=stage_version("judge"),
        script:
            "../scripts/stage.py"

else:

    rule judge:
        input:
            unpack(judge_reuse_inputs),
            plan=f"{RESULTS}/query_plan.jsonl",
            queries=f"{RESULTS}/queries.jsonl",
            annotations=f"{RESULTS}/annotations.jsonl",
            images=f"{RESULTS}/images.jsonl",
        output:
            qrels=f"{RESULTS}/qrels.jsonl",
            losses=f"{RESULTS}/losses/judge.jsonl",
            costs=f"{RESULTS}/costs/judge.jsonl",
        log:
            f"{LOGS}/judge.log",
        benchmark:
            f"{BENCH}/judge.tsv"
        localrule: JUDGE_ADAPTER in API_ADAPTERS
        conda:
            "../envs/benchmaker.yaml"
        resources:
            mem_mb=RES.mem_mb("judge"),
            runtime=RES.runtime("judge"),
        params:
            adapter=JUDGE_ADAPTER,
            settings=not_a_trigger(JUDGE_SETTINGS),
            triggers=JUDGE_TRIGGERS,
            facets=FACETS,
            image_root=IMAGE_ROOT,
            columns=COLUMNS,
            cache_dir=f"{config['paths']['results']}/.cache/judge",
            # crash-safe record of every paid request (providers/ledger.py): outside the outputs
            ledger=f"{RESULTS}/.ledger/judge/all.jsonl",
            version=stage_version("judge"),
        script:
            "../scripts/stage.py"

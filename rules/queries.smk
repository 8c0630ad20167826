# Queries: each planned query written from its seed image(s) alone (benchmaker.queries), before the
# judge labels. The writer runs on the judge's adapter: API adapters in batch mode run as
# queries_build -> queries_submit -> queries_collect, everything else as the single `queries` rule.
# Outputs either way: queries.jsonl, losses/queries.jsonl, costs/queries.jsonl (empty for `rules`).
# Queries that paths.judge_reuse_file fully labels keep the file's text (no request).
# Which settings: benchmaker.providers.settings.query_settings (the judge's provider settings less
# what only labelling reads, plus the `queries` section).

from benchmaker.providers.settings import query_settings

QUERY_SETTINGS = query_settings(config["queries"], config["judge"])
# what decides the queries: all but the `x-runtime: true` knobs (benchmaker/triggers.py)
QUERY_TRIGGERS = query_settings(
    output_settings(config["queries"], "queries"),
    output_settings(config["judge"], "judge"),
)
# the judge's scale decides which queries the reuse file answers (benchmaker.reuse)
REUSE_LABELS = (
    config["judge"]["labels"] if config["paths"]["judge_reuse_file"] else None
)

if is_batch(config["judge"]):  # the writer runs on the judge's adapter and mode

    rule queries_build:
        input:
            unpack(judge_reuse_inputs),
            plan=f"{RESULTS}/query_plan.jsonl",
            annotations=f"{RESULTS}/annotations.jsonl",
            images=f"{RESULTS}/images.jsonl",
        output:
            requests=f"{RESULTS}/api/queries/requests.jsonl",
            manifest=f"{RESULTS}/api/queries/manifest.jsonl",
        log:
            f"{LOGS}/queries_build.log",
        benchmark:
            f"{BENCH}/queries_build.tsv"
        conda:
            "../envs/benchmaker.yaml"
        threads: 2
        resources:
            mem_mb=RES.mem_mb("queries"),
        params:
            settings=query_settings(
                config["queries"], config["judge"], requests_only=True
            ),
            adapter=JUDGE_ADAPTER,
            facets=FACETS,
            image_root=IMAGE_ROOT,
            columns=COLUMNS,
            reuse_labels=REUSE_LABELS,
            cache_dir=f"{config['paths']['results']}/.cache/queries",
            version=stage_version("queries"),
        script:
            "../scripts/stage.py"

    rule queries_submit:
        input:
            requests=f"{RESULTS}/api/queries/requests.jsonl",
        output:
            submitted=f"{RESULTS}/api/queries/submitted.json",
        log:
            f"{LOGS}/queries_submit.log",
        localrule: True
        conda:
            "../envs/benchmaker.yaml"
        resources:
            mem_mb=RES.mem_mb("submit"),
        params:
            settings=not_a_trigger(QUERY_SETTINGS),
            adapter=JUDGE_ADAPTER,
            state_dir=f"{RESULTS}/.batches/queries/all",
            benchmark=config["benchmark"]["name"],
            version=stage_version("queries"),
        script:
            "../scripts/stage.py"

    rule queries_collect:
        input:
            unpack(judge_reuse_inputs),
            plan=f"{RESULTS}/query_plan.jsonl",
            annotations=f"{RESULTS}/annotations.jsonl",
            images=f"{RESULTS}/images.jsonl",
            manifest=f"{RESULTS}/api/queries/manifest.jsonl",
            submitted=f"{RESULTS}/api/queries/submitted.json",
        output:
            queries=f"{RESULTS}/queries.jsonl",
            losses=f"{RESULTS}/losses/queries.jsonl",
            costs=f"{RESULTS}/costs/queries.jsonl",
        log:
            f"{LOGS}/queries_collect.log",
        benchmark:
            f"{BENCH}/queries_collect.tsv"
        localrule: True
        conda:
            "../envs/benchmaker.yaml"
        resources:
            mem_mb=RES.mem_mb("queries"),
        params:
            settings=not_a_trigger(QUERY_SETTINGS),
            triggers=QUERY_TRIGGERS,
            adapter=JUDGE_ADAPTER,
            facets=FACETS,
            image_root=IMAGE_ROOT,
            columns=COLUMNS,
            reuse_labels=REUSE_LABELS,
            state_dir=f"{RESULTS}/.batches/queries/all",
            benchmark=config["benchmark"]["name"],
            cache_dir=f"{config['paths']['results']}/.cache/queries",
            version=stage_version("queries"),
        script:
            "../scripts/stage.py"

else:

    rule queries:
        input:
            unpack(judge_reuse_inputs),
            plan=f"{RESULTS}/query_plan.jsonl",
            annotations=f"{RESULTS}/annotations.jsonl",
            images=f"{RESULTS}/images.jsonl",
        output:
            queries=f"{RESULTS}/queries.jsonl",
            losses=f"{RESULTS}/losses/queries.jsonl",
            costs=f"{RESULTS}/costs/queries.jsonl",
        log:
            f"{LOGS}/queries.log",
        benchmark:
            f"{BENCH}/queries.tsv"
        localrule: JUDGE_ADAPTER in API_ADAPTERS
        conda:
            "../envs/benchmaker.yaml"
        resources:
            mem_mb=RES.mem_mb("queries"),
            runtime=RES.runtime("queries"),
        params:
            adapter=JUDGE_ADAPTER,
            settings=not_a_trigger(QUERY_SETTINGS),
            triggers=QUERY_TRIGGERS,
            facets=FACETS,
            image_root=IMAGE_ROOT,
            columns=COLUMNS,
            reuse_labels=REUSE_LABELS,
            cache_dir=f"{config['paths']['results']}/.cache/queries",
            # crash-safe record of every paid request (providers/ledger.py): outside the outputs
            ledger=f"{RESULTS}/.ledger/queries/all.jsonl",
            version=stage_version("queries"),
        script:
            "../scripts/stage.py"

# Pool deepening (docs/deepen.md), opt-in (deepen.enabled; overlay config/deepen.yaml). One
# `deepen_system` job per deepen system judges the unjudged images of its top k that it owns (every job
# computes the same assignment from the same runs: no pair is judged twice), with the judge's adapter,
# settings, prompts, response cache and a crash-safe ledger; then one `deepen` job merges the labels
# with their provenance, scores every run again on the deepened qrels (the evaluate aggregate) and
# writes the report with leave-one-system-out. Static: 1 + len(systems) jobs, no checkpoint.
# DEEPEN_ON, DEEPEN_SYSTEMS, deepen_report_inputs: rules/deepen_common.smk.


include: "deepen_common.smk"


DEEPEN_SETTINGS = {
    **{
        k: v
        for k, v in (config.get("deepen") or {}).items()
        if k not in ("enabled", "report")
    },
    "systems": DEEPEN_SYSTEMS,
}

if DEEPEN_ON:

    rule deepen_system:
        input:
            qrels=f"{RESULTS}/qrels.jsonl",
            plan=f"{RESULTS}/query_plan.jsonl",
            annotations=f"{RESULTS}/annotations.jsonl",
            images=f"{RESULTS}/images.jsonl",
            runs=[f"{EVAL}/runs/{s}.trec" for s in DEEPEN_SYSTEMS],
        output:
            labels=f"{DEEPEN}/labels/{{system}}.jsonl",
            losses=f"{RESULTS}/losses/deepen/{{system}}.jsonl",
            costs=f"{RESULTS}/costs/deepen/{{system}}.jsonl",
        log:
            f"{LOGS}/deepen/{{system}}.log",
        benchmark:
            f"{BENCH}/deepen/{{system}}.tsv"
        wildcard_constraints:
            system=_names_regex(DEEPEN_SYSTEMS),
        localrule: JUDGE_ADAPTER in API_ADAPTERS
        conda:
            "../envs/benchmaker.yaml"
        resources:
            mem_mb=RES.mem_mb("judge"),
            runtime=RES.runtime("judge"),
        params:
            system=lambda wc: wc.system,
            adapter=JUDGE_ADAPTER,
            settings=not_a_trigger(JUDGE_SETTINGS),
            triggers=JUDGE_TRIGGERS,
            deepen=DEEPEN_SETTINGS,
            facets=FACETS,
            image_root=IMAGE_ROOT,
            columns=COLUMNS,
            # the main judge's response cache: a request already answered is never paid again
            cache_dir=f"{config['paths']['results']}/.cache/judge",
            # crash-safe record of every paid request and Batch API state, outside the outputs
            ledger=lambda wc: f"{RESULTS}/.ledger/deepen/{wc.system}.jsonl",
            batch_dir=lambda wc: f"{RESULTS}/.batches/deepen/{wc.system}",
            benchmark=config["benchmark"]["name"],
            version=stage_version("deepen_system"),
        script:
            "../scripts/stage.py"

    rule deepen:
        input:
            qrels=f"{RESULTS}/qrels.jsonl",
            labels=[f"{DEEPEN}/labels/{s}.jsonl" for s in DEEPEN_SYSTEMS],
            costs=[f"{RESULTS}/costs/deepen/{s}.jsonl" for s in DEEPEN_SYSTEMS],
            runs=[f"{EVAL}/runs/{s['name']}.trec" for s in EVAL_SYSTEMS],
            metas=[f"{EVAL}/runs/{s['name']}.json" for s in EVAL_SYSTEMS],
            before=f"{EVAL}/leaderboard.csv",
            images=f"{RESULTS}/images.jsonl",
            annotations=f"{RESULTS}/annotations.jsonl",
            image_embeddings=IMAGE_EMBEDDINGS,
        output:
            deepened=f"{DEEPEN}/qrels.jsonl",
            report_json=f"{DEEPEN}/report.json",
            report_csv=f"{DEEPEN}/report.csv",
            leave_one_out=f"{DEEPEN}/leave_one_out.csv",
            leaderboard_csv=f"{DEEPEN}/evaluate/leaderboard.csv",
            leaderboard_json=f"{DEEPEN}/evaluate/leaderboard.json",
            drilldown=f"{DEEPEN}/evaluate/drilldown.csv",
            significance_csv=f"{DEEPEN}/evaluate/significance.csv",
            per_query=f"{DEEPEN}/evaluate/per_query.csv",
            sage_leaderboard=f"{DEEPEN}/evaluate/sage_leaderboard.csv",
            sage=[f"{DEEPEN}/evaluate/sage/{n}.csv" for n in EVAL_SAGE_NAMES],
        log:
            f"{LOGS}/deepen.log",
        benchmark:
            f"{BENCH}/deepen.tsv"
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
            deepen=DEEPEN_SETTINGS,
            facets=FACETS,
            columns=COLUMNS,
            numba_cache_dir=not_a_trigger(NUMBA_CACHE),
            version=stage_version("deepen"),
        script:
            "../scripts/stage.py"

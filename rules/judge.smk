rule judge:
    input:
        plan=f"{RESULTS}/query_plan.jsonl",
        annotations=f"{RESULTS}/annotations.jsonl",
        images=f"{RESULTS}/images.jsonl",
    output:
        qrels=f"{RESULTS}/qrels.jsonl",
        losses=f"{RESULTS}/losses/judge.jsonl",
    log:
        f"{LOGS}/judge.log",
    benchmark:
        f"{BENCH}/judge.tsv"
    localrule: JUDGE_ADAPTER in API_ADAPTERS
    conda:
        "../envs/benchmaker.yaml"
    params:
        adapter=JUDGE_ADAPTER,
        settings={
            k: v
            for k, v in config["judge"].items()
            if k not in ("rules", "openai", "gemini")
        }
        | {"adapter_settings": config["judge"][JUDGE_ADAPTER]},
        facets=FACETS,
        image_root=IMAGE_ROOT,
        columns=COLUMNS,
        cache_dir=f"{config['paths']['results']}/.cache/judge",
        version=stage_version("judge"),
    script:
        "../scripts/judge.py"

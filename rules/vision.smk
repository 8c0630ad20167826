rule vision:
    input:
        images=f"{RESULTS}/shards/images/{{shard}}.jsonl",
    output:
        annotations=f"{RESULTS}/annotations/{{shard}}.jsonl",
        losses=f"{RESULTS}/losses/vision/{{shard}}.jsonl",
    log:
        f"{LOGS}/vision/{{shard}}.log",
    benchmark:
        f"{BENCH}/vision/{{shard}}.tsv"
    conda:
        "../envs/benchmaker.yaml"
    threads: 2
    resources:
        gpu=1 if VISION_ADAPTER == "clip" else 0,
    params:
        adapter=VISION_ADAPTER,
        settings=config["vision"][VISION_ADAPTER],
        facets=FACETS,
        image_root=IMAGE_ROOT,
        columns=COLUMNS,
        cache_dir=f"{config['paths']['results']}/.cache/vision",
        version=stage_version("vision"),
    script:
        "../scripts/vision.py"


rule merge_annotations:
    input:
        parts=expand(f"{RESULTS}/annotations/{{shard}}.jsonl", shard=SHARDS),
        loss_parts=expand(f"{RESULTS}/losses/vision/{{shard}}.jsonl", shard=SHARDS),
    output:
        annotations=f"{RESULTS}/annotations.jsonl",
        losses=f"{RESULTS}/losses/vision.jsonl",
    log:
        f"{LOGS}/merge_annotations.log",
    localrule: True
    conda:
        "../envs/benchmaker.yaml"
    params:
        facets=FACETS,
        columns=COLUMNS,
        version=stage_version("merge"),
    script:
        "../scripts/merge_annotations.py"

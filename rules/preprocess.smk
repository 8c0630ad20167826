# Preprocess, sharded: shards/listing/{shard}.tsv (written at parse time, rules/common.smk) ->
# shards/images/{shard}.jsonl + shards/quarantine/{shard}.jsonl; then merge_images -> images.jsonl,
# quarantine.jsonl. Only the shards whose listing changed rerun (docs/architecture.md, change detection).


rule preprocess:
    input:
        unpack(preprocess_inputs),
    output:
        images=f"{RESULTS}/shards/images/{{shard}}.jsonl",
        quarantine=f"{RESULTS}/shards/quarantine/{{shard}}.jsonl",
    log:
        f"{LOGS}/preprocess/{{shard}}.log",
    benchmark:
        f"{BENCH}/preprocess/{{shard}}.tsv"
    conda:
        "../envs/benchmaker.yaml"
    threads: config["preprocess"]["workers"]
    resources:
        # holds every image's row (~2 KB); the image folder is not a sized input of this job
        mem_mb=4000,
    params:
        image_root=IMAGE_ROOT,
        # workers only decides speed (x-runtime: true): not a rerun trigger; the rest decides the output
        settings=not_a_trigger(config["preprocess"]),
        # near_duplicate_threshold decides merge_images only (groups span shards): not a preprocess trigger
        triggers={
            k: v
            for k, v in output_settings(config["preprocess"], "preprocess").items()
            if k != "near_duplicate_threshold"
        },
        shard=lambda wc: wc.shard,
        n_shards=config["n_shards"],
        columns=COLUMNS,
        version=stage_version("preprocess"),
    script:
        "../scripts/stage.py"


rule merge_images:
    input:
        parts=expand(f"{RESULTS}/shards/images/{{shard}}.jsonl", shard=SHARDS),
        quarantine_parts=expand(
            f"{RESULTS}/shards/quarantine/{{shard}}.jsonl", shard=SHARDS
        ),
    output:
        images=f"{RESULTS}/images.jsonl",
        # the planner's columnar copy of images.jsonl (benchmaker.columnar, docs/formats.md)
        images_columns=f"{RESULTS}/images.columns.parquet",
        quarantine=f"{RESULTS}/quarantine.jsonl",
    log:
        f"{LOGS}/merge_images.log",
    localrule: True
    conda:
        "../envs/benchmaker.yaml"
    params:
        image_root=IMAGE_ROOT,
        columns=COLUMNS,
        near_duplicate_threshold=config["preprocess"]["near_duplicate_threshold"],
        version=stage_version("preprocess"),
    script:
        "../scripts/stage.py"

rule preprocess:
    input:
        unpack(preprocess_inputs),
    output:
        images=f"{RESULTS}/images.jsonl",
        quarantine=f"{RESULTS}/quarantine.jsonl",
        shards=expand(f"{RESULTS}/shards/images/{{shard}}.jsonl", shard=SHARDS),
    log:
        f"{LOGS}/preprocess.log",
    benchmark:
        f"{BENCH}/preprocess.tsv"
    conda:
        "../envs/benchmaker.yaml"
    threads: config["preprocess"]["workers"]
    resources:
        # holds every image's row (~2 KB); the image folder is not a sized input of this job
        mem_mb=4000,
    params:
        image_root=IMAGE_ROOT,
        settings=config["preprocess"],
        n_shards=config["n_shards"],
        columns=COLUMNS,
        version=stage_version("preprocess"),
    script:
        "../scripts/preprocess.py"

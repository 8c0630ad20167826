# CLIP similarity: embed images per shard (GPU), embed the query texts, score every qrels pair.
# embed_images depends only on the image shard and the similarity model (model, pretrained, precision)
# plus its code version: changing the judge or the queries never re-embeds images; changing the model
# does. Across runs and benchmarks, images are also reused through the embedding cache
# (<cache_dir>/<model key>/part-*.{emb,keys}.npy + a sorted key index, keyed by image sha256 + model
# identity; docs/similarity.md).


# with CLIP_SHARED (rules/vision.smk) the vision rule writes these outputs with its own model load
if not CLIP_SHARED:

    rule embed_images:
        input:
            unpack(similarity_weight_inputs),
            images=f"{RESULTS}/shards/images/{{shard}}.jsonl",
        output:
            embeddings=f"{RESULTS}/embeddings/images/{{shard}}.parquet",
            losses=f"{RESULTS}/losses/embed/{{shard}}.jsonl",
        log:
            f"{LOGS}/embed_images/{{shard}}.log",
        benchmark:
            f"{BENCH}/embed_images/{{shard}}.tsv"
        conda:
            "../envs/benchmaker.yaml"
        # the main process feeds the model; num_workers DataLoader processes decode images
        threads: config["similarity"]["num_workers"] + 1
        resources:
            **gpu_resources(needs_gpu("embed_images")),
            mem_mb=RES.mem_mb("embed_images", **CLIP_LOADER),
            runtime=RES.runtime("embed_images"),
        params:
            model=similarity_model_params(),
            device=config["similarity"]["device"],
            # speed only, not rerun triggers (benchmaker/triggers.py)
            runtime=not_a_trigger(
                {k: config["similarity"][k] for k in ("batch_size", "num_workers")}
            ),
            cache_dir=not_a_trigger(EMBED_CACHE),
            image_root=IMAGE_ROOT,
            columns=COLUMNS,
            version=stage_version("embed"),
        script:
            "../scripts/embed_images.py"


rule embed_queries:
    input:
        unpack(similarity_weight_inputs),
        qrels=f"{RESULTS}/qrels.jsonl",
    output:
        embeddings=f"{RESULTS}/embeddings/queries.parquet",
    log:
        f"{LOGS}/embed_queries.log",
    benchmark:
        f"{BENCH}/embed_queries.tsv"
    # a model load at the head of two chains after the judge (score, and the evaluate aggregate through
    # a clip system that ranks these embeddings): it starts before the audit jobs when cores are scarce
    priority: 1
    conda:
        "../envs/benchmaker.yaml"
    # two torch threads; one where the CLIP jobs run single-process (num_workers: 0, as the offline
    # example: its CLIP jobs then run side by side on 2 cores)
    threads: min(2, config["similarity"]["num_workers"] + 1)
    resources:
        mem_mb=RES.mem_mb("embed_queries"),
    params:
        model=similarity_model_params(),
        device=config["similarity"]["device"],
        columns=COLUMNS,
        version=stage_version("embed"),
    script:
        "../scripts/embed_queries.py"


rule score:
    input:
        qrels=f"{RESULTS}/qrels.jsonl",
        query_embeddings=f"{RESULTS}/embeddings/queries.parquet",
        image_embeddings=expand(
            f"{RESULTS}/embeddings/images/{{shard}}.parquet", shard=SHARDS
        ),
        embed_losses=expand(f"{RESULTS}/losses/embed/{{shard}}.jsonl", shard=SHARDS),
    output:
        scored=f"{RESULTS}/qrels_with_score.jsonl",
        losses=f"{RESULTS}/losses/similarity.jsonl",
    log:
        f"{LOGS}/score.log",
    benchmark:
        f"{BENCH}/score.tsv"
    conda:
        "../envs/benchmaker.yaml"
    resources:
        mem_mb=RES.mem_mb("score"),
        runtime=RES.runtime("score"),
    params:
        logit_column=config["similarity"]["logit_column"],
        rank_column=config["similarity"]["rank_column"],
        columns=COLUMNS,
        version=stage_version("score"),
    script:
        "../scripts/stage.py"

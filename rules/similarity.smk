# CLIP similarity: decode each shard's images once on a CPU job (decode_images ->
# pixels/{pixels}/{shard}.npy + .parquet, the model's input pixels; {pixels}: the key of the model
# that decides them, shared with the clip vision adapter's job when its model decides them alike),
# embed them on the model jobs (embed_images, one per group of
# consecutive shards: similarity.gpu_jobs; no image file opened there), embed the query texts (of
# queries.jsonl: changing the judge never re-embeds them), score every qrels pair. decode_images and
# embed_images depend only on the image shards and the similarity model (model, pretrained, precision)
# plus their code version: changing the judge or the queries never re-embeds images; changing the
# model does. Across runs and benchmarks, images are also reused through
# the embedding cache (<cache_dir>/<model key>/part-*.{emb,keys}.npy + a sorted key index, keyed by
# image sha256 + model identity; docs/similarity.md).


rule decode_images:
    input:
        unpack(pixel_model_inputs),
        images=f"{RESULTS}/shards/images/{{shard}}.jsonl",
    output:
        pixels=f"{RESULTS}/pixels/{{pixels}}/{{shard}}.npy",
        index=f"{RESULTS}/pixels/{{pixels}}/{{shard}}.parquet",
    log:
        f"{LOGS}/decode_images/{{pixels}}/{{shard}}.log",
    benchmark:
        f"{BENCH}/decode_images/{{pixels}}/{{shard}}.tsv"
    wildcard_constraints:
        pixels=_names_regex(PIXEL_SETS),
    conda:
        "../envs/benchmaker.yaml"
    # the main process writes the store; num_workers DataLoader processes decode images
    threads: config["similarity"]["num_workers"] + 1
    resources:
        mem_mb=RES.mem_mb("decode_images", **CLIP_LOADER),
        runtime=RES.runtime("decode_images"),
        disk_mb=RES.disk_mb("decode_images"),
    params:
        # the model's input size, interpolation and resize mode decide the pixels (never the
        # precision, the device or a checkpoint file's weights); the key {pixels} names them
        model=lambda wc: pixel_model_params(PIXEL_SETS[wc.pixels]),
        image_root=IMAGE_ROOT,
        columns=COLUMNS,
        version=stage_version("embed"),
    script:
        "../scripts/decode_images.py"


# with CLIP_SHARED (rules/vision.smk) the vision rule writes the embeddings with its own model load
if not CLIP_SHARED:

    rule embed_images:
        input:
            unpack(similarity_weight_inputs),
            images=lambda wc: expand(
                f"{RESULTS}/shards/images/{{shard}}.jsonl",
                shard=EMBED_GROUPS[wc.group],
            ),
            pixels=lambda wc: [
                pixel_store(config["similarity"], s)["pixels"]
                for s in EMBED_GROUPS[wc.group]
            ],
            pixel_index=lambda wc: [
                pixel_store(config["similarity"], s)["pixel_index"]
                for s in EMBED_GROUPS[wc.group]
            ],
        output:
            embeddings=f"{RESULTS}/embeddings/images/{{group}}.parquet",
            losses=f"{RESULTS}/losses/embed/{{group}}.jsonl",
        log:
            f"{LOGS}/embed_images/{{group}}.log",
        benchmark:
            f"{BENCH}/embed_images/{{group}}.tsv"
        wildcard_constraints:
            group=_names_regex(EMBED_GROUPS),
        conda:
            "../envs/benchmaker.yaml"
        # the model's thread + one that reads the next pass's pixels from the store
        threads: 2
        resources:
            **gpu_resources(needs_gpu("embed_images")),
            # no decoding workers: two passes of pixels in flight (the CUDA pass is 256 rows)
            mem_mb=RES.mem_mb("embed_images", batch_size=512, num_workers=0),
            runtime=RES.runtime(
                "embed_images",
                on_gpu=needs_gpu("embed_images"),
                device=config["similarity"]["device"],
            ),
            # a pod downloads its group's pixel stores (NRP: no shared file system)
            disk_mb=RES.disk_mb("embed_images"),
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


# the written queries (queries.jsonl, before the judge): relabelling never reruns this model load
rule embed_queries:
    input:
        unpack(similarity_weight_inputs),
        queries=f"{RESULTS}/queries.jsonl",
    output:
        embeddings=f"{RESULTS}/embeddings/queries.parquet",
    log:
        f"{LOGS}/embed_queries.log",
    benchmark:
        f"{BENCH}/embed_queries.tsv"
    # a model load at the head of two chains (score, and the evaluate aggregate through a clip system
    # that ranks these embeddings), ready beside the judge: it starts before the audit jobs when cores
    # are scarce
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
        image_embeddings=IMAGE_EMBEDDINGS,
        embed_losses=EMBED_LOSSES,
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

# Vision: annotate every image of a shard. API adapters (openai, gemini) in batch mode run as three
# rules per shard (build -> submit -> collect, see docs/openai.md; one design for every provider); everything else runs as the single `vision` rule.
# Either way the outputs are annotations/{shard}.jsonl, losses/vision/{shard}.jsonl and
# costs/vision/{shard}.jsonl (empty for local adapters).

from benchmaker.providers.settings import (
    is_batch,
    judge_settings,
    request_settings,
)

VISION_SETTINGS = config["vision"][VISION_ADAPTER]
VISION_BATCH = is_batch(config["vision"])
# the single `vision` rule: settings that change annotations are params; runtime knobs (batch size,
# workers, caches, concurrency: `x-runtime: true` in the schema) reach it outside the params trigger
VISION_OUTPUT_SETTINGS, VISION_RUNTIME = split_runtime(
    VISION_SETTINGS, f"vision.{VISION_ADAPTER}"
)
if VISION_ADAPTER == "clip":
    # the clip annotator shares the image-embedding cache with embed_images
    VISION_SETTINGS = VISION_SETTINGS | {"embedding_cache_dir": EMBED_CACHE}
    VISION_RUNTIME = VISION_RUNTIME | {"embedding_cache_dir": EMBED_CACHE}


# One process per shard for annotation and embedding (docs/architecture.md): with
# similarity.share_vision_job and the clip adapter on the same model identity (model, weights,
# precision, device), the vision rule also writes embed_images' outputs with its one model load,
# and embed_images is not a rule of this run.
CLIP_SHARED = bool(
    config["similarity"].get("share_vision_job")
    and VISION_ADAPTER == "clip"
    and not VISION_BATCH
    and all(
        (config["vision"]["clip"].get(k) or "auto")
        == (config["similarity"].get(k) or "auto")
        for k in ("model", "pretrained", "precision", "device")
    )
)
# embed_images: one model job per group of consecutive shards (similarity.gpu_jobs), each writing one
# embeddings file and one losses file for its group; with CLIP_SHARED the vision job of each shard
# writes them, so a group is a shard (benchmaker.sharding.shard_groups)
EMBED_GROUPS = shard_groups(
    SHARDS, len(SHARDS) if CLIP_SHARED else config["similarity"]["gpu_jobs"]
)
IMAGE_EMBEDDINGS = [f"{RESULTS}/embeddings/images/{g}.parquet" for g in EMBED_GROUPS]
EMBED_LOSSES = [f"{RESULTS}/losses/embed/{g}.jsonl" for g in EMBED_GROUPS]
SHARED_OUTPUT = (
    {
        "embeddings": f"{RESULTS}/embeddings/images/{{shard}}.parquet",
        "embed_losses": f"{RESULTS}/losses/embed/{{shard}}.jsonl",
    }
    if CLIP_SHARED
    else {}
)
# the clip adapter reads its shard's pixel store (rule decode_images, a CPU job): no image file is
# opened in the model job; the store is the similarity stage's when both models decide pixels alike
VISION_PIXELS = (
    pixel_store(config["vision"]["clip"]) if VISION_ADAPTER == "clip" else {}
)
VISION_DISK = (
    {"disk_mb": RES.disk_mb("embed_images")} if VISION_ADAPTER == "clip" else {}
)
SHARED_PARAMS = (
    {
        # equal to vision.clip's model, weights and precision (CLIP_SHARED), triggers there: not
        # compared here, so that a similarity.precision change that ends the sharing plans
        # embed_images and what uses embeddings, never vision again (the vision stage's import
        # closure holds similarity.embed, so its version covers the embed code)
        "similarity": not_a_trigger(similarity_model_params()),
        # device: equal to vision.clip.device (CLIP_SHARED), a trigger there; the rest only decides speed
        "similarity_runtime": not_a_trigger(
            {
                k: config["similarity"][k]
                for k in ("device", "batch_size", "num_workers")
            }
        ),
    }
    if CLIP_SHARED
    else {}
)


if VISION_BATCH:

    rule vision_build:
        input:
            images=f"{RESULTS}/shards/images/{{shard}}.jsonl",
        output:
            requests=f"{RESULTS}/api/vision/{{shard}}/requests.jsonl",
            manifest=f"{RESULTS}/api/vision/{{shard}}/manifest.jsonl",
        log:
            f"{LOGS}/vision_build/{{shard}}.log",
        benchmark:
            f"{BENCH}/vision_build/{{shard}}.tsv"
        conda:
            "../envs/benchmaker.yaml"
        threads: 2
        resources:
            mem_mb=RES.mem_mb("vision_api"),
        params:
            settings=request_settings(VISION_SETTINGS, f"vision.{VISION_ADAPTER}"),
            adapter=VISION_ADAPTER,
            facets=FACETS,
            image_root=IMAGE_ROOT,
            columns=COLUMNS,
            cache_dir=f"{config['paths']['results']}/.cache/vision",
            version=stage_version("vision"),
        script:
            "../scripts/stage.py"

    rule vision_submit:
        input:
            requests=f"{RESULTS}/api/vision/{{shard}}/requests.jsonl",
        output:
            submitted=f"{RESULTS}/api/vision/{{shard}}/submitted.json",
        log:
            f"{LOGS}/vision_submit/{{shard}}.log",
        localrule: True
        conda:
            "../envs/benchmaker.yaml"
        resources:
            mem_mb=RES.mem_mb("submit"),
        params:
            # how requests are cut into batches: decided once, never a rerun trigger (the journal
            # never resubmits); what the requests are comes in through requests.jsonl
            settings=not_a_trigger(VISION_SETTINGS),
            adapter=VISION_ADAPTER,
            state_dir=lambda wc: f"{RESULTS}/.batches/vision/{wc.shard}",
            benchmark=config["benchmark"]["name"],
            shard=lambda wc: wc.shard,
            version=stage_version("vision"),
        script:
            "../scripts/stage.py"

    rule vision_collect:
        input:
            images=f"{RESULTS}/shards/images/{{shard}}.jsonl",
            manifest=f"{RESULTS}/api/vision/{{shard}}/manifest.jsonl",
            submitted=f"{RESULTS}/api/vision/{{shard}}/submitted.json",
        output:
            annotations=f"{RESULTS}/annotations/{{shard}}.jsonl",
            losses=f"{RESULTS}/losses/vision/{{shard}}.jsonl",
            costs=f"{RESULTS}/costs/vision/{{shard}}.jsonl",
        log:
            f"{LOGS}/vision_collect/{{shard}}.log",
        benchmark:
            f"{BENCH}/vision_collect/{{shard}}.tsv"
        localrule: True
        conda:
            "../envs/benchmaker.yaml"
        resources:
            mem_mb=RES.mem_mb("vision_api"),
        params:
            settings=not_a_trigger(VISION_SETTINGS),
            triggers=VISION_OUTPUT_SETTINGS,
            adapter=VISION_ADAPTER,
            facets=FACETS,
            image_root=IMAGE_ROOT,
            columns=COLUMNS,
            state_dir=lambda wc: f"{RESULTS}/.batches/vision/{wc.shard}",
            benchmark=config["benchmark"]["name"],
            shard=lambda wc: wc.shard,
            cache_dir=f"{config['paths']['results']}/.cache/vision",
            version=stage_version("vision"),
        script:
            "../scripts/stage.py"

else:

    rule vision:
        input:
            unpack(vision_weight_inputs),
            **VISION_PIXELS,
            images=f"{RESULTS}/shards/images/{{shard}}.jsonl",
        output:
            **SHARED_OUTPUT,
            annotations=f"{RESULTS}/annotations/{{shard}}.jsonl",
            losses=f"{RESULTS}/losses/vision/{{shard}}.jsonl",
            costs=f"{RESULTS}/costs/vision/{{shard}}.jsonl",
        log:
            f"{LOGS}/vision/{{shard}}.log",
        benchmark:
            f"{BENCH}/vision/{{shard}}.tsv"
        # the longest jobs before the plan: they start before merge_images when cores are scarce
        priority: 1
        localrule: VISION_ADAPTER in API_ADAPTERS
        conda:
            "../envs/benchmaker.yaml"
        # clip: the model's thread + one that reads the next pass's pixels from the store
        threads: 2
        resources:
            **gpu_resources(needs_gpu("vision", VISION_ADAPTER)),
            # clip: no decoding workers, two passes of pixels in flight (as embed_images)
            **VISION_DISK,
            mem_mb=RES.mem_mb(
                "vision_clip" if VISION_ADAPTER == "clip" else "vision_api",
                batch_size=512,
                num_workers=0,
            ),
            runtime=RES.runtime(
                "vision_clip" if VISION_ADAPTER == "clip" else "vision_api",
                on_gpu=needs_gpu("vision", VISION_ADAPTER),
                device=config["vision"]["clip"]["device"],
            ),
            # clip: a pod downloads its shard's pixel store (NRP: no shared file system)
        params:
            **SHARED_PARAMS,
            adapter=VISION_ADAPTER,
            settings=VISION_OUTPUT_SETTINGS,
            runtime=not_a_trigger(VISION_RUNTIME),
            facets=FACETS,
            image_root=IMAGE_ROOT,
            columns=COLUMNS,
            cache_dir=f"{config['paths']['results']}/.cache/vision",
            # crash-safe record of every paid request (providers/ledger.py): outside the outputs
            ledger=lambda wc: f"{RESULTS}/.ledger/vision/{wc.shard}.jsonl",
            version=stage_version("vision"),
        script:
            "../scripts/vision.py"


rule merge_annotations:
    input:
        parts=expand(f"{RESULTS}/annotations/{{shard}}.jsonl", shard=SHARDS),
        loss_parts=expand(f"{RESULTS}/losses/vision/{{shard}}.jsonl", shard=SHARDS),
    output:
        annotations=f"{RESULTS}/annotations.jsonl",
        # the planner's columnar copy of annotations.jsonl (benchmaker.columnar, docs/formats.md)
        annotations_columns=f"{RESULTS}/annotations.columns.parquet",
        losses=f"{RESULTS}/losses/vision.jsonl",
    log:
        f"{LOGS}/merge_annotations.log",
    localrule: True
    conda:
        "../envs/benchmaker.yaml"
    resources:
        mem_mb=RES.mem_mb("merge_annotations"),
    params:
        facets=FACETS,
        columns=COLUMNS,
        version=stage_version("merge"),
    script:
        "../scripts/stage.py"

"""Snakemake script of rule `vision`: hands snakemake.* to benchmaker.vision.run."""

from benchmaker_bridge import run_stage, staged_model

# local weights: where this job finds them (the staged copy in a pod; rules/cluster.smk)
weights = getattr(snakemake.input, "weights", None)  # noqa: F821
extra = {}
if weights:
    extra["settings"] = staged_model(snakemake.params.settings, weights)  # noqa: F821
    if getattr(snakemake.params, "similarity", None):  # noqa: F821 - one CLIP job per shard (share_vision_job)
        extra["similarity"] = staged_model(snakemake.params.similarity, weights)  # noqa: F821
run_stage(snakemake, "benchmaker.vision:run", **extra)  # noqa: F821

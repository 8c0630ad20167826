"""Snakemake script of rule `embed_images`: hands snakemake.* to benchmaker.similarity.embed.run_images."""

from benchmaker_bridge import run_stage, staged_model

# local weights: where this job finds them (the staged copy in a pod; rules/cluster.smk)
weights = getattr(snakemake.input, "weights", None)  # noqa: F821
run_stage(snakemake, "benchmaker.similarity.embed:run_images",  # noqa: F821
          model=staged_model(snakemake.params.model, weights) if weights else snakemake.params.model)  # noqa: F821

"""Snakemake script of rule `decode_images`: hands snakemake.* to benchmaker.similarity.decode.run_shard."""

from benchmaker_bridge import run_stage, staged_model

# a local-dir: model's config file: where this job finds it (the staged copy in a pod; rules/cluster.smk)
weights = getattr(snakemake.input, "weights", None)  # noqa: F821
run_stage(snakemake, "benchmaker.similarity.decode:run_shard",  # noqa: F821
          model=staged_model(snakemake.params.model, weights) if weights else snakemake.params.model)  # noqa: F821

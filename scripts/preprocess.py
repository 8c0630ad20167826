"""Snakemake script of rule `preprocess` (one shard): hands snakemake.* to benchmaker.preprocess.run_shard."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.preprocess:run_shard")  # noqa: F821

"""Snakemake script of rule `merge_images`: hands snakemake.* to benchmaker.preprocess.merge."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.preprocess:merge")  # noqa: F821

"""Snakemake script of rules `stage_file`/`stage_folder`: hands snakemake.* to benchmaker.staging.copy_input."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.staging:copy_input")  # noqa: F821

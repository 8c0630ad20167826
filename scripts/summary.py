"""Snakemake script of rule `summary`: hands snakemake.* to benchmaker.summary.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.summary:run")  # noqa: F821

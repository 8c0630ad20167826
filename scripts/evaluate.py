"""Snakemake script of rule `evaluate`: hands snakemake.* to benchmaker.evaluate.metrics.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.evaluate.metrics:run")  # noqa: F821

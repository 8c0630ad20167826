"""Snakemake script of rule `evaluate`: hands snakemake.* to benchmaker.evaluate.stage.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.evaluate.stage:run")  # noqa: F821

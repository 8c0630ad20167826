"""Snakemake script of rule `plan`: hands snakemake.* to benchmaker.plan.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.plan:run")  # noqa: F821

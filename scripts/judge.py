"""Snakemake script of rule `judge`: hands snakemake.* to benchmaker.judge.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.judge:run")  # noqa: F821

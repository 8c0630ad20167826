"""Snakemake script of rule `deepen`: hands snakemake.* to benchmaker.deepen.merge.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.deepen.merge:run")  # noqa: F821

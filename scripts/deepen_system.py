"""Snakemake script of rule `deepen_system`: hands snakemake.* to benchmaker.deepen.label.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.deepen.label:run")  # noqa: F821

"""Snakemake script of rule `export`: hands snakemake.* to benchmaker.export.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.export:run")  # noqa: F821

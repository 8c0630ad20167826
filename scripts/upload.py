"""Snakemake script of rule `upload`: hands snakemake.* to benchmaker.export.upload.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.export.upload:run")  # noqa: F821

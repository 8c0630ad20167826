"""Snakemake script of rule `audit_sample`: hands snakemake.* to benchmaker.audit.sample.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.audit.sample:run")  # noqa: F821

"""Snakemake script of rule `audit_judge2`: hands snakemake.* to benchmaker.audit.judge2.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.audit.judge2:run")  # noqa: F821

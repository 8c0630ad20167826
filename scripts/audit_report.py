"""Snakemake script of rule `audit_report`: hands snakemake.* to benchmaker.audit.statistics.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.audit.statistics:run")  # noqa: F821

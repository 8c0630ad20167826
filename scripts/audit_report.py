"""Snakemake script of rule `audit_report`: hands snakemake.* to benchmaker.audit.report.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.audit.report:run")  # noqa: F821

"""Snakemake script of rule `audit_labelling`: hands snakemake.* to benchmaker.audit.labelling.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.audit.labelling:run")  # noqa: F821

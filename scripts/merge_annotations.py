"""Snakemake script of rule `merge_annotations`: hands snakemake.* to benchmaker.merge.merge_annotations."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.merge:merge_annotations")  # noqa: F821

"""Snakemake script of rule `vision_submit`: hands snakemake.* to benchmaker.vision.openai.submit."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.vision.openai:submit")  # noqa: F821

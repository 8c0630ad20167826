"""Snakemake script of rule `vision_build`: hands snakemake.* to benchmaker.vision.openai.build."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.vision.openai:build")  # noqa: F821

"""Snakemake script of rule `vision_collect`: hands snakemake.* to benchmaker.vision.openai.collect."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.vision.openai:collect")  # noqa: F821

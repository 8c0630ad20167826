"""Snakemake script of rule `judge_build`: hands snakemake.* to benchmaker.judge.openai.build."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.judge.openai:build")  # noqa: F821

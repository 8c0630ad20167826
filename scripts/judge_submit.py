"""Snakemake script of rule `judge_submit`: hands snakemake.* to benchmaker.judge.openai.submit."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.judge.openai:submit")  # noqa: F821

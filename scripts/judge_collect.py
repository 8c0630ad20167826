"""Snakemake script of rule `judge_collect`: hands snakemake.* to benchmaker.judge.openai.collect."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.judge.openai:collect")  # noqa: F821

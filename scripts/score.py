"""Snakemake script of rule `score`: hands snakemake.* to benchmaker.similarity.score.run."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.similarity.score:run")  # noqa: F821

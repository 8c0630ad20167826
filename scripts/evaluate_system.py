"""Snakemake script of rules `evaluate_model` / `evaluate_system`: one system's run
(benchmaker.evaluate.systems.run, which points numba's cache at the numba_cache_dir param itself)."""

from benchmaker_bridge import run_stage

run_stage(snakemake, "benchmaker.evaluate.systems:run")  # noqa: F821

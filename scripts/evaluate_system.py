"""Snakemake script of rules `evaluate_model` / `evaluate_system`: one system's run
(benchmaker.evaluate.systems.run, which points numba's cache at the numba_cache_dir param itself)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.runner import run_stage  # noqa: E402

run_stage(snakemake, "benchmaker.evaluate.systems:run")  # noqa: F821

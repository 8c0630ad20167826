"""Snakemake script of rules `evaluate_model` / `evaluate_system`: one system's run
(benchmaker.evaluate.systems.run)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.evaluate.metrics import set_numba_cache  # noqa: E402
from benchmaker.runner import run_stage  # noqa: E402

set_numba_cache(getattr(snakemake.params, "numba_cache_dir", None))  # noqa: F821
run_stage(snakemake, "benchmaker.evaluate.systems:run")  # noqa: F821

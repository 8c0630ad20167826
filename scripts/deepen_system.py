"""Snakemake script of rule `deepen_system`: hands snakemake.* to benchmaker.deepen.label.run."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.runner import run_stage  # noqa: E402

run_stage(snakemake, "benchmaker.deepen.label:run")  # noqa: F821

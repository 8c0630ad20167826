"""Snakemake script of rules `stage_file`/`stage_folder`: hands snakemake.* to benchmaker.staging.copy_input."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.runner import run_stage  # noqa: E402

run_stage(snakemake, "benchmaker.staging:copy_input")  # noqa: F821

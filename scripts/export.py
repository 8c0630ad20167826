"""Snakemake script of rule `export`: hands snakemake.* to benchmaker.export.run."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.runner import run_stage  # noqa: E402

run_stage(snakemake, "benchmaker.export:run")  # noqa: F821

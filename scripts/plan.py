"""Snakemake script of rule `plan`: hands snakemake.* to benchmaker.plan.run."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.runner import run_stage  # noqa: E402

run_stage(snakemake, "benchmaker.plan:run")  # noqa: F821

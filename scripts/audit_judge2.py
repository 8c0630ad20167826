"""Snakemake script of rule `audit_judge2`: hands snakemake.* to benchmaker.audit.judge2.run."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.runner import run_stage  # noqa: E402

run_stage(snakemake, "benchmaker.audit.judge2:run")  # noqa: F821

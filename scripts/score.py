"""Snakemake script of rule `score`: hands snakemake.* to benchmaker.similarity.score.run."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.runner import run_stage  # noqa: E402

run_stage(snakemake, "benchmaker.similarity.score:run")  # noqa: F821

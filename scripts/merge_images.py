"""Snakemake script of rule `merge_images`: hands snakemake.* to benchmaker.preprocess.merge."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.runner import run_stage  # noqa: E402

run_stage(snakemake, "benchmaker.preprocess:merge")  # noqa: F821

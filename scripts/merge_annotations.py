"""Snakemake script of rule `merge_annotations`: hands snakemake.* to benchmaker.merge.merge_annotations."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.runner import run_stage  # noqa: E402

run_stage(snakemake, "benchmaker.merge:merge_annotations")  # noqa: F821

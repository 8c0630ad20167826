"""Snakemake script of rule `vision_collect`: hands snakemake.* to benchmaker.vision.openai.collect."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.runner import run_stage  # noqa: E402

run_stage(snakemake, "benchmaker.vision.openai:collect")  # noqa: F821

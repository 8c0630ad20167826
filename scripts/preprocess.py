"""Snakemake script of rule `preprocess` (one shard): hands snakemake.* to benchmaker.preprocess.run_shard."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.runner import run_stage  # noqa: E402

run_stage(snakemake, "benchmaker.preprocess:run_shard")  # noqa: F821

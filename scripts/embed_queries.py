"""Snakemake script of rule `embed_queries`: hands snakemake.* to benchmaker.similarity.embed.run_queries."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.runner import run_stage  # noqa: E402

run_stage(snakemake, "benchmaker.similarity.embed:run_queries")  # noqa: F821

"""Snakemake script of rule `embed_images`: hands snakemake.* to benchmaker.similarity.embed.run_images."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.runner import run_stage  # noqa: E402
from benchmaker.staging import staged_model  # noqa: E402

# local weights: where this job finds them (the staged copy in a pod; rules/cluster.smk)
weights = getattr(snakemake.input, "weights", None)  # noqa: F821
run_stage(snakemake, "benchmaker.similarity.embed:run_images",  # noqa: F821
          model=staged_model(snakemake.params.model, weights) if weights else snakemake.params.model)  # noqa: F821

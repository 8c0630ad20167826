"""Snakemake script of rule `vision`: hands snakemake.* to benchmaker.vision.run."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent / "src"))  # noqa: F821

from benchmaker.runner import run_stage  # noqa: E402
from benchmaker.staging import staged_model  # noqa: E402

# local weights: where this job finds them (the staged copy in a pod; rules/cluster.smk)
weights = getattr(snakemake.input, "weights", None)  # noqa: F821
extra = {}
if weights:
    extra["settings"] = staged_model(snakemake.params.settings, weights)  # noqa: F821
    if getattr(snakemake.params, "similarity", None):  # noqa: F821 - one CLIP job per shard (share_vision_job)
        extra["similarity"] = staged_model(snakemake.params.similarity, weights)  # noqa: F821
run_stage(snakemake, "benchmaker.vision:run", **extra)  # noqa: F821

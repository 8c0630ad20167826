# Resource requests computed from the data each job reads (benchmaker/resources.py, docs/performance.md):
# every rule's `resources:` names mem_mb (and runtime, disk_mb where they matter) through these
# callables, so SLURM and Kubernetes requests follow input sizes; the profiles only set defaults.

import benchmaker.resources as RES

CLIP_LOADER = {
    "batch_size": config["similarity"]["batch_size"],
    "num_workers": config["similarity"]["num_workers"],
}

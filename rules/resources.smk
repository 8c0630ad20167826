# Resource requests computed from the data each job reads (benchmaker/resources.py, docs/performance.md):
# every rule's `resources:` names mem_mb (and runtime, disk_mb where they matter) through these
# callables, so SLURM and Kubernetes requests follow input sizes; the profiles only set defaults.

import benchmaker.resources as RES

CLIP_LOADER = {
    "batch_size": config["similarity"]["batch_size"],
    "num_workers": config["similarity"]["num_workers"],
}


def evaluate_model_mem_mb(wildcards, input, attempt=1):
    """A clip system's memory: torch + the model + its loader's batches (its own batch_size and
    num_workers) + the images' embeddings, as for embed_images (benchmaker/resources.py).
    """
    s = EVAL_BY_NAME[wildcards.system]
    request = RES.mem_mb(
        "embed_images",
        batch_size=int(s["batch_size"]),
        num_workers=int(s["num_workers"]),
    )
    return request(wildcards, input, attempt)


def evaluate_model_runtime(wildcards, input, attempt=1):
    """A clip system's time: its images at the pace of a job that decodes its files (benchmaker/stages.py,
    evaluate_model's pace) on the device kind its own `device` setting and the GPU it is given decide.
    """
    s = EVAL_BY_NAME[wildcards.system]
    request = RES.runtime(
        "evaluate_model",
        on_gpu=needs_gpu("evaluate_model"),
        device=s["device"],
    )
    return request(wildcards, input, attempt)

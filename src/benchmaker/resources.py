"""Resource requests (``mem_mb``, ``runtime``, ``disk_mb``) computed from the data a job will read.

The rules call :func:`mem_mb`, :func:`runtime` and :func:`disk_mb` with the rule's name and a few
numbers from the config; each returns a callable that Snakemake evaluates with the job's ``input``
(and ``attempt``: every retry asks for 1.5x more memory), so SLURM and Kubernetes get requests that
follow the input sizes instead of flat numbers. Before an input exists (dry run of a fresh build)
Snakemake shows the request as ``<TBD>``; it is computed when the job is about to run.

The formulas (docs/performance.md lists them with measured peaks) use only input **file sizes**:

* ``base``: the Python interpreter with polars (~150 MB), or with torch and open_clip (~600 MB) plus
  the model held twice while loading (``2 x weights``; 600 MB for a named ViT-B-32, the file size for
  local weights).
* per-rule factors: how many bytes of memory a byte of input JSONL becomes (polars frames, Python
  objects while validating), measured on the benchmarks in ``benchmarks/``.
* CLIP jobs add the DataLoader's in-flight batches (``batch x 3 x 224 x 224``, uint8, per worker x
  prefetch 4, plus the float copy in the main process).

No function here reads file contents: sizes only (``os.stat``), so evaluating a request is cheap even
for a million-image run. Nothing imports torch or Snakemake.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from typing import Any

from .settings_schema import default

__all__ = ["FACTORS", "disk_mb", "input_mb", "mem_mb", "runtime"]

MB = 1_000_000
PY_BASE = 250          # interpreter + polars + benchmaker, MB resident
TORCH_BASE = 700       # + torch + open_clip
NAMED_WEIGHTS_MB = 600  # a named open_clip model whose weights are not an input (ViT-B-32 fp32 ~ 580 MB)
MIN_MB = 500

# rule -> (base MB, memory bytes per input byte over the inputs that count, inputs that count)
FACTORS: dict[str, tuple[int, float, tuple[str, ...]]] = {
    "preprocess": (PY_BASE, 0.0, ()),
    "submit": (PY_BASE + 250, 0.0, ()),  # batch submit / upload: stream files, hold no tables
    "vision_api": (PY_BASE, 12.0, ("images",)),
    # one part at a time (the largest counts, see mem_mb), then a line per part (benchmaker.merge)
    "merge_annotations": (PY_BASE, 8.0, ("parts",)),
    "plan": (PY_BASE, 8.0, ("annotations", "images")),
    # the plan + the planned images' rows of annotations/images, read in 64 MB blocks (+ BLOCK_MB)
    "judge": (PY_BASE + 400, 15.0, ("plan",)),
    # the same reads as the judge (the writer ranks tags over the planned images' rows), one small
    # request per query
    "queries": (PY_BASE + 400, 15.0, ("plan",)),
    "score": (PY_BASE, 6.0, ("qrels", "query_embeddings")),
    # the pairs + the scored images' rows; corpus counts aggregated over 64 MB blocks (+ 400)
    "summary": (PY_BASE + 700, 6.0, ("scored", "plan")),
    # the pairs (+ their images' rows, read in blocks) + one row group of image bytes per file
    "export": (PY_BASE + 600, 6.0, ("scored", "plan")),
    # evaluate (docs/evaluate.md): ranx + numba (~300 MB); one system's runs / every system's runs
    "evaluate_system": (PY_BASE + 300, 8.0, ("qrels", "images", "annotations", "component_runs", "external")),
    "evaluate": (PY_BASE + 300, 8.0, ("qrels", "images", "annotations", "runs", "image_embeddings")),
}


def _paths(x: Any) -> list[str]:
    if x is None:
        return []
    if isinstance(x, (str, os.PathLike)):
        return [os.fspath(x)]
    out: list[str] = []
    for item in x:
        out.extend(_paths(item))
    return out


def _size(p: str) -> int:
    try:
        if os.path.isdir(p):
            return sum(e.stat().st_size for e in os.scandir(p) if e.is_file())
        return os.stat(p).st_size
    except OSError:
        return 0


def input_mb(input: Any, names: Iterable[str] | None = None) -> float:
    """Total size in MB of the named inputs of a job (all inputs when ``names`` is None)."""
    if names is None:
        files = _paths(list(input))
    else:
        files = []
        for n in names:
            files.extend(_paths(getattr(input, n, None)))
    return sum(_size(p) for p in files) / MB


def _clip_mb(input: Any, batch_size: int, num_workers: int, image_px: int = 224) -> float:
    weights = [p for p in _paths(list(input)) if p.endswith((".safetensors", ".bin", ".pth", ".pt"))]
    w = sum(_size(p) for p in weights) / MB if weights else NAMED_WEIGHTS_MB
    batch = batch_size * 3 * image_px * image_px / MB
    loader = batch * (max(0, num_workers) * 4 + 1) + batch * 4 * 2  # uint8 in flight + float copies
    return TORCH_BASE + 2 * w + loader + (num_workers * 150)  # each forked worker's private pages


def mem_mb(rule: str, *, batch_size: int = default("similarity.batch_size"),
           num_workers: int = default("similarity.num_workers")) -> Callable[..., int]:
    """Callable ``(wildcards, input, attempt) -> MB`` for ``resources: mem_mb=``."""

    def request(wildcards, input, attempt=1) -> int:
        if rule in ("embed_images", "vision_clip", "embed_queries"):
            extra = 8.0 * input_mb(input, ["images"] if rule != "embed_queries" else ["qrels"])
            mb = _clip_mb(input, batch_size, num_workers if rule != "embed_queries" else 0) + extra
        else:
            base, factor, names = FACTORS[rule]
            if rule == "merge_annotations":  # parts are read one at a time
                mb = base + factor * max((_size(p) for p in _paths(getattr(input, "parts", None))),
                                         default=0) / MB
            else:
                mb = base + factor * input_mb(input, names)
            if rule == "score":  # one shard's embeddings file at a time during the gather
                shards = _paths(getattr(input, "image_embeddings", None))
                mb += 3 * max((_size(p) for p in shards), default=0) / MB
            if rule == "evaluate_system":  # a clip system ranking the similarity stage's embeddings:
                # every image's vector at once (the frame, its float32 matrix, the ranking's copy)
                mb += 3 * input_mb(input, ["image_embeddings", "query_embeddings"])
        mb = max(MIN_MB, mb) * (1.5 ** (max(1, int(attempt)) - 1))
        return int(math.ceil(mb / 100.0) * 100)

    request.__name__ = f"mem_mb_{rule}"
    return request


def runtime(rule: str, *, images_per_s: float = 20.0, start_s: float = 60.0,
            bytes_per_image: int = 400, mb_per_min: float = 50.0) -> Callable[..., int]:
    """Callable ``(wildcards, input, attempt) -> minutes`` for ``resources: runtime=``.

    CLIP jobs: ``start_s`` (torch import + model load) + images / ``images_per_s`` (images estimated
    from the shard manifest, ~``bytes_per_image`` bytes of JSONL each; the default 20 images/s is a
    CPU's pace, so a GPU job is never killed for time). Other jobs: their inputs at ``mb_per_min``.
    Doubled, and doubled again per retry; at least 10 minutes.
    """

    def request(wildcards, input, attempt=1) -> int:
        if rule in ("embed_images", "vision_clip"):
            n = input_mb(input, ["images"]) * MB / bytes_per_image
            s = start_s + n / images_per_s
        else:
            s = 60.0 + 60.0 * input_mb(input) / mb_per_min
        minutes = 2 * s / 60.0 * (2 ** (max(1, int(attempt)) - 1))
        return int(max(10, math.ceil(minutes)))

    request.__name__ = f"runtime_{rule}"
    return request


def disk_mb(rule: str, *, image_bytes_factor: float = 1.0) -> Callable[..., int]:
    """Callable ``(wildcards, input) -> MB`` for ``resources: disk_mb=`` (outputs + temporary files).

    ``export``: the dataset holds each exported image's bytes once (corpus view, docs/export.md), at
    most the size of the image files listed in images.jsonl, which the job cannot know from sizes
    alone; ``image_bytes_factor`` x the images manifest size x 250 (a ~400 byte JSONL row per image
    of ~100 KB) is the estimate, plus twice the tables. Others: 3x their inputs.
    """

    def request(wildcards, input) -> int:
        if rule == "export":
            mb = 250.0 * image_bytes_factor * input_mb(input, ["images"]) + 2 * input_mb(input)
        else:
            mb = 3 * input_mb(input)
        return int(max(1000, math.ceil(mb / 100.0) * 100))

    request.__name__ = f"disk_mb_{rule}"
    return request

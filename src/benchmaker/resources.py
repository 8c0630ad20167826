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
  objects while validating), measured on the benchmarks in ``benchmarks/``. They are declared with
  their stage (``memory=`` in :data:`benchmaker.stages.STAGES`, :class:`benchmaker.stages.Memory`);
  :data:`MEMORY` collects them, and :func:`mem_mb` evaluates one for a job.
* ``runtime`` of the model rules (and ``decode_images``): the images a job will see (from its shard
  manifests' sizes) at the pace its stage declares for the kind of device the job runs on (``pace=``
  in :data:`benchmaker.stages.STAGES`, :class:`benchmaker.stages.Pace`; :data:`PACE` collects them),
  so a GPU job asks for minutes where a CPU job of the same images asks for hours.
* CLIP jobs add the DataLoader's in-flight batches (``batch x 3 x 224 x 224``, uint8, per worker x
  prefetch 4, plus the float copy in the main process); ``decode_images`` has no model, and
  ``embed_images`` no loader (it reads two passes of the pixel store at a time).

No function here reads file contents: sizes only (``os.stat``), so evaluating a request is cheap even
for a million-image run. Nothing imports torch or Snakemake.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from typing import Any

from .settings_schema import default
from .stages import PY_MB, STAGES, Memory, Pace

__all__ = ["MEMORY", "PACE", "device_kind", "disk_mb", "input_mb", "mem_mb", "runtime"]

MB = 1_000_000
PY_BASE = PY_MB        # interpreter + polars + benchmaker, MB resident
TORCH_BASE = 700       # + torch + open_clip
NAMED_WEIGHTS_MB = 600  # a named open_clip model whose weights are not an input (ViT-B-32 fp32 ~ 580 MB)
MIN_MB = 500


def _declared(kind: str) -> dict:
    """name -> the ``kind`` (``"memory"`` or ``"pace"``) model of every stage's declaration; a name
    declared twice is an error."""
    out: dict = {}
    for stage, declared in STAGES.items():
        for name, model in getattr(declared, kind).items():
            if name in out:
                raise ValueError(f"{kind} model {name!r} is declared twice (stage {stage!r} and another): one each")
            out[name] = model
    return out


# name (a rule, or a variant such as vision_clip) -> its memory model (benchmaker.stages.Memory)
MEMORY: dict[str, Memory] = _declared("memory")
# name -> the pace of its jobs per device kind (benchmaker.stages.Pace): the model rules and decode_images
PACE: dict[str, Pace] = _declared("pace")


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


def _clip_mb(input: Any, batch_size: int, num_workers: int, image_px: int = 224, model: bool = True) -> float:
    weights = [p for p in _paths(list(input)) if p.endswith((".safetensors", ".bin", ".pth", ".pt"))]
    w = (sum(_size(p) for p in weights) / MB if weights else NAMED_WEIGHTS_MB) if model else 0.0
    batch = batch_size * 3 * image_px * image_px / MB
    loader = batch * (max(0, num_workers) * 4 + 1) + batch * 4 * 2  # uint8 in flight + float copies
    return TORCH_BASE + 2 * w + loader + (num_workers * 150)  # each forked worker's private pages


def mem_mb(rule: str, *, batch_size: int = default("similarity.batch_size"),
           num_workers: int = default("similarity.num_workers")) -> Callable[..., int]:
    """Callable ``(wildcards, input, attempt) -> MB`` for ``resources: mem_mb=``: the memory model
    ``rule`` names (:data:`MEMORY`), with the CLIP loader's ``batch_size`` and ``num_workers``."""

    model = MEMORY[rule]

    def request(wildcards, input, attempt=1) -> int:
        mb = float(model.base)
        mb += sum(factor * input_mb(input, [name]) for name, factor in model.per_mb.items())
        mb += sum(factor * max((_size(p) for p in _paths(getattr(input, name, None))), default=0) / MB
                  for name, factor in model.per_largest_mb.items())
        if model.model == "decode":  # torch + open_clip's transforms, no model; batches of 64 in flight
            mb += _clip_mb(input, 64, num_workers, model=False)
        elif model.model is not None:
            mb += _clip_mb(input, batch_size, num_workers if model.model == "images" else 0)
        mb = max(MIN_MB, mb) * (1.5 ** (max(1, int(attempt)) - 1))
        return int(math.ceil(mb / 100.0) * 100)

    request.__name__ = f"mem_mb_{rule}"
    return request


def device_kind(gpu: bool, device: str | None = default("similarity.device")) -> str:
    """The kind of device a job runs on, as :class:`benchmaker.stages.Pace` names them: ``"gpu"`` when
    it is given a GPU (``gpu``: ``needs_gpu`` of its rule, as ``gpu_resources`` in rules/cluster.smk
    asks for one) and its ``device`` setting does not pin it to the CPU; else ``"cpu"``."""
    return "gpu" if gpu and not str(device).strip().lower().startswith("cpu") else "cpu"


def runtime(rule: str, *, on_gpu: bool = False, device: str | None = default("similarity.device"),
            bytes_per_image: int = 400, mb_per_min: float = 50.0) -> Callable[..., int]:
    """Callable ``(wildcards, input, attempt) -> minutes`` for ``resources: runtime=``.

    A rule with a pace (:data:`PACE`: the model rules, ``decode_images``): its ``start_s`` + images /
    its images per second on the job's device kind (:func:`device_kind` of ``on_gpu`` and ``device``;
    images estimated from the shard manifests, ~``bytes_per_image`` bytes of JSONL each). Other
    rules: their inputs at ``mb_per_min``. Doubled, and doubled again per retry; at least 10 minutes.
    """
    kind = device_kind(on_gpu, device)
    pace = PACE.get(rule)
    if pace is not None and kind not in pace.per_s:
        raise ValueError(f"rule {rule!r} asks for a {kind} runtime, but its stage declares a pace only for "
                         f"{', '.join(sorted(pace.per_s))} (benchmaker/stages.py: pace=)")

    def request(wildcards, input, attempt=1) -> int:
        if pace is not None:
            n = input_mb(input, ["images"]) * MB / bytes_per_image
            s = pace.start_s + n / pace.per_s[kind]
        else:
            s = 60.0 + 60.0 * input_mb(input) / mb_per_min
        minutes = 2 * s / 60.0 * (2 ** (max(1, int(attempt)) - 1))
        return int(max(10, math.ceil(minutes)))

    request.__name__ = f"runtime_{rule}_{kind}"
    return request


def disk_mb(rule: str, *, image_bytes_factor: float = 1.0) -> Callable[..., int]:
    """Callable ``(wildcards, input) -> MB`` for ``resources: disk_mb=`` (outputs + temporary files).

    ``export``: the dataset holds each exported image's bytes once (corpus view, docs/export.md), at
    most the size of the image files listed in images.jsonl, which the job cannot know from sizes
    alone; ``image_bytes_factor`` x the images manifest size x 250 (a ~400 byte JSONL row per image
    of ~100 KB) is the estimate, plus twice the tables. ``decode_images``: its pixel store, 150 KB per
    image of ~400 bytes of JSONL (docs/similarity.md, "Pixel store"); ``embed_images``: its inputs (the
    pixel stores of its group) plus 20 %. Others: 3x their inputs.
    """

    def request(wildcards, input) -> int:
        if rule == "export":
            mb = 250.0 * image_bytes_factor * input_mb(input, ["images"]) + 2 * input_mb(input)
        elif rule == "decode_images":  # the pixel store: 3 x 224 x 224 bytes per image (~400 B of JSONL)
            mb = input_mb(input, ["images"]) * MB / 400 * 3 * 224 * 224 / MB * 1.1
        elif rule == "embed_images":  # its group's pixel stores (a pod downloads them) + the outputs
            mb = 1.2 * input_mb(input)
        else:
            mb = 3 * input_mb(input)
        return int(max(1000, math.ceil(mb / 100.0) * 100))

    request.__name__ = f"disk_mb_{rule}"
    return request

"""GPU benchmark: model-only images/s vs end-to-end images/s from JPEG files on disk.

    HF_HUB_OFFLINE=1 python benchmarks/clip_gpu.py [--model ViT-B-32] [--pretrained TAG|FILE]
        [--n 4096] [--batch-size 256] [--workers 8] [--size 1024x768] [--precision auto] [--device cuda]

* **model-only**: uint8 pixel batches already on the device → normalise → ``encode_image`` under
  autocast → L2-normalise → copy the embeddings to the host (the same ``ClipModel.encode_images`` call
  the rule makes per batch). Warm-up batches first (kernels, allocator), then at least ``--min-seconds``
  of batches, timed between two ``torch.cuda.synchronize()``: the ceiling for this model, batch size
  and precision.
* **end-to-end**: ``--n`` JPEG files written to a temporary folder (``--size``, photo-like) and
  embedded by ``benchmaker.similarity.embed.embed_image_table`` exactly as the ``embed_images`` rule
  does (DataLoader with ``--workers`` processes, JPEG draft decoding, uint8 batches in pinned memory,
  normalisation on the device), without the embedding cache. Timed from the call to its return, so
  worker start-up is included. A warm-up call on the first 4 batches comes first. The files were
  just written, so they are in the page cache: this measures decoding, not the disk (for a cold-disk
  number use ``--folder`` after ``sync; echo 3 > /proc/sys/vm/drop_caches``).

Goal: end-to-end >= 70 % of model-only. If it is lower, the decoders are the bottleneck: raise
``--workers`` (similarity.num_workers) up to the CPU cores of the GPU node. Random weights unless
--pretrained is given (speed does not depend on the weights).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def model_only(clip, batch_size: int, min_iters: int, min_seconds: float = 3.0) -> float:
    import torch

    cuda = clip.device.startswith("cuda")
    h, w = clip.image_size
    mean = torch.tensor(clip.preprocess_cfg.get("mean", (0.48, 0.46, 0.41)), device=clip.device).view(1, -1, 1, 1)
    std = torch.tensor(clip.preprocess_cfg.get("std", (0.27, 0.26, 0.28)), device=clip.device).view(1, -1, 1, 1)
    x = torch.randint(0, 256, (batch_size, 3, h, w), dtype=torch.uint8, device=clip.device)

    def step() -> None:  # what iter_image_batches does with a batch once it is on the device
        clip.encode_images(x.float().div_(255.0).sub_(mean).div_(std))

    for _ in range(5):  # warm-up: kernel selection, allocator, autocast caches
        step()
    if cuda:
        torch.cuda.synchronize()
    iters = 0
    t = time.perf_counter()
    while iters < min_iters or time.perf_counter() - t < min_seconds:
        step()
        iters += 1
    if cuda:
        torch.cuda.synchronize()
    return batch_size * iters / (time.perf_counter() - t)


def end_to_end(clip, paths, batch_size: int, workers: int) -> float:
    import polars as pl

    from benchmaker.similarity.embed import embed_image_table

    images = pl.DataFrame({"image_id": [p.name for p in paths], "sha256": [f"{i:064x}" for i in range(len(paths))]})
    t = time.perf_counter()
    out = embed_image_table(images, clip, image_root=paths[0].parent, cache=None, losses=None,
                            batch_size=batch_size, num_workers=workers, desc="bench")
    dt = time.perf_counter() - t
    assert out.height == len(paths)
    return len(paths) / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--pretrained", default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--size", default="1024x768")
    ap.add_argument("--folder", default=None, help="use these JPEGs instead of generating --n of them")
    ap.add_argument("--min-seconds", type=float, default=3.0, help="shortest model-only timing window")
    args = ap.parse_args()

    import logging

    logging.basicConfig(level=logging.WARNING)
    import torch
    from clip_cpu import make_images

    from benchmaker.similarity.model import load_clip

    clip = load_clip(args.model, args.pretrained, device=args.device, precision=args.precision)
    w, h = (int(v) for v in args.size.lower().split("x"))
    print(f"device: {clip.device} "
          f"({torch.cuda.get_device_name() if clip.device.startswith('cuda') else 'no GPU'}), "
          f"precision {clip.precision}, torch {torch.__version__}, {os.cpu_count()} CPUs")
    print(f"model: {clip.model_id}")
    mo = model_only(clip, args.batch_size, min_iters=max(5, args.n // args.batch_size),
                    min_seconds=args.min_seconds)
    print(f"model-only:  {mo:10.1f} images/s  (batch {args.batch_size})")
    with tempfile.TemporaryDirectory() as tmp:
        if args.folder:
            paths = sorted(Path(args.folder).glob("*.jp*g"))[: args.n]
            if not paths:
                raise SystemExit(f"no *.jpg / *.jpeg files in {args.folder}")
        else:
            t = time.perf_counter()
            paths = make_images(Path(tmp), args.n, size=(w, h))
            print(f"wrote {len(paths)} JPEGs {w}x{h} in {time.perf_counter() - t:.1f} s")
        end_to_end(clip, paths[: min(len(paths), 4 * args.batch_size)], args.batch_size, args.workers)  # warm-up
        e2e = end_to_end(clip, paths, args.batch_size, args.workers)
    print(f"end-to-end:  {e2e:10.1f} images/s  ({len(paths)} JPEGs from disk, {args.workers} loader workers)")
    print(f"end-to-end / model-only: {100 * e2e / mo:.0f} %  (goal >= 70 %)")


if __name__ == "__main__":
    main()

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


def end_to_end(clip, root: Path, paths, batch_size: int, workers: int) -> float:
    import polars as pl

    from benchmaker.similarity.embed import embed_image_table

    images = pl.DataFrame({"image_id": [p.relative_to(root).as_posix() for p in paths],
                           "sha256": [f"{i:064x}" for i in range(len(paths))]})
    t = time.perf_counter()
    out = embed_image_table(images, clip, image_root=root, cache=None, losses=None,
                            batch_size=batch_size, num_workers=workers, desc="bench")
    dt = time.perf_counter() - t
    assert out.height == len(paths)
    return len(paths) / dt


def decode_only(clip, root: Path, paths, batch_size: int, workers: int) -> float:
    """The loader alone (the same DataLoader as ``iter_image_batches``, no model): the decode ceiling."""
    import torch

    from benchmaker.similarity.embed import ImageFiles, _collate, _split_preprocess

    pil_tf, mean, _ = _split_preprocess(clip.preprocess)
    ds = ImageFiles([str(p) for p in paths], pil_tf, (clip.image_size[1], clip.image_size[0]), mean is not None)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=workers, collate_fn=_collate,
                                         pin_memory=clip.device.startswith("cuda"), prefetch_factor=4)
    t = time.perf_counter()
    n = sum(int(idx.shape[0]) for idx, _, _ in loader)
    assert n == len(paths)
    return n / (time.perf_counter() - t)


def _make_part(args: tuple) -> list[Path]:
    from clip_cpu import make_images

    folder, n, size, seed = args
    folder.mkdir(parents=True, exist_ok=True)
    return make_images(folder, n, size=size, seed=seed)


def make_images_parallel(root: Path, n: int, size: tuple[int, int], procs: int) -> list[Path]:
    """``n`` photo-like JPEGs in ``procs`` sub-folders, written by ``procs`` processes."""
    from concurrent.futures import ProcessPoolExecutor

    per = -(-n // procs)
    jobs = [(root / f"part{k:02d}", min(per, n - k * per), size, k) for k in range(procs) if n - k * per > 0]
    with ProcessPoolExecutor(len(jobs)) as pool:
        return [p for part in pool.map(_make_part, jobs) for p in part]


def set_pass_rows(clip, rows: int) -> None:
    """Rows of every forward pass (the fixed pass size; part of the numerics, so of the cache key)."""
    from benchmaker.similarity.model import numerics

    clip.encode_batch = rows
    clip.numerics = numerics(clip.device, clip.precision, rows)


def determinism(clip, rows: int) -> str:
    """The same image embedded in different neighbours and positions: bit-identical at a fixed pass size?"""
    import torch

    h, w = clip.image_size
    g = torch.Generator().manual_seed(0)
    base = torch.randn((3 * rows, 3, h, w), generator=g)
    a = clip.encode_images(base[: rows + 7])  # image 5 in the first pass, 7 rows spill into a padded pass
    b = clip.encode_images(torch.cat([base[2 * rows:2 * rows + 11], base[5:6]]))  # image 5 last, other neighbours
    c = clip.encode_images(base[5:6])  # image 5 alone (padded pass)
    same = bool(torch.equal(a[5], b[-1]) and torch.equal(a[5], c[0]))
    diff = float((a[5] - b[-1]).abs().max())
    return "bit-identical" if same else f"DIFFERENT (max abs diff {diff:.2e})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--pretrained", default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--batch-size", type=int, default=256,
                    help="loader batch (similarity.batch_size); raised to the pass size where smaller")
    ap.add_argument("--pass-rows", default="64",
                    help="comma-separated fixed pass sizes to sweep (rows of every forward pass)")
    ap.add_argument("--loader-batch", type=int, default=None,
                    help="loader batch for the end-to-end runs (default: --batch-size); smaller batches "
                         "spread the files over the workers sooner, the pass size stays fixed")
    ap.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--size", default="1024x768")
    ap.add_argument("--folder", default=None, help="use these JPEGs instead of generating --n of them")
    ap.add_argument("--min-seconds", type=float, default=3.0, help="shortest model-only timing window")
    args = ap.parse_args()

    import logging

    logging.basicConfig(level=logging.WARNING)
    import torch

    from benchmaker.similarity.model import load_clip

    t = time.perf_counter()
    clip = load_clip(args.model, args.pretrained, device=args.device, precision=args.precision)
    load_s = time.perf_counter() - t
    w, h = (int(v) for v in args.size.lower().split("x"))
    print(f"device: {clip.device} "
          f"({torch.cuda.get_device_name() if clip.device.startswith('cuda') else 'no GPU'}), "
          f"precision {clip.precision}, torch {torch.__version__}, {os.cpu_count()} CPUs")
    print(f"model: {clip.model_id}  (loaded in {load_s:.1f} s)")
    with tempfile.TemporaryDirectory() as tmp:
        if args.folder:
            root = Path(args.folder)
            paths = sorted(root.glob("*.jp*g"))[: args.n]
            if not paths:
                raise SystemExit(f"no *.jpg / *.jpeg files in {args.folder}")
        else:
            t = time.perf_counter()
            root = Path(tmp)
            paths = make_images_parallel(root, args.n, (w, h), os.cpu_count() or 1)
            print(f"wrote {len(paths)} JPEGs {w}x{h} in {time.perf_counter() - t:.1f} s")
        lb = args.loader_batch or args.batch_size
        dec = decode_only(clip, root, paths, lb, args.workers)
        print(f"decode only (loader batch {lb}, {args.workers} workers): {dec:9.1f} images/s", flush=True)
        rows = []
        for pass_rows in (int(v) for v in args.pass_rows.split(",")):
            set_pass_rows(clip, pass_rows)
            batch = max(args.batch_size, pass_rows)
            mo = model_only(clip, batch, min_iters=max(5, args.n // batch), min_seconds=args.min_seconds)
            lb = args.loader_batch or batch
            end_to_end(clip, root, paths[: min(len(paths), 4 * batch)], lb, args.workers)  # warm-up
            e2e = end_to_end(clip, root, paths, lb, args.workers)
            det = determinism(clip, pass_rows)
            rows.append((pass_rows, lb, mo, e2e, det))
            print(f"pass {pass_rows:5d} rows, loader batch {lb:5d}: model-only {mo:9.1f} images/s, "
                  f"end-to-end {e2e:9.1f} images/s ({100 * e2e / mo:3.0f} %), {det}", flush=True)
    print()
    print("| pass rows | loader batch | model-only images/s | end-to-end images/s | end-to-end / model-only | "
          "same image, other neighbours |")
    print("|---:|---:|---:|---:|---:|---|")
    for pass_rows, batch, mo, e2e, det in rows:
        print(f"| {pass_rows} | {batch} | {mo:.0f} | {e2e:.0f} | {100 * e2e / mo:.0f} % | {det} |")
    print(f"({len(paths)} JPEGs {args.size} from the page cache, {args.workers} loader workers, loader batch "
          f"as listed; decode ceiling {dec:.0f} images/s; goal >= 70 %)")


if __name__ == "__main__":
    main()

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

* **rules** (``--rules``, issue #33): the workflow's own split, with the rules' functions. The
  ``--n`` JPEGs are written as ``--shards`` shards (images.jsonl rows); ``decode_images``
  (``similarity.decode.run_shard``) decodes each shard into its pixel store, one CPU process per
  shard, ``--decode-procs`` at a time (timed: wall and CPU seconds); then **one** ``embed_images``
  job (``similarity.embed.run_images`` over every shard's store, as a group of shards) runs as a
  fresh process, as Snakemake starts it: its wall time is the GPU-seconds the job holds the GPU.
  Printed: the GPU-seconds per million images, their ratio to the model-only time of the same
  device and pass size (goal <= 3x), and the job's fixed cost = its wall - the encode loop - a bare
  ``python -c pass`` (goal <= 3 s). Runs on CPU too (``--device cpu``, a small ``--n``).

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


EMBED_JOB = r"""
import json, logging, re, sys, time
t0 = time.perf_counter()
records = []
class Keep(logging.Handler):
    def emit(self, rec):
        records.append(rec.getMessage())
logging.getLogger().addHandler(Keep())
logging.getLogger().setLevel(logging.INFO)
from benchmaker.similarity.embed import run_images
t_import = time.perf_counter() - t0
n = run_images(images={images!r}, pixels={pixels!r}, pixel_index={index!r}, embeddings={emb!r},
               losses={emb!r} + ".losses.jsonl", model={model!r}, runtime={{}}, cache_dir=None,
               device={device!r}, threads=2)
enc = [float(m.group(1)) for r in records for m in [re.search(r"encoded \d+ images in ([\d.]+) s", r)] if m]
print(json.dumps({{"rows": n, "import_s": t_import, "run_s": time.perf_counter() - t0 - t_import,
                   "encode_s": enc[0] if enc else None}}))
"""


def _decode_shard(job: tuple) -> float:
    """One decode_images job (its stage function, in a worker process); returns its CPU seconds."""
    import resource

    from benchmaker.similarity.decode import run_shard

    images, npy, idx, model, root = job
    ru = resource.getrusage(resource.RUSAGE_SELF)
    run_shard(images=images, pixels=npy, index=idx, model=model, image_root=root, threads=1)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    return ru1.ru_utime + ru1.ru_stime - ru.ru_utime - ru.ru_stime


def _shard_tables(root: Path, paths, shards: int, work: Path) -> list[str]:
    import polars as pl

    from benchmaker.formats import write_table

    rows = pl.DataFrame({
        "image_id": [p.relative_to(root).as_posix() for p in paths], "image_url": None, "mime_type": "image/jpeg",
        "width": 1, "height": 1, "file_size": [p.stat().st_size for p in paths],
        "sha256": [f"{i:064x}" for i in range(len(paths))], "phash": None, "license": "CC0-1.0", "doi": None,
        "original_dataset_name": "synthetic"},
        schema_overrides={"image_url": pl.String, "phash": pl.String, "doi": pl.String})
    out = []
    for k in range(shards):
        out.append(str(work / f"shards/{k:05d}.jsonl"))
        write_table(rows[k::shards], "images", out[-1])
    return out


def rules_end_to_end(clip, model: dict, root: Path, paths, shards: int, procs: int, work: Path) -> dict:
    """decode_images per shard (CPU processes), then one embed_images job over all stores (see doc)."""
    import json
    import resource
    import subprocess
    from concurrent.futures import ProcessPoolExecutor

    tables = _shard_tables(root, paths, shards, work)
    jobs = [(t, str(work / f"pixels/{k:05d}.npy"), str(work / f"pixels/{k:05d}.parquet"), model, str(root))
            for k, t in enumerate(tables)]
    t = time.perf_counter()
    import multiprocessing

    # spawned, not forked: a fork of this process (torch's thread pools running) can hang in the child
    with ProcessPoolExecutor(max(1, procs), mp_context=multiprocessing.get_context("spawn")) as pool:
        decode_cpu = sum(pool.map(_decode_shard, jobs))
    decode_wall = time.perf_counter() - t
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}

    def proc(code: str) -> tuple[float, str, float]:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
        wall = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode:
            raise SystemExit(r.stderr[-3000:])
        return wall, r.stdout, ru1.ru_utime + ru1.ru_stime - ru.ru_utime - ru.ru_stime

    python_s = min(proc("pass")[0] for _ in range(3))
    code = EMBED_JOB.format(images=tables, pixels=[j[1] for j in jobs], index=[j[2] for j in jobs],
                            emb=str(work / "embeddings.parquet"), model=model, device=clip.device)
    wall, out, cpu = proc(code)
    m = json.loads(out.strip().splitlines()[-1])
    assert m["rows"] == len(paths), m
    return {"decode_wall_s": decode_wall, "decode_cpu_s": decode_cpu, "job_wall_s": wall, "job_cpu_s": cpu,
            "python_s": python_s, "import_s": m["import_s"], "encode_s": m["encode_s"],
            "fixed_s": wall - python_s - m["encode_s"], "store_mb": sum(os.path.getsize(j[1]) for j in jobs) / 1e6}


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
    ap.add_argument("--rules", action="store_true",
                    help="also run decode_images + one embed_images job (the rules' functions, see doc)")
    ap.add_argument("--shards", type=int, default=8, help="--rules: shards of the --n images")
    ap.add_argument("--decode-procs", type=int, default=os.cpu_count() or 1,
                    help="--rules: decode_images jobs at once")
    ap.add_argument("--skip-loader", action="store_true", help="skip the decode-only and end-to-end loader runs")
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
        dec = float("nan") if args.skip_loader else decode_only(clip, root, paths, lb, args.workers)
        print(f"decode only (loader batch {lb}, {args.workers} workers): {dec:9.1f} images/s", flush=True)
        rows = []
        for pass_rows in (int(v) for v in args.pass_rows.split(",")):
            set_pass_rows(clip, pass_rows)
            batch = max(args.batch_size, pass_rows)
            mo = model_only(clip, batch, min_iters=max(5, args.n // batch), min_seconds=args.min_seconds)
            lb = args.loader_batch or batch
            e2e = float("nan")
            if not args.skip_loader:
                end_to_end(clip, root, paths[: min(len(paths), 4 * batch)], lb, args.workers)  # warm-up
                e2e = end_to_end(clip, root, paths, lb, args.workers)
            det = determinism(clip, pass_rows)
            rows.append((pass_rows, lb, mo, e2e, det))
            print(f"pass {pass_rows:5d} rows, loader batch {lb:5d}: model-only {mo:9.1f} images/s, "
                  f"end-to-end {e2e:9.1f} images/s ({100 * e2e / mo:3.0f} %), {det}", flush=True)
        if args.rules:
            rules_report(args, clip, root, paths, Path(tmp) / "rules", rows)
    print()
    print("| pass rows | loader batch | model-only images/s | end-to-end images/s | end-to-end / model-only | "
          "same image, other neighbours |")
    print("|---:|---:|---:|---:|---:|---|")
    for pass_rows, batch, mo, e2e, det in rows:
        print(f"| {pass_rows} | {batch} | {mo:.0f} | {e2e:.0f} | {100 * e2e / mo:.0f} % | {det} |")
    print(f"({len(paths)} JPEGs {args.size} from the page cache, {args.workers} loader workers, loader batch "
          f"as listed; decode ceiling {dec:.0f} images/s; goal >= 70 %)")


def rules_report(args, clip, root: Path, paths, work: Path, rows) -> None:
    """Print the --rules figures against model-only at the device's own pass size."""
    from benchmaker.similarity.model import encode_batch

    set_pass_rows(clip, encode_batch(clip.device))
    mo = next((r[2] for r in rows if r[0] == clip.encode_batch), None)
    if mo is None:
        mo = model_only(clip, max(args.batch_size, clip.encode_batch), min_iters=5, min_seconds=args.min_seconds)
    model = {"model": args.model, "pretrained": args.pretrained, "precision": args.precision}
    r = rules_end_to_end(clip, model, root, paths, args.shards, args.decode_procs, work)
    n = len(paths)
    gpu_per_m = r["job_wall_s"] / n * 1e6
    model_per_m = 1e6 / mo
    print(f"rules: decode_images {args.shards} shards x {n // args.shards} images, {args.decode_procs} at a time: "
          f"{r['decode_wall_s']:.1f} s wall, {r['decode_cpu_s']:.1f} CPU-s ({1e3 * r['decode_cpu_s'] / n:.2f} "
          f"CPU-ms/image); pixel store {r['store_mb']:.0f} MB ({1e3 * r['store_mb'] / n:.0f} kB/image)")
    print(f"rules: one embed_images job over {args.shards} stores: {r['job_wall_s']:.2f} s wall "
          f"(python start {r['python_s']:.2f} s, imports {r['import_s']:.2f} s, encode loop {r['encode_s']:.2f} s; "
          f"fixed cost beyond python start {r['fixed_s']:.2f} s, goal <= 3 s), {r['job_cpu_s']:.1f} CPU-s")
    print(f"rules: GPU-seconds per million images {gpu_per_m:.0f} s vs model-only {model_per_m:.0f} s at pass "
          f"{clip.encode_batch} ({gpu_per_m / model_per_m:.2f}x, goal <= 3x); without the fixed cost "
          f"{r['encode_s'] / n * 1e6:.0f} s ({r['encode_s'] / n * 1e6 / model_per_m:.2f}x)")


if __name__ == "__main__":
    main()

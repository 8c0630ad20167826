"""Dry-run time with a large image folder on disk: change detection (the listing) + DAG, 256 shards.

    python benchmarks/dryrun_files.py [N_FILES=1000000] [N_SHARDS=256] [--keep DIR]

Creates N_FILES image files under a scratch folder (1,000 per sub-folder; each folder holds one small
valid JPEG and hard links to it, so 1M files cost ~1,000 inodes of data), writes a config (the
example's facets, offline adapters) and times, each in a fresh `snakemake -n` process:

1. first dry run: every shard listing is written;
2. dry run with no change: no listing is rewritten (every job is still listed: nothing has run);
3. dry run after adding 10 files to a new sub-folder: only their shards' listings change;
and the listing alone (`write_listings`, in this process, warm cache). Prints job counts and seconds.
The issue's goal: <= 30 s for 1M files at 256 shards, including the scan.
"""

from __future__ import annotations

import io
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

PER_DIR = 1000


def _jpeg() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buf, format="JPEG")
    return buf.getvalue()


def make_folder(root: Path, n: int) -> float:
    t0 = time.perf_counter()
    data = _jpeg()
    for d in range((n + PER_DIR - 1) // PER_DIR):
        sub = root / f"site{d // 100:03d}" / f"cam{d % 100:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        first = sub / "img_0000.jpg"
        first.write_bytes(data)
        for i in range(1, min(PER_DIR, n - d * PER_DIR)):
            os.link(first, sub / f"img_{i:04d}.jpg")
    return time.perf_counter() - t0


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def dry_run(work: Path, cfg: Path) -> tuple[float, float, dict[str, int], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    c0 = _cpu()
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(work),
                        "--configfile", str(cfg), "--workflow-profile", "none", "-n", "-q", "rules", "-c1"],
                       capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    cpu = _cpu() - c0
    out = r.stdout + r.stderr
    if r.returncode != 0:
        raise SystemExit(out[-3000:])
    stats = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", out, re.M)}
    note = next((line for line in out.splitlines() if line.startswith("benchmaker:")), "no listing changed")
    return wall, cpu, stats, note


def main(argv: list[str]) -> int:
    keep = None
    if "--keep" in argv:
        i = argv.index("--keep")
        keep = Path(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    n = int(argv[0]) if argv else 1_000_000
    shards = int(argv[1]) if len(argv) > 1 else 256
    tmp = keep or Path(tempfile.mkdtemp(prefix="bm-dryrun-"))
    try:
        images = tmp / "images"
        if not images.exists():
            print(f"creating {n:,} files under {images} ...", flush=True)
            print(f"  created in {make_folder(images, n):.1f} s")
        base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
        cfg = dict(base, n_shards=shards)
        cfg["paths"] = dict(base["paths"], image_root=str(images), results=str(tmp / "results"), rights_map=None)
        cfg_path = tmp / "config.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg))
        if (tmp / "results").exists():
            shutil.rmtree(tmp / "results")

        from benchmaker.preprocess.listing import write_listings
        from benchmaker.preprocess.stage import DEFAULTS

        print(f"{n:,} files, {shards} shards")
        print(f"load average before: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
        print(f"{'step':<40} {'wall s':>7} {'CPU s':>6} {'jobs':>5} {'preprocess':>10}  note")
        for step in ("first dry run (all listings written)", "dry run, no change", "dry run after adding 10 files"):
            if step.startswith("dry run after"):
                new = images / "new_site"
                new.mkdir(exist_ok=True)
                for i in range(10):
                    shutil.copy(images / "site000" / "cam00" / "img_0000.jpg", new / f"added_{i}.jpg")
            wall, cpu, stats, note = dry_run(tmp, cfg_path)
            print(f"{step:<40} {wall:>7.1f} {cpu:>6.1f} {stats.get('total', 0):>5} {stats.get('preprocess', 0):>10}  "
                  f"{note[:100]}", flush=True)
        t0, c0 = time.perf_counter(), time.process_time()
        res = write_listings(images, tmp / "listing-only", DEFAULTS, shards)
        t_list, c_list = time.perf_counter() - t0, time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        res2 = write_listings(images, tmp / "listing-only", DEFAULTS, shards)
        t_list2, c_list2 = time.perf_counter() - t0, time.process_time() - c0
        print(f"{'listing alone, first run':<40} {t_list:>7.1f} {c_list:>6.1f}  ({res.files:,} files, "
              f"{len(res.changed)} shard file(s) written)")
        print(f"{'listing alone, unchanged':<40} {t_list2:>7.1f} {c_list2:>6.1f}  ({len(res2.changed)} written)")
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        if keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

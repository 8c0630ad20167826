"""Wall time of "add 10 images to a 10,000-image benchmark" vs the full run (offline adapters, tiny CLIP).

    python benchmarks/add_images.py [N_IMAGES=10000] [N_ADD=10] [N_SHARDS=16] [CORES=2]

Generates N_IMAGES small distinct JPEGs (64-96 px, coloured shapes on noise) in 100 sub-folders,
builds a random tiny CLIP (benchmaker.tinyclip) and runs the whole workflow with the example config
+ config/offline.yaml (clip vision adapter, rules judge), timing it. Then adds N_ADD images under a
new sub-folder, prints what `snakemake -n` plans (jobs per rule), reruns and prints the rerun's wall
time, the shards whose preprocess/vision jobs ran and how many images CLIP encoded (vision +
embed_images log lines), against the full run's. Nothing is downloaded.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def make_image(path: Path, seed: int) -> None:
    from PIL import Image, ImageDraw

    rnd = random.Random(seed)
    size = rnd.randint(64, 96)
    img = Image.effect_noise((size, size), rnd.randint(10, 60)).convert("RGB")
    d = ImageDraw.Draw(img)
    color = tuple(rnd.randrange(256) for _ in range(3))
    x, y = rnd.randrange(size // 2), rnd.randrange(size // 2)
    (d.ellipse if seed % 2 else d.rectangle)([x, y, x + size // 3, y + size // 3], fill=color)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, quality=85)


def snakemake(work: Path, cfg: Path, *args: str) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(work),
                        "--configfile", str(cfg), "--workflow-profile", "none", *args],
                       capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    out = r.stdout + r.stderr
    if r.returncode != 0:
        raise SystemExit(out[-4000:])
    return wall, out


def job_stats(out: str) -> dict[str, int]:
    part = out.split("Job stats:")[-1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", part, re.M)}


def encoded_since(res: Path, since: float) -> tuple[int, dict[str, set[str]]]:
    n, ran = 0, {}
    for rule in ("preprocess", "vision", "embed_images"):
        for log in sorted((res / "logs" / rule).glob("*.log")):
            if log.stat().st_mtime >= since:
                ran.setdefault(rule, set()).add(log.stem)
                n += sum(int(m) for m in re.findall(r"(\d+) to encode", log.read_text()))
    return n, ran


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 10_000
    n_add = int(argv[1]) if len(argv) > 1 else 10
    shards = int(argv[2]) if len(argv) > 2 else 16
    cores = argv[3] if len(argv) > 3 else "2"
    from benchmaker.config import deep_merge
    from benchmaker.tinyclip import make_tiny_clip

    tmp = Path(tempfile.mkdtemp(prefix="bm-add-"))
    try:
        images = tmp / "images"
        t0 = time.perf_counter()
        for i in range(n):
            make_image(images / f"site{i % 100:02d}" / f"img_{i:06d}.jpg", i)
        print(f"generated {n:,} images in {time.perf_counter() - t0:.1f} s", flush=True)
        clip = make_tiny_clip(tmp / "tiny-clip")
        base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
        cfg = deep_merge(base, yaml.safe_load((ROOT / "config" / "offline.yaml").read_text()))
        cfg = deep_merge(cfg, {
            "n_shards": shards,
            "paths": {"image_root": str(images), "results": str(tmp / "results"), "rights_map": None,
                      "metadata_jsonl": None},
            "vision": {"clip": {"model": f"local-dir:{clip}"}},
            "similarity": {"model": f"local-dir:{clip}", "device": "cpu"},
        })
        cfg_path = tmp / "config.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        res = tmp / "results" / cfg["benchmark"]["name"]

        t_start = time.time()
        full, out = snakemake(tmp, cfg_path, "--cores", cores)
        enc_full, _ = encoded_since(res, t_start)
        print(f"full run: {full:.1f} s, {job_stats(out).get('total')} jobs, {enc_full:,} CLIP encodes", flush=True)

        for k in range(n_add):
            make_image(images / "new_site" / f"added_{k:03d}.jpg", 10_000_000 + k)
        t_dry, out = snakemake(tmp, cfg_path, "-n", "--cores", "1", "-q", "rules")
        stats = job_stats(out)
        print(f"after adding {n_add}: `snakemake -n` ({t_dry:.1f} s) plans {stats}")
        time.sleep(0.05)
        t_start = time.time()
        rerun, out = snakemake(tmp, cfg_path, "--cores", cores)
        enc, ran = encoded_since(res, t_start)
        print(f"rerun: {rerun:.1f} s ({rerun / full:.0%} of the full run), {job_stats(out).get('total')} jobs; "
              f"preprocess shards {sorted(ran.get('preprocess', []))}, vision shards {sorted(ran.get('vision', []))}; "
              f"{enc} CLIP encodes (the full run: {enc_full:,})")
        t_dry, out = snakemake(tmp, cfg_path, "-n", "--cores", "1")
        print(f"then `snakemake -n` ({t_dry:.1f} s): "
              f"{'Nothing to be done' if 'Nothing to be done' in out else job_stats(out)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

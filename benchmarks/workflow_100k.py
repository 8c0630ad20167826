"""The whole workflow on generated images: wall time per stage and peak memory per job.

    PYTHONPATH=src python benchmarks/workflow_100k.py                    # 100,000 images, 64 shards
    PYTHONPATH=src python benchmarks/workflow_100k.py --images 10000 --keep /tmp/wf10k

Generates N small distinct JPEGs (64x48, a colour field with a shape and the image's index encoded in
its pixels, so every sha256 differs) in 100 folders, builds the random tiny CLIP
(``python -m benchmaker.tinyclip``), and runs ``snakemake --cores C`` on a config with the offline
adapters (``clip`` vision with ``similarity.share_vision_job``, the ``rules`` judge), ``--shards``
shards and ``N / 100`` queries of 40 candidates, from an empty results folder and an empty embedding
cache. While it runs, ``benchmarks/measure.TreeSampler`` samples every job's process tree (USS summed
over the job's processes, so forked DataLoader workers are not double counted) every 0.2 s; each
rule's log also holds the job's exact peak (``peak memory:`` line of the runner, ru_maxrss).

Prints, per rule: jobs, wall-clock span (first start to last end), sum of job seconds, the largest
job peak; then the total wall time. Goals (issue 15): 100,000 images <= 30 min on 2 cores, every job
<= 2 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from measure import TreeSampler  # noqa: E402

FACETS = {
    "taxonomy": {"color": ["red", "green", "blue", "yellow", "gray", "unknown"],
                 "shape": ["circle", "square", "stripes", "unknown"]},
    "boolean": ["is_bright"],
    "tags": {"min": 2, "max": 4, "vocabulary": ["red", "green", "blue", "yellow", "gray", "circle", "square",
                                                "stripes", "round", "angular", "pattern", "bright", "dark"]},
}
COLORS = [(220, 40, 40), (40, 180, 60), (40, 70, 220), (230, 210, 40), (128, 128, 128)]


def make_images(root: Path, n: int) -> float:
    from PIL import Image, ImageDraw

    t0 = time.perf_counter()
    for k in range(n):
        p = root / f"d{k % 100:02d}" / f"img_{k:07d}.jpg"
        if k < 100:
            p.parent.mkdir(parents=True, exist_ok=True)
        c = COLORS[k % 5]
        im = Image.new("RGB", (64, 48), tuple(min(255, v + (k // 5) % 30) for v in c))
        d = ImageDraw.Draw(im)
        s = (k // 7) % 3
        if s == 0:
            d.ellipse((16, 8, 48, 40), fill=(255 - c[0], 255 - c[1], 255 - c[2]))
        elif s == 1:
            d.rectangle((16, 8, 48, 40), fill=(255 - c[0], 255 - c[1], 255 - c[2]))
        else:
            for x in range(0, 64, 8):
                d.line((x, 0, x, 47), fill=(0, 0, 0), width=3)
        for b in range(24):  # the index, one bit per pixel on the top row
            im.putpixel((b, 0), (255, 255, 255) if (k >> b) & 1 else (0, 0, 0))
        im.save(p, "JPEG", quality=85)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--keep", help="work folder (default: a temporary one); images are reused if present")
    a = ap.parse_args()
    work = Path(a.keep or tempfile.mkdtemp(prefix="workflow-bench-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    images = work / f"images-{a.images}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "POLARS_MAX_THREADS": str(a.cores),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    if not images.exists():
        tmp = images.with_suffix(".tmp")
        gen = make_images(tmp, a.images)
        tmp.rename(images)
        print(f"generated {a.images:,} JPEGs in {gen:.1f} s", flush=True)
    clip = work / "tiny-clip"
    if not clip.exists():
        subprocess.run([sys.executable, "-m", "benchmaker.tinyclip", str(clip)], check=True, env=env,
                       stdout=subprocess.DEVNULL)
    rights = work / "rights_map.json"
    rights.write_text(json.dumps({"default": {"license": "CC0-1.0", "doi": None, "dataset_name": "synthetic"}}))
    results = work / f"results-{a.images}-{int(time.time())}"
    q = max(4, a.images // 100)
    cfg = {
        "benchmark": {"name": "scale", "description": "generated images, random tiny CLIP (smoke test)",
                      "authors": [{"name": "benchmarks/workflow_100k.py"}]},
        "paths": {"image_root": str(images), "results": str(results), "rights_map": str(rights)},
        "facets": FACETS, "n_shards": a.shards,
        "vision": {"adapter": "clip", "clip": {"model": f"local-dir:{clip}", "pretrained": None,
                                               "batch_size": 128, "num_workers": 1, "device": "cpu"}},
        "plan": {"num_seeds": q, "core_facets": ["color"], "off_facets": ["color", "shape"],
                 "diversity_facets": [], "pos_total": 5, "neutral_total": 5, "neg_total": 30, "neg_hard": 15,
                 "neg_nearmiss": 10, "neg_easy": 5, "max_image_reuse": 3},
        "judge": {"adapter": "rules"},
        "similarity": {"model": f"local-dir:{clip}", "pretrained": None, "batch_size": 128, "num_workers": 1,
                       "device": "cpu", "share_vision_job": True},
        "summary": {"sample_grid": 24, "scale_factor": 1.0},
    }
    cfg_path = work / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(a.cores), "--workflow-profile", "none",
           "--configfile", str(cfg_path), "--quiet", "rules"]
    print(f"{a.images:,} images, {a.shards} shards, {q} queries, {a.cores} cores; results {results}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = TreeSampler(proc.pid).start()
    out, _ = proc.communicate()
    sampler.stop()
    wall = time.perf_counter() - t0
    (work / "snakemake.log").write_text(out)
    if proc.returncode:
        print(out[-5000:])
        print(f"snakemake failed (exit {proc.returncode}) after {wall:.1f} s")
        return 1
    res = results / "scale"
    # per-job exact peak from the runner's log line; rule and job from the log path
    exact: dict[str, float] = {}
    for log in (res / "logs").rglob("*.log"):
        m = re.findall(r"peak memory: (\d+) MB \(this process\), (\d+) MB", log.read_text(errors="replace"))
        if m:
            own, child = (float(x) for x in m[-1])
            exact[str(log.relative_to(res / "logs"))[:-4]] = own + child
    secs: dict[str, list[float]] = defaultdict(list)
    for tsv in (res / "benchmarks").rglob("*.tsv"):
        name = str(tsv.relative_to(res / "benchmarks"))[:-4]
        secs[name.split("/")[0]].append(float(tsv.read_text().splitlines()[1].split("\t")[0]))
    by_rule: dict[str, list[dict]] = defaultdict(list)
    for j in sampler.jobs.values():
        m = re.search(r"tmp\w*\.(\w+)\.py", j["cmd"]) or re.search(r"scripts/(\w+)\.py", j["cmd"])
        by_rule[m.group(1) if m else "other"].append(j)
    print(f"\n{'rule':<20}{'jobs':>6}{'span s':>9}{'job s':>9}{'peak MB (sampled tree)':>24}{'peak MB (log)':>15}")
    for rule in sorted(set(secs) | set(by_rule), key=lambda r: min((j["start"] for j in by_rule.get(r, [])),
                                                                    default=0)):
        jobs = by_rule.get(rule, [])
        span = (max(j["end"] for j in jobs) - min(j["start"] for j in jobs)) if jobs else 0.0
        peaks = [v for k, v in exact.items() if k.split("/")[0] == rule]
        print(f"{rule:<20}{len(secs.get(rule, [])):>6}{span:>9.1f}{sum(secs.get(rule, [])):>9.1f}"
              f"{max((j['peak_mb'] for j in jobs), default=0):>24.0f}{max(peaks, default=0):>15.0f}")
    biggest = max([j["peak_mb"] for j in sampler.jobs.values()] + list(exact.values()) + [0])
    print(f"\ntotal wall {wall:.1f} s ({wall / 60:.1f} min) for {a.images:,} images; largest job peak "
          f"{biggest:.0f} MB (goals: 100,000 images <= 30 min, every job <= 2,000 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Wall time and CLIP model loads of the example (31 photos) end to end, offline.

    PYTHONPATH=src python benchmarks/example_wall.py [--cores 2] [--keep DIR] [--no-share]

Builds the random tiny CLIP (``python -m benchmaker.tinyclip``) into a temporary folder, runs
``snakemake --cores N --configfile config/config.yaml config/offline.yaml`` (plus an overlay that
points the model and the results at the temporary folder) from an empty results folder and an empty
embedding cache, i.e. what ``make example-offline`` does after installation, and prints:

* the wall time of the whole ``snakemake`` command (goal: <= 45 s on the project's 2-core machine),
* the wall time of each job (from the rule logs' timestamps is not enough: Snakemake's benchmark
  files give ``s`` per job),
* the CLIP model loads per job and in total, counted from the ``model load N in this job`` lines
  every load writes to its rule's log (benchmaker.similarity.loads). Minimal = one per vision shard
  (annotation and embedding share it with ``similarity.share_vision_job``) + one for embed_queries.

``--no-share`` runs with ``similarity.share_vision_job: false`` for comparison.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--keep", help="work folder to keep (default: a temporary one)")
    ap.add_argument("--no-share", action="store_true", help="similarity.share_vision_job: false")
    a = ap.parse_args()
    work = Path(a.keep or tempfile.mkdtemp(prefix="example-wall-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    clip_dir = work / "tiny-clip"
    subprocess.run([sys.executable, "-m", "benchmaker.tinyclip", str(clip_dir)], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    overlay = {
        "paths": {"results": str(work / "results"), "image_root": str(ROOT / "example" / "images"),
                  "rights_map": str(ROOT / "example" / "rights_map.json")},
        "vision": {"clip": {"model": f"local-dir:{clip_dir}", "pretrained": None}},
        "similarity": {"model": f"local-dir:{clip_dir}", "pretrained": None,
                       **({"share_vision_job": False} if a.no_share else {})},
        # config/offline.yaml's systems with this run's tiny CLIP (lists are replaced, not merged)
        "evaluate": {"systems": [{"name": "tiny-clip", "kind": "clip", "model": f"local-dir:{clip_dir}",
                                  "num_workers": 0}, {"name": "bm25", "kind": "bm25"}]},
    }
    (work / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(a.cores), "--workflow-profile", "none",
           "--configfile", str(ROOT / "config" / "config.yaml"), str(ROOT / "config" / "offline.yaml"),
           str(work / "overlay.yaml")]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        print((r.stdout + r.stderr)[-5000:])
        print(f"snakemake failed (exit {r.returncode}) after {wall:.1f} s", file=sys.stderr)
        return 1
    (res,) = [p for p in (work / "results").iterdir() if p.is_dir() and not p.name.startswith(".")]
    print(f"example end to end: {wall:.1f} s wall (goal <= 45 s), cores {a.cores}, "
          f"share_vision_job {not a.no_share}, results {res}")
    jobs = []
    for tsv in sorted((res / "benchmarks").rglob("*.tsv")):
        with tsv.open() as fh:
            row = next(csv.DictReader(fh, delimiter="\t"))
        jobs.append((str(tsv.relative_to(res / "benchmarks"))[:-4], float(row["s"])))
    loads = {}
    for log in sorted((res / "logs").rglob("*.log")):
        n = len(re.findall(r"model load \d+ in this job", log.read_text(errors="replace")))
        if n:
            loads[str(log.relative_to(res / "logs"))[:-4]] = n
    print(f"{'job':<28} {'s':>7} {'model loads':>12}")
    for name, s in jobs:
        print(f"{name:<28} {s:>7.1f} {loads.get(name, 0):>12}")
    print(f"model loads in total: {sum(loads.values())} in {len(loads)} jobs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How big and how fast is the static DAG? Prints jobs and dry-run time per n_shards.

    python benchmarks/dag.py [256 1024 4096]

For each shard count it writes a config (the example's facets; paths to an empty image folder),
runs `snakemake -n -q rules` in a scratch folder and prints the job count, wall time and peak RSS of
the dry run. The brief's budget: a real run stays under ~10^4 jobs; 1M images at 1024 shards is
~1k images per shard.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    counts = [int(a) for a in argv] or [256, 1024, 4096]
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    print(f"{'n_shards':>9} {'jobs':>7} {'dry-run s':>10} {'peak RSS MB':>12}")
    for n in counts:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "images").mkdir()
            cfg = dict(base, n_shards=n)
            cfg["paths"] = dict(base["paths"], image_root=str(tmp / "images"), results=str(tmp / "results"),
                                rights_map=None)
            (tmp / "config.yaml").write_text(yaml.safe_dump(cfg))
            t0 = time.perf_counter()
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            r = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(tmp),
                                "--configfile", str(tmp / "config.yaml"), "--workflow-profile", "none",
                                "-n", "-q", "rules", "-c1"], capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
            wall = time.perf_counter() - t0
            rss = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before) / 1024
            m = re.search(r"^total\s+(\d+)", r.stdout + r.stderr, re.M)
            if r.returncode != 0 or not m:
                print(r.stdout[-2000:], r.stderr[-2000:])
                return 1
            print(f"{n:>9} {int(m.group(1)):>7} {wall:>10.1f} {rss:>12.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Fixed per-job start-up of every stage: a fresh interpreter importing what a Snakemake job imports.

    PYTHONPATH=src python benchmarks/startup.py [--repeat 5] [--stages plan judge ...] [--importtime STAGE]

A rule's job is a new Python process that runs Snakemake's script preamble (``snakemake.script``),
``benchmaker.runner`` and the stage's module (``versions.STAGE_ENTRIES``) before its first line of
work. For each stage this prints the best-of-``--repeat`` wall and CPU seconds of exactly that
(``python -c 'import ...'``, nothing else), whether torch was imported, and the heavy third-party
packages that were. Goal: <= 0.5 s for the stages that run no model (``NO_MODEL`` below; the ML
stages import torch only when they load a model, which ``similarity.loads`` logs and times apart).
CPU seconds depend less on the machine's load than wall seconds: report the load average with them.

``--importtime STAGE`` prints that stage's 25 slowest imports (``python -X importtime``, cumulative).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from benchmaker.versions import STAGE_ENTRIES  # noqa: E402 - reads no stage module

# stages whose jobs never load a model: their start-up is the whole fixed cost of the job
NO_MODEL = ("preprocess", "merge", "plan", "queries", "judge", "score", "summary", "export", "upload", "audit_sample",
            "audit_labelling", "audit_report", "audit_judge2", "staging", "evaluate", "deepen_system", "deepen")
HEAVY = ("torch", "open_clip", "torchvision", "sklearn", "scipy", "altair", "matplotlib", "ranx", "numba",
         "pandas", "openai", "google", "huggingface_hub", "datasets", "transformers", "jinja2", "vl_convert")

CHILD = """
import resource, sys, time, json
t = time.perf_counter()
from snakemake.script import Snakemake
import benchmaker.runner
{imports}
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"import_s": time.perf_counter() - t, "cpu_s": ru.ru_utime + ru.ru_stime,
                  "heavy": sorted(m for m in {heavy!r} if m in sys.modules)}}))
"""


def child_code(stage: str) -> str:
    return CHILD.format(imports="\n".join(f"import {m}" for m in STAGE_ENTRIES[stage]), heavy=HEAVY)


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}


def measure(stage: str, repeat: int) -> dict:
    """Best of ``repeat`` fresh processes: process wall (start to exit), import wall, CPU."""
    import time

    best: dict | None = None
    for _ in range(repeat):
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", child_code(stage)], capture_output=True, text=True,
                           env=_env(), check=False)
        wall = time.perf_counter() - t
        if r.returncode:
            raise SystemExit(f"{stage}: {r.stderr[-2000:]}")
        m = json.loads(r.stdout.strip().splitlines()[-1])
        m["process_s"] = wall
        if best is None or m["process_s"] < best["process_s"]:
            best = m
    assert best is not None
    return best


def importtime(stage: str, top: int = 25) -> None:
    r = subprocess.run([sys.executable, "-X", "importtime", "-c", child_code(stage)], capture_output=True,
                       text=True, env=_env(), check=False)
    rows = []
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cum, name = (x.strip() for x in line[len("import time:"):].split("|"))
            rows.append((int(cum), name))
    for cum, name in sorted(rows, reverse=True)[:top]:
        print(f"{cum / 1e6:8.3f} s  {name}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--stages", nargs="*", default=list(STAGE_ENTRIES))
    ap.add_argument("--importtime", metavar="STAGE")
    a = ap.parse_args()
    if a.importtime:
        importtime(a.importtime)
        return 0
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs, "
          f"best of {a.repeat}")
    print(f"{'stage':<16} {'process s':>9} {'imports s':>9} {'cpu s':>6}  model  heavy imports")
    bad = []
    for stage in a.stages:
        m = measure(stage, a.repeat)
        model = "no" if stage in NO_MODEL else "yes"
        print(f"{stage:<16} {m['process_s']:>9.2f} {m['import_s']:>9.2f} {m['cpu_s']:>6.2f}  {model:<5}  "
              f"{', '.join(m['heavy']) or '-'}")
        if stage in NO_MODEL and ("torch" in m["heavy"] or m["process_s"] > 0.5):
            bad.append(stage)
    print(f"over 0.5 s or importing torch without a model: {', '.join(bad) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

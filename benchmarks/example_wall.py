"""Wall time and CLIP model loads of the example (31 photos) end to end, offline.

    PYTHONPATH=src python benchmarks/example_wall.py [--cores 2] [--keep DIR] [--no-share]

Builds the random tiny CLIP (``python -m benchmaker.tinyclip``) into a temporary folder, runs
``snakemake --cores N --configfile config/config.yaml config/offline.yaml`` (plus an overlay that
points the model and the results at the temporary folder) from an empty results folder and an empty
embedding cache, i.e. what ``make example-offline`` does after installation, and prints:

* the wall time of the whole ``snakemake`` command (goal: <= 25 s on a quiet 2-core machine) and the
  load average before and after (other processes on the machine slow every job),
* the wall time of each job (from the rule logs' timestamps is not enough: Snakemake's benchmark
  files give ``s`` per job),
* each job's split: start-up (process start to the stage's first line, from the ``start-up`` line
  that ``benchmaker.runner`` logs), CLIP model loads (the ``model load N in this job: ... S s
  including imports`` lines of ``benchmaker.similarity.loads``, written by every load: vision,
  embed_images, embed_queries, evaluate's clip systems; a reuse is logged apart and not counted),
  and the rest, the work; and each job's CPU seconds (the runner's ``cpu time`` line; Snakemake's
  sampled ``cpu_time`` misses most of a short job), which on a loaded machine say about what the
  job would cost on an idle core. Minimal = one load per vision
  shard (annotation and embedding share it with ``similarity.share_vision_job``) + one for the
  query texts + one per clip retrieval system whose model is not the similarity stage's (one that is
  ranks that stage's embeddings files: no load, docs/evaluate.md).

It also prints where the wall time goes between the jobs: Snakemake's own start-up (the command's
start to the first job's process start, from the rule logs' timestamps), the seconds in which no job
ran after that (scheduling, the DAG's serial chain waiting on one job), and a timeline of every job
(start and end in seconds since the command started), which shows the critical path. Where the Slurm
executor plugin is installed and ``scontrol`` is on PATH, the plugin runs ``scontrol show config`` when
Snakemake imports it (snakemake-executor-plugin-slurm ``job_status_query.get_min_job_age``, timeout
10 s); that probe is timed apart, after the run, and printed as a share of Snakemake's start-up (on a
machine with a Slurm configuration but no reachable controller it waits ~9 s).

``--no-share`` runs with ``similarity.share_vision_job: false`` for comparison. ``--profile DIR``
profiles every Python process of the run (Snakemake and each job) with cProfile into
``DIR/<pid>-<name>.prof`` (``benchmarks/jobprofile/sitecustomize.py``; read with ``python -m pstats``);
profiling slows the run, so its wall time is not comparable.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# the log lines every job writes: benchmaker.runner (start-up) and benchmaker.similarity.loads (loads)
START = re.compile(r"start-up (\d+\.\d+) s \(process start")
CPU = re.compile(r"cpu time (\d+\.\d+) s \(this process")
LOAD = re.compile(r"model load \d+ in this job: .*?, (\d+\.\d+) s including imports")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ", re.M)  # logging's asctime


def stamp(text: str, which: int) -> float | None:
    """Epoch seconds of the first (which=0) or last (-1) log line of ``text`` (local time, as logged)."""
    found = STAMP.findall(text)
    if not found:
        return None
    day, ms = found[which]
    return time.mktime(time.strptime(day, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000


def slurm_probe() -> float | None:
    """Seconds of the ``scontrol show config`` the Slurm executor plugin runs when Snakemake imports
    it, or None where the plugin or scontrol is absent."""
    import importlib.util

    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None or not shutil.which("scontrol"):
        return None
    t = time.perf_counter()
    try:
        subprocess.run(["scontrol", "show", "config"], capture_output=True, timeout=10, check=False)
    except subprocess.TimeoutExpired:
        pass
    return time.perf_counter() - t


def run_sampled(cmd: list[str], env: dict) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``cmd``; also return the CPU seconds of its own process (Snakemake: parsing, the DAG,
    scheduling, checking and recording each job; not its jobs), sampled every 0.1 s until it exits."""
    import threading

    import psutil

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=err, text=True)
        own = [0.0]

        def sample() -> None:
            try:
                p = psutil.Process(proc.pid)
                while proc.poll() is None:
                    t = p.cpu_times()
                    own[0] = t.user + t.system
                    time.sleep(0.1)
            except psutil.Error:
                pass

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        rc = proc.wait()
        th.join()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, rc, out.read(), err.read()), own[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--keep", help="work folder to keep (default: a temporary one)")
    ap.add_argument("--no-share", action="store_true", help="similarity.share_vision_job: false")
    ap.add_argument("--profile", help="cProfile every Python process of the run into this folder")
    a = ap.parse_args()
    work = Path(a.keep or tempfile.mkdtemp(prefix="example-wall-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    if a.profile:
        Path(a.profile).mkdir(parents=True, exist_ok=True)
        env["BENCHMAKER_PROFILE_DIR"] = str(Path(a.profile).resolve())
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "benchmarks" / "jobprofile"), env["PYTHONPATH"]])
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
    # the README's command (`make example-offline`), with the repository's workflow profile as it
    # applies automatically (profiles/default: the local gpu slots of benchmaker/local_gpus.py)
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(a.cores),
           "--configfile", str(ROOT / "config" / "config.yaml"), str(ROOT / "config" / "offline.yaml"),
           str(work / "overlay.yaml")]
    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    cpu0 = os.times()
    epoch0 = time.time()
    t0 = time.perf_counter()
    r, own_cpu = run_sampled(cmd, env)
    wall = time.perf_counter() - t0
    cpu1 = os.times()
    cpu_all = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system)
    if r.returncode != 0:
        print((r.stdout + r.stderr)[-5000:])
        print(f"snakemake failed (exit {r.returncode}) after {wall:.1f} s", file=sys.stderr)
        return 1
    (res,) = [p for p in (work / "results").iterdir() if p.is_dir() and not p.name.startswith(".")]
    print(f"example end to end: {wall:.1f} s wall (goal <= 25 s on a quiet machine), cores {a.cores}, "
          f"share_vision_job {not a.no_share}, results {res}")
    print(f"load average before {load0}, after {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"({os.cpu_count()} CPUs); CPU seconds of the whole command (Snakemake and every job): "
          f"{cpu_all:.1f}, of which Snakemake's own process {own_cpu:.1f} (sampled; its jobs' "
          f"processes are the rest)")
    jobs = []
    for tsv in sorted((res / "benchmarks").rglob("*.tsv")):
        with tsv.open() as fh:
            row = next(csv.DictReader(fh, delimiter="\t"))
        jobs.append((str(tsv.relative_to(res / "benchmarks"))[:-4], float(row["s"])))
    split = {}
    spans = {}  # job -> (process start, last log line), seconds since the command started
    for log in sorted((res / "logs").rglob("*.log")):
        text = log.read_text(errors="replace")
        loads = [float(x) for x in LOAD.findall(text)]
        start = [float(x) for x in START.findall(text)]
        cpu = [float(x) for x in CPU.findall(text)]
        name = str(log.relative_to(res / "logs"))[:-4]
        split[name] = (start[0] if start else None, loads, cpu[-1] if cpu else 0.0)
        # the process started start-up seconds before its start-up line (not before its first line:
        # the runner logs the rule's name before it imports the stage)
        at = next((line for line in text.splitlines() if START.search(line)), text)
        first, last = stamp(at, 0), stamp(text, -1)
        if first is not None and last is not None:
            spans[name] = (first - epoch0 - (start[0] if start else 0.0), last - epoch0)
    print(f"{'job':<28} {'s':>6} {'start-up':>9} {'loads':>6} {'load s':>7} {'work':>6} {'CPU s':>6}")
    tot = {"s": 0.0, "start": 0.0, "loads": 0, "load_s": 0.0, "work": 0.0, "cpu": 0.0}
    for name, s in jobs:
        start, loads, cpu = split.get(name, (None, [], 0.0))
        work = s - (start or 0.0) - sum(loads)
        print(f"{name:<28} {s:>6.1f} {'-' if start is None else f'{start:.2f}':>9} {len(loads):>6} "
              f"{sum(loads):>7.1f} {work:>6.1f} {cpu:>6.1f}")
        tot["s"] += s
        tot["start"] += start or 0.0
        tot["loads"] += len(loads)
        tot["load_s"] += sum(loads)
        tot["work"] += work
        tot["cpu"] += cpu
    print(f"{'all jobs (job-seconds)':<28} {tot['s']:>6.1f} {tot['start']:>9.2f} {tot['loads']:>6} "
          f"{tot['load_s']:>7.1f} {tot['work']:>6.1f} {tot['cpu']:>6.1f}")
    unlogged = [n for n, _ in jobs if split.get(n, (None,))[0] is None]
    if spans:
        first_job = min(b for b, _ in spans.values())
        busy, edge = 0.0, first_job
        for b, e in sorted(spans.values()):  # union of the jobs' spans
            if e > edge:
                busy += e - max(b, edge)
                edge = e
        probe = slurm_probe()
        if probe is not None:
            print(f"end to end without the Slurm plugin's probe (a machine without SLURM's client tools, "
                  f"or with a reachable controller): {wall - probe:.1f} s")
        print(f"Snakemake start-up (command start to the first job's process start): {first_job:.1f} s"
              + (f", of which the Slurm plugin's 'scontrol show config' probe at import takes {probe:.1f} s "
                 "(timed apart after the run)" if probe is not None else "")
              + f"; some job running: {busy:.1f} s; no job running after that: {wall - first_job - busy:.1f} s")
        print("timeline (s since the command started): "
              + ", ".join(f"{n} {b:.1f}-{e:.1f}" for n, (b, e) in sorted(spans.items(), key=lambda x: x[1])))
    print(f"model loads in total: {tot['loads']} in {sum(1 for _, (_, ld, _) in split.items() if ld)} jobs; "
          f"start-up = process start to the stage's first line (runner's '{START.pattern.split()[0]}' line), "
          f"load s = model loads with torch/open_clip imports, work = the rest of the job's seconds, CPU s = "
          f"the job's CPU seconds (runner's 'cpu time' line: about what the job costs on an idle core)"
          + (f"; no start-up line in: {', '.join(unlogged)}" if unlogged else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

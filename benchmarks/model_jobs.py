"""The fixed cost of each model job: its seconds that are not work, from a run's own records.

    python benchmarks/model_jobs.py RESULTS_DIR                  # a finished run, e.g. results/tiny
    PYTHONPATH=src python benchmarks/model_jobs.py --run tiny    # run the example, then report
    PYTHONPATH=src python benchmarks/model_jobs.py --run vit-b-32 [--weights FILE] [--keep DIR]

``--run MODEL`` runs the example workflow (31 photos, 2 shards, ``config/config.yaml`` +
``config/offline.yaml``, ``snakemake --cores 2``) from an empty results folder and an empty embedding
cache, with ``similarity.share_vision_job: false`` so that every model job kind runs as its own job:
``vision`` (the clip annotator), ``embed_images`` (one job per group of shards, reading the pixel
stores of ``decode_images``), ``embed_queries``; then the ``embed_images`` jobs once more on an
emptied embedding cache (``--forcerun embed_images --until embed_images``), since the annotator of
the same model had filled it and they would encode nothing. MODEL is ``tiny`` (``benchmaker.tinyclip``, a local-dir
folder) or ``vit-b-32`` (open_clip's ViT-B-32 with random weights saved to a safetensors checkpoint and
given as ``pretrained: FILE``, as a real checkpoint is: the job builds the model, hashes and loads the
file; ``--weights`` reuses a file made by an earlier run).

For every job that loads a CLIP model (``embed_images``, ``embed_queries``, ``vision`` with the clip
adapter, ``evaluate`` with a clip system) and for ``decode_images``: its wall seconds (Snakemake's
``benchmark:`` file: process start to exit, so Python start, imports, the model load and writing the
outputs are included), its CPU seconds (the runner's ``cpu time`` line), and its work: the encode loops
its log reports (``encoded N images in X s (..., Y s CPU)``, ``encoded N texts in X s (Y s CPU)``; for
``decode_images`` the decoding is the work: its lines are not timed, so it is listed with its wall
only). The *fixed* cost of a job = wall - work - a bare ``python -c pass`` (best of 3); likewise in
CPU seconds, which a loaded machine changes less than wall seconds. Goal (issue #33): fixed <= 3 s.
Prints one line per job and one per rule: the sums, and the median share of the wall that is not work.
A job whose images were all in the embedding cache did no work (share 100 %).
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULES = ("embed_images", "embed_queries", "vision", "evaluate", "decode_images")
WORK = re.compile(r"encoded (\d+) (images|texts) in ([\d.]+) s(?: \([^)]*?([\d.]+) s CPU\))?")
CPU = re.compile(r"cpu time (\d+\.\d+) s \(this process")


def python_start() -> tuple[float, float]:
    """(wall, CPU) seconds of a bare ``python -c pass``, best of 3: what any job pays to start."""
    best = (float("inf"), float("inf"))
    for _ in range(3):
        c0 = os.times()
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        wall = time.perf_counter() - t
        c1 = os.times()
        cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
        best = (min(best[0], wall), min(best[1], cpu))
    return best


def job_rows(res: Path) -> list[dict]:
    """One row per model job of a finished run (see module doc)."""
    rows = []
    for rule in RULES:
        # decode_images: one folder per pixel key (benchmarks/decode_images/<key>/<shard>.tsv);
        # embed_queries: one job, benchmarks/embed_queries.tsv
        one = res / "benchmarks" / f"{rule}.tsv"
        for tsv in [one] * one.exists() + sorted((res / "benchmarks" / rule).rglob("*.tsv")):
            with tsv.open() as fh:
                wall = float(next(csv.DictReader(fh, delimiter="\t"))["s"])
            log = (res / "logs" / tsv.relative_to(res / "benchmarks")).with_suffix(".log")
            text = log.read_text(errors="replace") if log.exists() else ""
            found = WORK.findall(text)
            cpu = CPU.findall(text)
            job = "-" if tsv == one else str(tsv.relative_to(res / "benchmarks" / rule))[:-4]
            rows.append({"rule": rule, "job": job, "wall": wall,
                         "cpu": float(cpu[-1]) if cpu else None, "items": sum(int(m[0]) for m in found),
                         "work": sum(float(m[2]) for m in found),
                         "work_cpu": sum(float(m[3]) for m in found if m[3]) if found and all(m[3] for m in found)
                         else None})
    return rows


def report(res: Path, start: tuple[float, float] | None = None) -> int:
    py_wall, py_cpu = start or python_start()
    rows = job_rows(res)
    print(f"python -c pass: {py_wall:.3f} s wall, {py_cpu:.3f} s CPU (best of 3); load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    print(f"{'rule':<14} {'job':<14} {'wall':>7} {'work':>6} {'fixed':>6} {'CPU':>6} {'work CPU':>8} "
          f"{'fixed CPU':>9} {'items':>6} {'not work':>8}")
    by_rule: dict[str, list[dict]] = {}
    for r in rows:
        r["fixed"] = r["wall"] - r["work"] - py_wall
        r["fixed_cpu"] = (r["cpu"] - r["work_cpu"] - py_cpu
                          if r["cpu"] is not None and r["work_cpu"] is not None else None)
        r["share"] = 1 - r["work"] / r["wall"] if r["wall"] else 0.0
        by_rule.setdefault(r["rule"], []).append(r)
        print(f"{r['rule']:<14} {r['job']:<14} {r['wall']:7.2f} {r['work']:6.2f} {r['fixed']:6.2f} "
              f"{_num(r['cpu'], 6)} {_num(r['work_cpu'], 8)} {_num(r['fixed_cpu'], 9)} {r['items']:6d} "
              f"{100 * r['share']:7.1f}%")
    print(f"{'rule':<14} {'jobs':>4} {'wall s':>8} {'work s':>7} {'fixed s':>8} {'fixed s/job':>11} "
          f"{'fixed CPU s/job':>15} {'median not work':>15}")
    for rule, rs in by_rule.items():
        cpus = [r["fixed_cpu"] for r in rs if r["fixed_cpu"] is not None]
        print(f"{rule:<14} {len(rs):4d} {sum(r['wall'] for r in rs):8.2f} {sum(r['work'] for r in rs):7.2f} "
              f"{sum(r['fixed'] for r in rs):8.2f} {statistics.mean(r['fixed'] for r in rs):11.2f} "
              f"{_num(statistics.mean(cpus) if cpus else None, 15)} "
              f"{100 * statistics.median(r['share'] for r in rs):14.1f}%")
    return 0


def _num(v: float | None, width: int) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:{width}.2f}"


def vit_b_32_weights(dest: Path, env: dict) -> Path:
    """open_clip's ViT-B-32 with seeded random weights, saved as a safetensors checkpoint (605 MB)."""
    code = ("from benchmaker import _tvshim; _tvshim.install()\n"
            "import open_clip, torch\nfrom safetensors.torch import save_file\ntorch.manual_seed(0)\n"
            "m = open_clip.create_model('ViT-B-32', pretrained=None)\n"
            f"save_file({{k: v.contiguous() for k, v in m.state_dict().items()}}, {str(dest)!r})\n")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, stderr=subprocess.DEVNULL)
    return dest


def run(model: str, work: Path, weights: str | None, cores: int) -> int:
    import yaml

    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    if model == "tiny":
        clip_dir = work / "tiny-clip"
        subprocess.run([sys.executable, "-m", "benchmaker.tinyclip", str(clip_dir)], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        spec = {"model": f"local-dir:{clip_dir}", "pretrained": None}
    else:
        ckpt = Path(weights) if weights else vit_b_32_weights(work / "vit-b-32-random.safetensors", env)
        spec = {"model": "ViT-B-32", "pretrained": str(ckpt.resolve())}
    overlay = {
        "paths": {"results": str(work / "results"), "image_root": str(ROOT / "example" / "images"),
                  "rights_map": str(ROOT / "example" / "rights_map.json")},
        "vision": {"clip": dict(spec)},
        "similarity": {**spec, "share_vision_job": False},
        # config/offline.yaml's systems with this run's model (lists are replaced, not merged)
        "evaluate": {"systems": [{"name": "clip", "kind": "clip", **spec, "num_workers": 0},
                                 {"name": "bm25", "kind": "bm25"}]},
    }
    (work / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(cores), "--configfile",
           str(ROOT / "config" / "config.yaml"),
           str(ROOT / "config" / "offline.yaml"), str(work / "overlay.yaml")]
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if r.returncode:
        print((r.stdout + r.stderr)[-5000:])
        print(f"snakemake failed (exit {r.returncode})", file=sys.stderr)
        return 1
    (res,) = [p for p in (work / "results").iterdir() if p.is_dir() and not p.name.startswith(".")]
    # the clip annotator (vision) filled the embedding cache that embed_images shares: run the
    # embed_images jobs again on an empty cache, so that they encode (as with another annotator)
    shutil.rmtree(work / "results" / ".cache" / "embeddings")
    r = subprocess.run([*cmd, "--forcerun", "embed_images", "--until", "embed_images"], cwd=ROOT, env=env,
                       capture_output=True, text=True, check=False)
    if r.returncode:
        print((r.stdout + r.stderr)[-5000:])
        print(f"snakemake --forcerun embed_images failed (exit {r.returncode})", file=sys.stderr)
        return 1
    print(f"model {model} ({spec['model']}), the example workflow in {time.perf_counter() - t:.1f} s, "
          f"--cores {cores}, results {res}")
    return report(res)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", help="a finished run's results folder (without --run)")
    ap.add_argument("--run", choices=("tiny", "vit-b-32"), help="run the example with this model first")
    ap.add_argument("--weights", help="--run vit-b-32: an existing random ViT-B-32 safetensors file")
    ap.add_argument("--keep", help="--run: work folder to keep (default: a temporary one)")
    ap.add_argument("--cores", type=int, default=2)
    a = ap.parse_args()
    if not a.run:
        if not a.results:
            ap.error("give RESULTS_DIR or --run MODEL")
        return report(Path(a.results))
    if a.keep:
        Path(a.keep).mkdir(parents=True, exist_ok=True)
        return run(a.run, Path(a.keep).resolve(), a.weights, a.cores)
    with tempfile.TemporaryDirectory(prefix="model-jobs-") as tmp:
        return run(a.run, Path(tmp), a.weights, a.cores)


if __name__ == "__main__":
    sys.exit(main())

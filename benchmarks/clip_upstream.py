"""CLIP scoring side by side with upstream, whole processes: upstream's one-pair-per-forward loop vs
the project's jobs (embed_images, embed_queries, score) on the same 650 pairs.

    PYTHONPATH=src python benchmarks/clip_upstream.py [--models ViT-B-32 tiny] [--repeat 2]
                                                     [--threads 2] [--workers 1] [--keep DIR]

The data is upstream's reproduction run (docs/reference: 200 images, 50 queries x 13 candidates =
650 pairs, each image in ~3.25 queries), with 640x480 photo-like JPEGs (``clip_cpu.make_images``).
Models: ``ViT-B-32`` (open_clip's architecture, 151 M parameters, random weights: speed does not
depend on the weights) and ``tiny`` (the project's random tiny CLIP, ``benchmaker.tinyclip``).
Both sides load exactly the same weights through ``benchmaker.similarity.model.load_clip`` (upstream
used transformers' CLIP: this compares the *method*, not the library) and run fp32 on the CPU with
``--threads`` torch threads.

* **upstream** (one process, as ``benchmaker postprocess similarity``): import torch, load the model,
  then per qrels row open the image (from disk: upstream downloads it over HTTP, which would only
  add time), convert to RGB, preprocess, ``encode_image`` on a batch of one, tokenize and
  ``encode_text`` the query, cosine; write the rows with their score.
* **project** (three processes, one per job, as the workflow runs them after the judge):
  ``embed_images`` (one shard: DataLoader, JPEG draft decoding, each image once, fixed passes of
  ``ENCODE_BATCH`` rows, no embedding cache), ``embed_queries`` (each query once), ``score`` (numpy,
  no torch). Snakemake's own scheduling and script preamble (~0.1 s CPU per job) are not included;
  the jobs run one after the other (the workflow may run the first two side by side).

Options for a GPU node (issue #33): ``--device cuda`` (both sides; precision auto = fp16 autocast
there), ``--store`` (the project side as the workflow runs it now: ``decode_images`` on the CPU
first, a process of its own reported apart, then ``embed_images`` reading the pixel store),
``--images/--queries/--per-query`` (e.g. 20000 / 5000 / 13 = 65,000 pairs) and ``--upstream-pairs N``
(upstream scores only the first N pairs and its time is extrapolated linearly to all pairs: it
scores pair by pair, so its time is linear in the pairs).

Each repetition runs both sides for each model, in alternating order (interleaved, so a change in
the machine's load hits both). Prints per run the wall seconds (each process start to exit), the CPU
seconds of its processes (user + sys; less dependent on other load than wall, though thread
contention inflates both) and the load average, then per model the medians, the ratios upstream /
project, and the largest score difference between the two sides (JPEG draft decoding is part of the
project's model identity: ~1e-3, docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

N_IMAGES, N_QUERIES, PER_QUERY = 200, 50, 13

UPSTREAM = r"""
import json, sys, time
import torch
torch.set_num_threads({threads})
from PIL import Image
from benchmaker.similarity.model import load_clip
clip = load_clip({model!r}, None, device={device!r}, precision={precision!r})
rows = [json.loads(line) for line in open({qrels!r})][:{limit}]
with torch.inference_mode(), clip._autocast():
    for r in rows:
        img = Image.open({root!r} + "/" + r["image_id"]).convert("RGB")
        fi = clip.model.encode_image(clip.preprocess(img).unsqueeze(0).to(clip.device)).float()
        ft = clip.model.encode_text(clip.tokenizer([r["query_text"]]).to(clip.device)).float()
        fi = fi / fi.norm(dim=-1, keepdim=True)
        ft = ft / ft.norm(dim=-1, keepdim=True)
        r["clip_score"] = float((fi * ft).sum())
with open({out!r}, "w") as fh:
    for r in rows:
        fh.write(json.dumps(r) + "\n")
"""

EMBED_IMAGES = r"""
from benchmaker.similarity.embed import run_images
run_images(images={images!r}, embeddings={emb!r}, losses={emb!r} + ".losses.jsonl",
           model={{"model": {model!r}, "pretrained": None, "precision": {precision!r}}},
           runtime={{"batch_size": 64, "num_workers": {workers}}}, cache_dir=None, image_root={root!r},
           device={device!r}, threads={threads}, **{store!r})
"""

DECODE_IMAGES = r"""
from benchmaker.similarity.decode import run_shard
run_shard(images={images!r}, pixels={npy!r}, index={idx!r}, model={{"model": {model!r}, "pretrained": None}},
          image_root={root!r}, threads={workers} + 1)
"""

EMBED_QUERIES = r"""
from benchmaker.similarity.embed import run_queries
run_queries(qrels={qrels!r}, embeddings={qemb!r}, model={{"model": {model!r}, "pretrained": None,
            "precision": {precision!r}}}, device={device!r}, threads={threads})
"""

SCORE = r"""
from benchmaker.similarity.score import run
run(qrels={qrels!r}, query_embeddings={qemb!r}, image_embeddings=[{emb!r}],
    embed_losses=[{emb!r} + ".losses.jsonl"], scored={out!r}, losses={out!r} + ".losses.jsonl")
"""


def setup(work: Path, n_images: int, n_queries: int, per_query: int) -> dict:
    import polars as pl
    from clip_cpu import make_images, make_pairs

    root = work / "images"
    root.mkdir(parents=True, exist_ok=True)
    paths = make_images(root, n_images)
    queries, pairs = make_pairs(n_images, n_queries, per_query)
    names = [p.name for p in paths]
    pl.DataFrame({
        "image_id": names, "image_url": None, "mime_type": "image/jpeg", "width": 640, "height": 480,
        "file_size": [p.stat().st_size for p in paths], "sha256": [f"{i:064x}" for i in range(len(paths))],
        "phash": None, "license": "CC0-1.0", "doi": None, "original_dataset_name": "synthetic",
    }, schema_overrides={"image_url": pl.String, "phash": pl.String, "doi": pl.String}).write_ndjson(
        work / "images.jsonl")
    pl.DataFrame({
        "query_id": [q for q, _ in pairs], "query_text": [queries[q] for q, _ in pairs],
        "image_id": [names[i] for _, i in pairs], "relevance_label": 0, "pool": "hard", "is_seed": False,
        "seed_not_relevant": False, "judge": "synthetic",
    }).write_ndjson(work / "qrels.jsonl")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-m", "benchmaker.tinyclip", str(work / "tiny-clip")], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    return {"root": str(root), "images": str(work / "images.jsonl"), "qrels": str(work / "qrels.jsonl")}


CPU: list[float] = []  # CPU seconds (user + sys) of each process, in the order of _proc calls


def _proc(code: str) -> float:
    """Wall seconds of one fresh process running ``code``; its CPU seconds go to ``CPU``."""
    import resource

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime)
    if r.returncode:
        raise SystemExit(r.stderr[-3000:])
    return wall


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def upstream(model: str, d: dict, work: Path, a) -> tuple[float, Path]:
    """Upstream's one process; with ``--upstream-pairs`` on the first pairs only, extrapolated."""
    out = work / "upstream_scored.jsonl"
    limit = a.upstream_pairs or d["pairs"]
    wall = _proc(UPSTREAM.format(model=model, qrels=d["qrels"], root=d["root"], out=str(out),
                                 threads=a.threads, device=a.device, precision=a.precision, limit=limit))
    return wall * d["pairs"] / min(limit, d["pairs"]), out


def project(model: str, d: dict, work: Path, a) -> tuple[dict, Path]:
    emb, qemb, out = (str(work / n) for n in ("images.parquet", "queries.parquet", "scored.jsonl"))
    npy, idx = str(work / "pixels.npy"), str(work / "pixels.parquet")
    kw = dict(model=model, root=d["root"], images=d["images"], qrels=d["qrels"], emb=emb, qemb=qemb, out=out,
              threads=a.threads, workers=a.workers, device=a.device, precision=a.precision, npy=npy, idx=idx,
              store={"pixels": npy, "pixel_index": idx} if a.store else {})
    parts = {}
    if a.store:  # a CPU job before the model jobs (reported apart: not a model job's time)
        parts["decode_images (CPU)"] = _proc(DECODE_IMAGES.format(**kw))
    parts |= {"embed_images": _proc(EMBED_IMAGES.format(**kw)),
              "embed_queries": _proc(EMBED_QUERIES.format(**kw)),
              "score": _proc(SCORE.format(**kw))}
    return parts, Path(out)


def max_diff(a: Path, b: Path) -> float:
    import polars as pl

    x = pl.read_ndjson(a).select("query_id", "image_id", "clip_score")
    y = pl.read_ndjson(b).select("query_id", "image_id", pl.col("clip_score").alias("s2"))
    j = x.join(y, on=["query_id", "image_id"])
    assert j.height == x.height == y.height, (j.height, x.height, y.height)
    return float((j["clip_score"] - j["s2"]).abs().max())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["ViT-B-32", "tiny"])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=1, help="embed_images DataLoader workers")
    ap.add_argument("--keep", help="work folder (default: a temporary one)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", help="fp32 (CPU default) or auto (fp16 autocast on CUDA)")
    ap.add_argument("--store", action="store_true", help="project side: decode_images, then embed_images "
                    "from the pixel store (the workflow's split)")
    ap.add_argument("--images", type=int, default=N_IMAGES)
    ap.add_argument("--queries", type=int, default=N_QUERIES)
    ap.add_argument("--per-query", type=int, default=PER_QUERY)
    ap.add_argument("--upstream-pairs", type=int, default=0, help="upstream on the first N pairs, extrapolated")
    a = ap.parse_args()
    work = Path(a.keep or tempfile.mkdtemp(prefix="clip-upstream-")).resolve()
    d = setup(work, a.images, a.queries, a.per_query)
    d["pairs"] = a.queries * a.per_query
    models = {m: (f"local-dir:{work / 'tiny-clip'}" if m == "tiny" else m) for m in a.models}
    print(f"{d['pairs']} pairs = {a.queries} queries x {a.per_query}, {a.images} distinct 640x480 JPEGs; "
          f"{os.cpu_count()} CPUs, {a.threads} torch threads, {a.workers} loader worker(s), {a.device} "
          f"{a.precision}{', pixel store' if a.store else ''}", flush=True)
    res: dict[str, dict[str, list]] = {m: {"upstream": [], "project": [], "diff": [], "upstream_cpu": [],
                                           "project_cpu": []} for m in models}
    for rep in range(a.repeat):
        for k, (name, model) in enumerate(models.items()):
            sides = ["upstream", "project"] if (rep + k) % 2 == 0 else ["project", "upstream"]
            outs = {}
            for side in sides:
                before = _load()
                n_cpu = len(CPU)
                if side == "upstream":
                    wall, outs[side] = upstream(model, d, work, a)
                    detail = ""
                else:
                    parts, outs[side] = project(model, d, work, a)
                    wall = sum(v for k, v in parts.items() if "(CPU)" not in k)  # the model jobs + score
                    detail = "  (" + ", ".join(f"{p} {s:.1f}" for p, s in parts.items()) + ")"
                cpu = sum(CPU[n_cpu:])
                res[name][side].append(wall)
                res[name][f"{side}_cpu"].append(cpu)
                print(f"run {rep + 1} {name:<9} {side:<8} {wall:7.1f} s wall {cpu:7.1f} s CPU  load {before} -> "
                      f"{_load()}{detail}", flush=True)
            if not a.upstream_pairs:
                res[name]["diff"].append(max_diff(outs["upstream"], outs["project"]))
    print()
    summary = {}
    for name, r in res.items():
        up, pr = statistics.median(r["upstream"]), statistics.median(r["project"])
        upc, prc = statistics.median(r["upstream_cpu"]), statistics.median(r["project_cpu"])
        summary[name] = {"upstream_s": round(up, 1), "project_s": round(pr, 1), "ratio": round(up / pr, 1),
                         "upstream_cpu_s": round(upc, 1), "project_cpu_s": round(prc, 1),
                         "cpu_ratio": round(upc / prc, 1), "max_score_diff": max(r["diff"], default=None)}
        diff = f"{max(r['diff']):.1e}" if r["diff"] else "n/a (upstream extrapolated)"
        print(f"{name:<9} wall: upstream {up:7.1f} s, project {pr:7.1f} s, ratio {up / pr:5.1f}x;  CPU: upstream "
              f"{upc:7.1f} s, project {prc:7.1f} s, ratio {upc / prc:5.1f}x;  max |score difference| "
              f"{diff}   (medians of {len(r['upstream'])})")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

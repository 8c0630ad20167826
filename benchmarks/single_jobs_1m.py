"""The single-job stages at scale: merge_annotations, plan, judge (rules), score, summary, export.

    PYTHONPATH=src python benchmarks/single_jobs_1m.py                       # 1,000,000 / 10,000 / 512-d
    PYTHONPATH=src python benchmarks/single_jobs_1m.py --images 100000 --queries 1000
    PYTHONPATH=src python benchmarks/single_jobs_1m.py --stages plan judge score  # a subset

Inputs: ``benchmarks/planner.py``'s synthetic collection (N images with five skewed taxonomy facets,
a boolean, 14-25 tags from 150, 1% exact and 1% near duplicates) as images.jsonl and
annotations.jsonl; the planner asks 40 candidates per query, so Q queries give ~40·Q pairs
(10,000 queries -> ~400,000 pairs). Image embeddings: N random unit vectors of ``--dim`` float32 in
``--shards`` parquet files, as embed_images writes them; query embeddings likewise. For export, a
small JPEG file (~1 KB, a few distinct ones) is written for every image the qrels use.

Every stage runs in its own child process exactly as its rule calls it (the stage's ``run``), and is
measured with ``benchmarks/measure.py``: wall time and peak memory of the child's process tree
(psutil USS sampled every 0.1 s, and the child's ``ru_maxrss``). Goal per stage: <= 4 GB, <= 5 min.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))

import planner  # noqa: E402
from measure import run_measured  # noqa: E402

CHILD = """
import json, logging, resource, sys, time
logging.basicConfig(level=logging.INFO, format="%(relativeCreated)8.0f ms %(name)s %(message)s")
sys.path.insert(0, {src!r})
import importlib
from benchmaker.runner import own_peak_kib  # VmHWM: ru_maxrss would carry the parent's peak
mod, fn = {target!r}.split(":")
t0 = time.perf_counter()
getattr(importlib.import_module(mod), fn)(**json.loads({kwargs!r}))
print(json.dumps({{"stage_s": time.perf_counter() - t0,
                  "maxrss_mb": own_peak_kib() / 1024}}))
"""


def child(target: str, kwargs: dict, env: dict) -> dict:
    code = CHILD.format(src=str(ROOT / "src"), target=target, kwargs=json.dumps(kwargs))
    m = run_measured([sys.executable, "-c", code], env=env)
    if m.returncode:
        sys.stderr.write(m.stderr[-5000:])
        raise SystemExit(f"{target} failed (exit {m.returncode})")
    inner = json.loads(m.stdout.strip().splitlines()[-1])
    return {"wall_s": round(m.wall_s, 1), "stage_s": round(inner["stage_s"], 1),
            "peak_mb": round(max(m.peak_mb, inner["maxrss_mb"])), "tree_uss_mb": round(m.peak_mb),
            "maxrss_mb": round(inner["maxrss_mb"])}


def write_embeddings(d: Path, n_images: int, ids: pl.Series, shas: pl.Series, dim: int, shards: int,
                     seed: int = 1) -> list[str]:
    from benchmaker.similarity.embed import write_embeddings as write

    rng = np.random.default_rng(seed)
    shard = np.arange(n_images) % shards
    paths = []
    for s in range(shards):
        idx = np.nonzero(shard == s)[0]
        m = rng.standard_normal((len(idx), dim), dtype=np.float32)
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        df = pl.DataFrame({"image_id": ids.gather(idx), "sha256": shas.gather(idx),
                           "model_id": pl.Series(["synthetic"] * len(idx), dtype=pl.String),
                           "embedding": pl.Series(m, dtype=pl.Array(pl.Float32, dim))})
        p = d / "embeddings" / "images" / f"{s:05d}.parquet"
        p.parent.mkdir(parents=True, exist_ok=True)
        write(df, p, kind="image", extra_meta={"model_id": "synthetic", "logit_scale": "100.0"})
        paths.append(str(p))
    return paths


def write_jpegs(root: Path, image_ids: list[str], images_jsonl: str) -> None:
    """A distinct small JPEG (32x24, ~800 bytes) per image; images.jsonl gets their sha256 and size
    (export checks every file against images.jsonl)."""
    import hashlib
    from io import BytesIO

    from PIL import Image

    made = set()
    shas, sizes = [], []
    for k, iid in enumerate(image_ids):
        im = Image.new("RGB", (32, 24), (k % 251, (k // 251) % 251, (k // 63001) % 251))
        im.putpixel((0, 0), (k & 255, (k >> 8) & 255, (k >> 16) & 255))
        buf = BytesIO()
        im.save(buf, "JPEG", quality=80)
        data = buf.getvalue()
        p = root / iid
        if p.parent not in made:
            p.parent.mkdir(parents=True, exist_ok=True)
            made.add(p.parent)
        p.write_bytes(data)
        shas.append(hashlib.sha256(data).hexdigest())
        sizes.append(len(data))
    upd = pl.DataFrame({"image_id": image_ids, "__sha": shas, "__size": sizes})
    imgs = pl.read_ndjson(images_jsonl, infer_schema_length=None).join(upd, on="image_id", how="left",
                                                                       maintain_order="left")
    imgs = imgs.with_columns(pl.coalesce("__sha", "sha256").alias("sha256"),
                             pl.coalesce("__size", "file_size").alias("file_size")).drop("__sha", "__size")
    imgs.write_ndjson(images_jsonl)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--stages", nargs="*", default=["merge", "plan", "judge", "score", "summary", "export"])
    ap.add_argument("--workdir", help="keep the files here (default: a temporary folder)")
    a = ap.parse_args(argv)
    from benchmaker.config import validate_config
    from benchmaker.providers.settings import judge_settings

    work = Path(a.workdir or tempfile.mkdtemp(prefix="single-jobs-"))
    work.mkdir(parents=True, exist_ok=True)
    images_dir = work / "images"
    cfg = validate_config({"benchmark": {"name": "synth", "title": "Synthetic scale test"},
                           "paths": {"image_root": str(images_dir)}, "facets": planner.FACETS,
                           "plan": {**planner.SETTINGS, "num_seeds": a.queries}})
    env = dict(os.environ, POLARS_MAX_THREADS=os.environ.get("POLARS_MAX_THREADS", "2"), HF_HUB_OFFLINE="1")
    f = {k: str(work / k) for k in ("annotations.jsonl", "images.jsonl", "query_plan.jsonl", "qrels.jsonl",
                                      "qrels_with_score.jsonl", "quarantine.jsonl")}
    print(f"N={a.images:,} images, Q={a.queries:,} queries, {a.dim}-d embeddings in {a.shards} shards, "
          f"work dir {work}", flush=True)
    t = time.perf_counter()
    if not Path(f["annotations.jsonl"]).exists():
        planner.generate(a.images, work)
        Path(f["quarantine.jsonl"]).write_text("")
    print(f"generate annotations/images: {time.perf_counter() - t:.1f} s", flush=True)
    results = {}
    common = {"facets": cfg["facets"], "columns": cfg["columns"]}
    for stage in a.stages:
        if stage == "merge":  # merge_annotations over --shards parts of the annotations
            parts_dir = work / "annotations"
            if not parts_dir.exists():
                parts_dir.mkdir()
                ann = pl.read_ndjson(f["annotations.jsonl"], infer_schema_length=None)
                shard = pl.int_range(0, ann.height, eager=True) % a.shards
                for s in range(a.shards):
                    ann.filter(shard == s).write_ndjson(parts_dir / f"{s:05d}.jsonl")
                    (parts_dir / f"{s:05d}.losses.jsonl").write_text("")
                del ann
            kw = {"parts": [str(parts_dir / f"{s:05d}.jsonl") for s in range(a.shards)],
                  "loss_parts": [str(parts_dir / f"{s:05d}.losses.jsonl") for s in range(a.shards)],
                  "annotations": str(work / "annotations.merged.jsonl"), "losses": str(work / "merge_losses.jsonl"),
                  **common}
            results[stage] = child("benchmaker.merge:merge_annotations", kw, env)
        elif stage == "plan":
            kw = {"annotations": f["annotations.jsonl"], "images": f["images.jsonl"], "plan": f["query_plan.jsonl"],
                  "losses": str(work / "losses_plan.jsonl"), "settings": cfg["plan"], "benchmark_name": "synth",
                  **common}
            results[stage] = child("benchmaker.plan:run", kw, env)
        elif stage == "judge":
            kw = {"plan": f["query_plan.jsonl"], "annotations": f["annotations.jsonl"], "images": f["images.jsonl"],
                  "qrels": f["qrels.jsonl"], "losses": str(work / "losses_judge.jsonl"),
                  "costs": str(work / "costs_judge.jsonl"), "adapter": "rules",
                  "settings": judge_settings(cfg["judge"]), "image_root": str(images_dir), **common}
            results[stage] = child("benchmaker.judge:run", kw, env)
        elif stage == "score":
            t = time.perf_counter()
            imgs = pl.read_ndjson(f["images.jsonl"]).select("image_id", "sha256")
            shards = write_embeddings(work, imgs.height, imgs["image_id"], imgs["sha256"], a.dim, a.shards)
            qids = pl.read_ndjson(f["qrels.jsonl"]).select("query_id", "query_text").unique("query_id").sort("query_id")
            from benchmaker.similarity.embed import write_embeddings as write
            rng = np.random.default_rng(2)
            qm = rng.standard_normal((qids.height, a.dim), dtype=np.float32)
            write(qids.with_columns(pl.lit("synthetic").alias("model_id"),
                                    pl.Series("embedding", qm, dtype=pl.Array(pl.Float32, a.dim)),
                                    pl.lit(False).alias("truncated")),
                  work / "embeddings" / "queries.parquet", kind="query",
                  extra_meta={"model_id": "synthetic", "logit_scale": "100.0"})
            print(f"generate embeddings: {time.perf_counter() - t:.1f} s", flush=True)
            kw = {"qrels": f["qrels.jsonl"], "query_embeddings": str(work / "embeddings" / "queries.parquet"),
                  "image_embeddings": shards, "embed_losses": [], "scored": f["qrels_with_score.jsonl"],
                  "losses": str(work / "losses_similarity.jsonl"), "columns": cfg["columns"]}
            results[stage] = child("benchmaker.similarity.score:run", kw, env)
        elif stage in ("summary", "export"):
            losses = [str(p) for p in sorted(work.glob("losses_*.jsonl"))]
            kw = {"images": f["images.jsonl"], "annotations": f["annotations.jsonl"],
                  "scored": f["qrels_with_score.jsonl"], "quarantine": f["quarantine.jsonl"],
                  "plan": f["query_plan.jsonl"], "losses": losses, "costs": [str(work / "costs_judge.jsonl")],
                  "image_root": str(images_dir), "benchmark_meta": cfg["benchmark"], **common}
            if stage == "summary":
                if not images_dir.exists():
                    t = time.perf_counter()
                    used = pl.read_ndjson(f["qrels_with_score.jsonl"])["image_id"].unique().sort().to_list()
                    write_jpegs(images_dir, used, f["images.jsonl"])
                    print(f"write {len(used):,} JPEG files: {time.perf_counter() - t:.1f} s", flush=True)
                kw.update(summary=str(work / "summary"), settings=cfg["summary"])
                results[stage] = child("benchmaker.summary.stage:run", kw, env)
            else:
                kw.update(dataset=str(work / "hf_dataset"), summary=str(work / "summary"),
                          settings=cfg["export"], similarity=cfg["similarity"], public_config={})
                results[stage] = child("benchmaker.export:run", kw, env)
        print(f"{stage:<8} wall {results[stage]['wall_s']:>7.1f} s  stage {results[stage]['stage_s']:>7.1f} s  "
              f"peak {results[stage]['peak_mb']:>6,} MB (tree USS {results[stage]['tree_uss_mb']:,}, "
              f"ru_maxrss {results[stage]['maxrss_mb']:,})", flush=True)
    pairs = pl.scan_ndjson(f["qrels.jsonl"]).select(pl.len()).collect().item() if Path(f["qrels.jsonl"]).exists() else 0
    print(json.dumps({"images": a.images, "queries": a.queries, "pairs": pairs, "dim": a.dim, "stages": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

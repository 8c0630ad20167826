"""Time the summary stage on a synthetic benchmark: N pairs of qrels_with_score (default 1,000,000).

    python benchmarks/summary.py [--pairs 1000000] [--pool 50] [--keep DIR]

Writes synthetic images.jsonl, annotations.jsonl, query_plan.jsonl, qrels_with_score.jsonl and
losses files (no image files: the contact sheet draws grey tiles), then runs
benchmaker.summary.stage.run once and prints wall time and peak RSS of the run (this process).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from benchmaker.formats import FacetModel, write_table  # noqa: E402
from benchmaker.losses import Losses  # noqa: E402

FACETS = {"taxonomy": {"subject": ["animal", "plant", "person", "vehicle", "unknown"],
                       "setting": ["indoor", "outdoor", "unknown"]},
          "boolean": ["text_visible"], "tags": {"min": 1, "max": 5, "vocabulary": []}}
POOLS = ["seed", "positive", "neutral", "hard", "nearmiss", "easy"]


def make(d: Path, pairs: int, pool: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    n_q = pairs // pool
    n_img = max(pairs // 3, pool * 2)
    ids = [f"cam{i % 100:03d}/img_{i:07d}.jpg" for i in range(n_img)]
    images = pl.DataFrame({
        "image_id": ids, "image_url": None, "mime_type": "image/jpeg", "width": 640, "height": 480,
        "file_size": 50_000, "sha256": [f"{i:064x}" for i in rng.permutation(n_img)], "phash": None,
        "license": "CC0-1.0", "doi": None, "original_dataset_name": "synthetic"},
        schema_overrides={"image_url": pl.String, "phash": pl.String, "doi": pl.String})
    write_table(images, "images", d / "images.jsonl")
    tags = ["bird", "tree", "car", "sky", "water", "road", "cat", "person"]
    fm = FacetModel.from_config(FACETS)
    ann = pl.DataFrame({
        "image_id": ids, "summary": "a synthetic photo",
        "tags": [[tags[j % 8], tags[(j * 7) % 8]] for j in range(n_img)],
        "annotator": "synthetic",
        "subject": rng.choice(FACETS["taxonomy"]["subject"], n_img),
        "setting": rng.choice(FACETS["taxonomy"]["setting"], n_img),
        "text_visible": rng.random(n_img) < 0.2,
    }).with_columns(pl.struct(pl.lit(0.9).alias("subject"), pl.lit(0.8).alias("setting"),
                              pl.lit(0.7).alias("text_visible")).alias("confidence"))
    write_table(ann, "annotations", d / "annotations.jsonl", facets=fm)
    qids = [f"bench_q{i:07d}" for i in range(n_q)]
    img_idx = rng.integers(0, n_img, size=(n_q, pool))
    pool_of = np.array(["seed"] + list(rng.choice(POOLS[1:], pool - 1)))
    rel = (rng.random((n_q, pool)) < np.where(pool_of == "seed", 0.95,
                                              np.where(pool_of == "positive", 0.7, 0.05))).astype(np.int64)
    score = rng.normal(0.2, 0.05, (n_q, pool)) + 0.08 * rel
    flat_ids = np.array(ids)[img_idx.ravel()]
    qrels = pl.DataFrame({
        "query_id": np.repeat(qids, pool), "query_text": np.repeat([f"query number {i}" for i in range(n_q)], pool),
        "image_id": flat_ids, "relevance_label": rel.ravel(), "pool": np.tile(pool_of, n_q),
        "is_seed": np.tile(pool_of == "seed", n_q), "judge": "synthetic", "clip_score": score.ravel(),
    }).unique(["query_id", "image_id"], keep="first", maintain_order=True).with_columns(
        (~(pl.col("relevance_label").filter(pl.col("is_seed")).first().over("query_id").cast(pl.Boolean)))
        .fill_null(False).alias("seed_not_relevant"),
        pl.col("clip_score").rank("ordinal", descending=True).over("query_id").cast(pl.Int64).alias("clip_rank"))
    write_table(qrels, "qrels_with_score", d / "qrels_with_score.jsonl")
    plan = qrels.group_by("query_id", maintain_order=True).agg(
        pl.col("image_id").filter(pl.col("is_seed")).alias("seed_image_ids"),
        pl.col("image_id").alias("candidate_image_ids"),
        pl.struct("image_id", "pool", pl.lit("synthetic").alias("reason")).alias("candidates"),
    ).with_columns(pl.lit("medium").alias("difficulty"),
                   pl.lit([], dtype=pl.List(pl.Struct({"pool": pl.String, "wanted": pl.Int64, "got": pl.Int64,
                                                       "reason": pl.String}))).alias("shortfall"))
    write_table(plan, "query_plan", d / "query_plan.jsonl")
    (d / "losses").mkdir(exist_ok=True)
    for stage in ("vision", "plan", "judge", "similarity"):
        lo = Losses(stage)
        for i in range(50):
            lo.add("image", f"lost_{i}", "synthetic_reason")
        lo.write(d / "losses" / f"{stage}.jsonl")
    write_table(pl.DataFrame({"path": ["bad.jpg"], "reason": ["truncated"], "detail": [None]},
                             schema_overrides={"detail": pl.String}), "quarantine", d / "quarantine.jsonl")
    return {"pairs": qrels.height, "queries": n_q, "images": n_img}


def run_summary(d: Path) -> None:
    from benchmaker.summary.stage import run

    t = time.perf_counter()
    n = run(images=str(d / "images.jsonl"), annotations=str(d / "annotations.jsonl"),
            scored=str(d / "qrels_with_score.jsonl"), plan=str(d / "query_plan.jsonl"),
            quarantine=str(d / "quarantine.jsonl"), losses=[str(p) for p in sorted((d / "losses").glob("*.jsonl"))],
            summary=str(d / "summary"), settings={"sample_grid": 24, "scale_factor": 2.0}, facets=FACETS,
            columns={}, image_root=str(d / "no_images"), benchmark_meta={"name": "bench"}, version="bench")
    wall = time.perf_counter() - t
    print(f"summary: {n['pairs']:,} pairs, {n['queries']:,} queries: wall {wall:.1f} s; "
          f"nDCG@10 of the clip_score ranking {n['clip_ranking']['ndcg@10']:.4f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--pool", type=int, default=50)
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--run-only", type=Path, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.run_only:
        return run_summary(a.run_only)
    d = a.keep or Path(tempfile.mkdtemp(prefix="bench_summary_"))
    d.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    sizes = make(d, a.pairs, a.pool)
    size_mb = (d / "qrels_with_score.jsonl").stat().st_size / 1e6
    print(f"synthetic inputs: {sizes}, qrels_with_score.jsonl {size_mb:.0f} MB, in {time.perf_counter() - t:.1f} s")
    # the summary runs in a child process so that its peak RSS is its own
    t = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--run-only", str(d)], check=True)
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"summary process: wall {wall:.1f} s (incl. interpreter start and imports), peak RSS {peak:.0f} MB")


if __name__ == "__main__":
    main()

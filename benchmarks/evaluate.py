"""Time the evaluate target on synthetic data (embeddings given; no model, no images).

    python benchmarks/evaluate.py corpus [--queries 1000] [--images 100000] [--dim 512] [--depth 100]
    python benchmarks/evaluate.py pool [--queries 10000] [--systems 10] [--pool 50]

corpus: one embedding system ranks the whole corpus (exact cosine, top ``depth`` kept plus every
pool image), its TREC run is written, and the evaluate aggregate scores it at pool, corpus and
condensed scope (ranx metrics, judged@k, diversity@k, drill-downs) and its sage view (imsearch_eval's
per-query statistics, limit 25). Goal: <= 60 s, <= 4 GB.
pool: ``systems`` pool-level runs over ``queries`` queries scored by the aggregate (ranx metrics,
diversity, drill-downs, paired tests with Holm correction across all 45 pairs); then the sage view of
each of those runs (``sage.sage_view``, limit 25, diversity from the embeddings), timed apart.

Data are generated first; each measured part runs in a child process that prints its own wall time
and peak RSS. ranx's numba compilation is paid once into NUMBA_CACHE_DIR (a first child); importing
ranx and loading its compiled functions is paid once per process and printed apart.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from benchmaker.formats import write_table  # noqa: E402 - after the sys.path insert

POOLS = ["seed", "positive", "neutral", "hard", "nearmiss", "easy"]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make(d: Path, n_q: int, n_img: int, dim: int, pool: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    ids = [f"cam{i % 100:03d}/img {i:07d}.jpg" for i in range(n_img)]  # a space in every id
    write_table(pl.DataFrame({
        "image_id": ids, "image_url": None, "mime_type": "image/jpeg", "width": 640, "height": 480,
        "file_size": 1000, "sha256": [f"{i:064x}" for i in range(n_img)], "phash": None, "license": None,
        "doi": None, "original_dataset_name": "synthetic"}), "images", d / "images.jsonl")
    write_table(pl.DataFrame({"image_id": ids, "summary": "a picture", "tags": [["a"]] * n_img,
                              "confidence": [{"subject": 0.9}] * n_img, "annotator": "synthetic"}),
                "annotations", d / "annotations.jsonl")
    emb = rng.standard_normal((n_img, dim), dtype=np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    np.save(d / "images.npy", emb)
    from benchmaker.similarity.embed import write_embeddings

    write_embeddings(pl.DataFrame({"image_id": ids, "sha256": [f"{i:064x}" for i in range(n_img)],
                                   "embedding": pl.Series(emb, dtype=pl.Array(pl.Float32, dim))}),
                     d / "embeddings.parquet", kind="image")
    # queries: a pool of `pool` random images each; 5 relevant, their embeddings pulled toward the query
    pools = np.stack([rng.choice(n_img, size=pool, replace=False) for _ in range(n_q)])
    rel = np.zeros((n_q, pool), dtype=np.int64)
    rel[:, :5] = 1
    qemb = emb[pools[:, :5]].mean(axis=1) + (0.5 / np.sqrt(dim)) * rng.standard_normal((n_q, dim), dtype=np.float32)
    qemb /= np.linalg.norm(qemb, axis=1, keepdims=True)
    np.save(d / "queries.npy", qemb.astype(np.float32))
    np.save(d / "pools.npy", pools)
    qids = [f"q{i:06d}" for i in range(n_q)]
    pool_names = np.array(POOLS)[np.minimum(np.arange(pool), len(POOLS) - 1)]
    write_table(pl.DataFrame({
        "query_id": np.repeat(qids, pool), "query_text": np.repeat([f"query {i}" for i in range(n_q)], pool),
        "image_id": np.asarray(ids, dtype=object)[pools.ravel()].tolist(), "relevance_label": rel.ravel(),
        "pool": np.tile(pool_names, n_q), "is_seed": np.tile(np.arange(pool) == 0, n_q),
        "seed_not_relevant": False, "judge": "synthetic"}), "qrels", d / "qrels.jsonl")


def _aggregate(d: Path, names: list[str], out: Path) -> dict:
    from benchmaker.evaluate import stage

    return stage.run(qrels=str(d / "qrels.jsonl"), images=str(d / "images.jsonl"),
                       annotations=str(d / "annotations.jsonl"), runs=[str(d / f"{n}.trec") for n in names],
                       metas=[str(d / f"{n}.json") for n in names], image_embeddings=[str(d / "embeddings.parquet")],
                       leaderboard_csv=str(out / "leaderboard.csv"), leaderboard_json=str(out / "leaderboard.json"),
                       drilldown=str(out / "drilldown.csv"), significance_csv=str(out / "significance.csv"),
                       per_query=str(out / "per_query.csv"), settings={"k": [10]},
                       sage_leaderboard=str(out / "sage_leaderboard.csv"))


def _meta(d: Path, name: str, scopes: list[str], depth: int, collection_depth: int | None = None) -> None:
    (d / f"{name}.json").write_text(json.dumps({"name": name, "kind": "trec_run", "scopes": scopes, "depth": depth,
                                                "collection_depth": collection_depth, "sees_judge_text": False,
                                                "timing": {}}))


def child_corpus(d: Path, depth: int) -> None:
    from benchmaker.evaluate.runs import rank_dense, write_run

    t0 = time.perf_counter()
    docs = np.load(d / "images.npy")
    q = np.load(d / "queries.npy")
    pools = list(np.load(d / "pools.npy"))
    ids = pl.read_ndjson(d / "images.jsonl")["image_id"].to_list()
    qids = [f"q{i:06d}" for i in range(len(q))]
    t1 = time.perf_counter()
    run = rank_dense(q, docs, qids, ids, pools, depth, collection=np.unique(np.concatenate(pools)))  # as clip
    t2 = time.perf_counter()
    n = write_run(run, d / "sys.trec", "sys")
    t3 = time.perf_counter()
    del docs
    _meta(d, "sys", ["pool", "corpus"], depth, collection_depth=depth)
    doc = _aggregate(d, ["sys"], d / "out")
    t4 = time.perf_counter()
    row = doc["systems"][0]["results"]["corpus"]
    print(f"corpus: {len(qids)} queries x {len(ids)} images, depth {depth}: load {t1 - t0:.1f} s, rank "
          f"{t2 - t1:.1f} s, write run ({n} lines) {t3 - t2:.1f} s, evaluate (3 scopes + drill-downs) "
          f"{t4 - t3:.1f} s (of which the sage view {doc['sage']['seconds']:.1f} s); total {t4 - t0:.1f} s, peak RSS "
          f"{_rss_mb():.0f} MB; corpus ndcg@10 {row['ndcg@10']:.4f}, judged@10 {row['judged@10']:.3f}; sage "
          f"(limit 25) complete for {doc['sage']['systems'][0]['complete_queries']} of "
          f"{doc['sage']['systems'][0]['queries']} queries")


def child_pool(d: Path, n_sys: int) -> None:
    t0 = time.perf_counter()
    qrels = pl.read_ndjson(d / "qrels.jsonl").select("query_id", "image_id")
    rng = np.random.default_rng(1)
    names = [f"sys{i:02d}" for i in range(n_sys)]
    from benchmaker.evaluate.runs import write_run

    for i, name in enumerate(names):
        run = qrels.with_columns(pl.Series("score", rng.random(qrels.height) + 0.05 * i))
        write_run(run, d / f"{name}.trec", name)
        _meta(d, name, ["pool"], 100)
    t1 = time.perf_counter()
    doc = _aggregate(d, names, d / "out")
    t2 = time.perf_counter()
    print(f"pool: {n_sys} systems x {doc['queries_evaluated']} queries ({qrels.height} pairs each): write runs "
          f"{t1 - t0:.1f} s, evaluate (metrics, diversity, drill-downs, {n_sys * (n_sys - 1) // 2} paired tests x 3 "
          f"metrics) {t2 - t1:.1f} s; peak RSS {_rss_mb():.0f} MB")
    # the sage view of every run (in the workflow: corpus-ranked runs only, inside the same aggregate)
    from benchmaker.evaluate.runs import read_run
    from benchmaker.evaluate.sage import sage_view
    from benchmaker.evaluate.stage import _load_embeddings
    from benchmaker.formats import read_table

    flat = read_table("qrels", d / "qrels.jsonl")
    emb_index, emb = _load_embeddings([str(d / "embeddings.parquet")], None)
    t3 = time.perf_counter()
    rows = 0
    for name in names:
        rows += sage_view(read_run(d / f"{name}.trec"), flat, limit=25, emb_index=emb_index, emb=emb).height
    t4 = time.perf_counter()
    print(f"sage view: {n_sys} systems x {rows // n_sys} queries (limit 25, diversity included, reading each run "
          f"file included) {t4 - t3:.1f} s ({1000 * (t4 - t3) / n_sys:.0f} ms per system); peak RSS {_rss_mb():.0f} MB")


def warm(d: Path) -> None:
    """Compile ranx's numba functions into NUMBA_CACHE_DIR (once per cache folder)."""
    t0 = time.perf_counter()
    from ranx import Qrels, Run, compare, evaluate

    q = Qrels({"q": {"a": 1}, "r": {"b": 1}})
    runs = [Run({"q": {"a": 1.0, "b": 0.5}, "r": {"b": 0.2}}, name=f"r{i}") for i in range(2)]
    evaluate(q, runs[0], ["ndcg@10", "precision@10", "recall@10", "hit_rate@10", "map", "mrr"], make_comparable=True)
    compare(q, runs, ["ndcg@10", "map", "mrr"], make_comparable=True)
    print(f"ranx import + numba compile/cache load (once per process): {time.perf_counter() - t0:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["corpus", "pool", "_child"])
    ap.add_argument("--queries", type=int)
    ap.add_argument("--images", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--systems", type=int, default=10)
    ap.add_argument("--pool", type=int, default=50)
    ap.add_argument("--dir")
    ap.add_argument("--mode")
    a = ap.parse_args()
    if a.what == "_child":
        d = Path(a.dir)
        warm(d)  # per process: import ranx + load (or compile) its numba functions, timed apart
        if a.mode == "corpus":
            child_corpus(d, a.depth)
        elif a.mode == "pool":
            child_pool(d, a.systems)
        return
    n_q = a.queries or (1000 if a.what == "corpus" else 10_000)
    os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".cache" / "numba"))
    with tempfile.TemporaryDirectory(prefix="bm-evaluate-") as tmp:
        d = Path(tmp)
        t0 = time.perf_counter()
        make(d, n_q, a.images, a.dim, a.pool)
        print(f"data: {n_q} queries, {a.images} images x {a.dim} dims, pools of {a.pool} "
              f"({time.perf_counter() - t0:.1f} s to generate)")
        for mode in ("warm", a.what):
            t = time.perf_counter()
            subprocess.run([sys.executable, __file__, "_child", "--dir", str(d), "--mode", mode,
                            "--depth", str(a.depth), "--systems", str(a.systems)], check=True)
            if mode != "warm":
                print(f"child process wall time {time.perf_counter() - t:.1f} s (including interpreter start and "
                      "imports)")


if __name__ == "__main__":
    main()

"""CPU benchmark: benchmaker's CLIP scoring vs upstream's one-pair-per-forward loop, same pairs.

    HF_HUB_OFFLINE=1 python benchmarks/clip_cpu.py [--model ViT-S-32-alt] [--images 96] [--queries 12]
                                                  [--per-query 16] [--threads 2] [--workers 1]

Writes ``--images`` JPEG files (640x480, photo-like noise + shapes) to a temporary folder and builds
``queries x per-query`` (query, image) pairs where every image appears in about
``queries*per_query/images`` queries (as in real qrels). Then times, after loading the model once:

* **naive** (upstream ``imsearch_benchmaker`` local CLIP): for every pair, open the image, preprocess,
  ``encode_image`` on a batch of one, tokenize + ``encode_text`` the query, cosine;
* **benchmaker**: ``embed_image_table`` (DataLoader workers, JPEG draft decoding, batches, each image
  once) + ``encode_texts`` (each query once) + ``score_pairs`` (numpy).

Prints both wall times, pairs/s and images/s, the speedup, and the largest score difference between
the two (they must agree). Random weights (pretrained None) unless --pretrained is given: speed does
not depend on the weights.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def make_images(folder: Path, n: int, size=(640, 480), seed: int = 0) -> list[Path]:
    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    rnd = random.Random(seed)
    paths = []
    for i in range(n):
        base = rng.integers(0, 255, size=(size[1] // 8, size[0] // 8, 3), dtype=np.uint8)
        img = Image.fromarray(base).resize(size, Image.BILINEAR)  # smooth "photo-like" texture
        d = ImageDraw.Draw(img)
        for _ in range(6):
            x, y = rnd.randrange(size[0]), rnd.randrange(size[1])
            r = rnd.randint(20, 120)
            d.ellipse([x - r, y - r, x + r, y + r], fill=tuple(rnd.randrange(256) for _ in range(3)))
        p = folder / f"img_{i:05d}.jpg"
        img.save(p, quality=90)
        paths.append(p)
    return paths


WORDS = ("red", "blue", "smoke", "forest", "mountain", "camera", "night", "day", "fire", "cloud", "road", "sky")


def make_pairs(n_images: int, n_queries: int, per_query: int, seed: int = 0):
    rnd = random.Random(seed)
    queries = {f"q{i:03d}": "a photo of " + " ".join(rnd.sample(WORDS, 4)) for i in range(n_queries)}
    order = list(range(n_images))
    pairs = []
    k = 0
    for qid in queries:
        for _ in range(per_query):
            pairs.append((qid, order[k % n_images]))
            k += 1
    return queries, pairs


def naive(clip, paths, queries, pairs):
    """Upstream's way: one (query, image) pair per forward pass, nothing reused."""
    import torch
    from PIL import Image

    scores = []
    with torch.inference_mode():
        for qid, ii in pairs:
            img = Image.open(paths[ii]).convert("RGB")
            x = clip.preprocess(img).unsqueeze(0)
            fi = clip.model.encode_image(x)
            ft = clip.model.encode_text(clip.tokenizer([queries[qid]]))
            fi = fi / fi.norm(dim=-1, keepdim=True)
            ft = ft / ft.norm(dim=-1, keepdim=True)
            scores.append(float((fi * ft).sum()))
    return scores


def ours(clip, paths, queries, pairs, batch_size, workers):
    import polars as pl

    from benchmaker.similarity.embed import embed_image_table
    from benchmaker.similarity.score import score_pairs

    images = pl.DataFrame({"image_id": [p.name for p in paths], "sha256": [f"{i:064x}" for i in range(len(paths))]})
    emb = embed_image_table(images, clip, image_root=paths[0].parent, cache=None, losses=None,
                            batch_size=batch_size, num_workers=workers, desc="bench")
    qids = list(queries)
    qemb, _ = clip.encode_texts([queries[q] for q in qids])
    qdf = pl.DataFrame({"query_id": qids, "embedding": pl.Series(qemb, dtype=pl.Array(pl.Float32, clip.embed_dim))})
    qrels = pl.DataFrame({"query_id": [q for q, _ in pairs], "image_id": [paths[i].name for _, i in pairs]})
    return score_pairs(qrels, qdf, emb)["clip_score"].to_list()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="ViT-S-32-alt")
    ap.add_argument("--pretrained", default=None)
    ap.add_argument("--images", type=int, default=96)
    ap.add_argument("--queries", type=int, default=12)
    ap.add_argument("--per-query", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()

    import logging

    logging.basicConfig(level=logging.WARNING)
    import torch

    from benchmaker.similarity.model import load_clip

    torch.set_num_threads(args.threads)
    clip = load_clip(args.model, args.pretrained, device="cpu", precision="fp32")
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_images(Path(tmp), args.images)
        queries, pairs = make_pairs(args.images, args.queries, args.per_query)
        naive(clip, paths, queries, pairs[:2])  # warm-up
        t = time.perf_counter()
        s_naive = naive(clip, paths, queries, pairs)
        t_naive = time.perf_counter() - t
        ours(clip, paths[:4], queries, [p for p in pairs if p[1] < 4], args.batch_size, 0)  # warm-up
        t = time.perf_counter()
        s_ours = ours(clip, paths, queries, pairs, args.batch_size, args.workers)
        t_ours = time.perf_counter() - t
    diff = max(abs(a - b) for a, b in zip(s_naive, s_ours))
    n = len(pairs)
    print(f"machine: {os.cpu_count()} CPUs, torch {torch.__version__}, {args.threads} torch threads, "
          f"{args.workers} loader workers")
    print(f"model: {clip.model_id} (dim {clip.embed_dim})")
    print(f"pairs: {n} = {args.queries} queries x {args.per_query}; {args.images} distinct 640x480 JPEGs "
          f"(each in ~{n / args.images:.1f} queries)")
    print(f"naive (1 pair per forward):  {t_naive:8.2f} s  {n / t_naive:8.1f} pairs/s  {n / t_naive:8.1f} images/s")
    print(f"benchmaker (batched, cached): {t_ours:8.2f} s  {n / t_ours:8.1f} pairs/s  "
          f"{args.images / t_ours:8.1f} distinct images/s")
    print(f"speedup: {t_naive / t_ours:.1f}x   max |score difference|: {diff:.2e}")


if __name__ == "__main__":
    main()

"""Judge audit: time to draw the sample from a large benchmark, to compute the report, and the size of
the labelling page with real photos.

    python benchmarks/audit.py [--queries 20000] [--per-query 50] [--sample 200] [--people 3]
                               [--bootstrap 1000] [--images example/images]

* **sample**: ``draw_sample`` over ``queries x per-query`` judged pairs (strata pool x judge_label);
* **report**: ``compute`` for the sample with ``--people`` raters, bootstrap intervals for every pair of
  raters and every group (pool, difficulty, 3 facets), Krippendorff's alpha and Fleiss' kappa;
* **page**: ``render_page`` with the photos of ``--images`` cycled over the sample (512 px thumbnails):
  bytes in total and per pair.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from benchmaker.audit.files import Scale  # noqa: E402
from benchmaker.audit.labelling import render_page  # noqa: E402
from benchmaker.audit.labels import LABELS_SCHEMA  # noqa: E402
from benchmaker.audit.sample import draw_sample  # noqa: E402
from benchmaker.audit.statistics import compute  # noqa: E402
from benchmaker.formats import FacetModel  # noqa: E402

POOLS = ("seed", "positive", "neutral", "hard", "nearmiss", "easy")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=20000)
    ap.add_argument("--per-query", type=int, default=50)
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--people", type=int, default=3)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--images", default=str(ROOT / "example" / "images"))
    a = ap.parse_args()
    rnd = random.Random(0)
    n_img = 5000
    fm = FacetModel(taxonomy={"color": ["red", "green", "blue"], "shape": ["a", "b", "c", "d"]}, boolean=["flag"])
    ann = pl.DataFrame({"image_id": [f"img/{k:06d}.jpg" for k in range(n_img)],
                        "color": [["red", "green", "blue"][k % 3] for k in range(n_img)],
                        "shape": [["a", "b", "c", "d"][k % 4] for k in range(n_img)],
                        "flag": [k % 5 == 0 for k in range(n_img)]})
    qids, texts, iids, pools, labels = [], [], [], [], []
    for q in range(a.queries):
        for c in range(a.per_query):
            pool = POOLS[0] if c == 0 else POOLS[1 + (c % 5)]
            qids.append(f"b_q{q:06d}")
            texts.append(f"query {q}")
            iids.append(f"img/{rnd.randrange(n_img):06d}.jpg")
            pools.append(pool)
            labels.append(int(rnd.random() < (0.9 if pool in ("seed", "positive") else 0.15)))
    qrels = pl.DataFrame({"query_id": qids, "query_text": texts, "image_id": iids, "pool": pools,
                          "is_seed": [p == "seed" for p in pools], "relevance_label": labels,
                          "judge": ["rules"] * len(qids)}).unique(["query_id", "image_id"], keep="first")
    plan = pl.DataFrame({"query_id": [f"b_q{q:06d}" for q in range(a.queries)],
                         "difficulty": [{p: rnd.randrange(10) for p in POOLS} for _ in range(a.queries)]})
    t0 = time.perf_counter()
    sample = draw_sample(qrels, plan, ann, fm, sample_size=a.sample, seed=1, strata=["pool", "judge_label"],
                         min_per_stratum=5)
    t_sample = time.perf_counter() - t0
    print(f"sample: {sample.height} of {qrels.height:,} pairs ({a.queries:,} queries) in {t_sample:.2f} s")

    rng = np.random.default_rng(0)
    rows = []
    for p in range(a.people):
        for iid, j in sample.select("item_id", "judge_label").iter_rows():
            rows.append({"rater": f"p{p}", "item_id": iid, "label": j if rng.random() < 0.8 else 1 - j,
                         "source": "x"})
    humans = pl.DataFrame(rows, schema=LABELS_SCHEMA)
    meta = {"sample_id": "bench", "population_pairs": qrels.height}
    t0 = time.perf_counter()
    info = compute(sample, meta, humans, Scale("binary"), settings={"bootstrap": a.bootstrap, "seed": 1},
                   facets=["color", "shape", "flag"])
    t_report = time.perf_counter() - t0
    print(f"report: {len(info['comparisons'])} comparisons, {info['tables']['agreement_by_group'].height} group rows, "
          f"{a.bootstrap} bootstrap replicates in {t_report:.2f} s")

    photos = sorted(p for p in Path(a.images).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    if not photos:
        print(f"page: no photos under {a.images}")
        return
    root = Path(a.images)
    ids = [str(photos[k % len(photos)].relative_to(root)) for k in range(sample.height)]
    page_sample = sample.with_columns(pl.Series("image_id", ids))
    t0 = time.perf_counter()
    page = render_page(page_sample, {"sample_id": "bench"}, Scale("binary"), image_root=str(root), max_side=512,
                       show_judge_label=False, title="bench")
    t_page = time.perf_counter() - t0
    size = len(page.encode())
    print(f"page: {size / 1e6:.1f} MB for {sample.height} pairs ({size / sample.height / 1e3:.0f} kB per pair, "
          f"{len(photos)} distinct photos, 512 px) in {t_page:.2f} s")


if __name__ == "__main__":
    main()

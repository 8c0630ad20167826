"""A small synthetic judged benchmark for the audit tests: plan, annotations, images, qrels on disk."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl

from benchmaker.formats import write_table

FACETS = {"taxonomy": {"color": ["red", "green", "blue"], "shape": ["circle", "square"]},
          "boolean": ["is_bright"], "tags": {"min": 0, "max": 4, "vocabulary": []}}
POOL_ORDER = ("seed", "positive", "neutral", "hard", "nearmiss", "easy")


def make_bench(root: Path, *, n_queries: int = 12, seed: int = 0, images: bool = True, graded: bool = False,
               name: str = "syn") -> dict[str, Path]:
    """Queries with a seed, 2 positives, 1 neutral, 2 hard, 1 near-miss, 2 easy candidates each."""
    rnd = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    img_root = root / "images"
    n_images = 40
    ids = [f"{['red', 'green', 'blue'][k % 3]}/img {k:03d}.png" for k in range(n_images)]
    if images:
        from PIL import Image

        for k, iid in enumerate(ids):
            p = img_root / iid
            p.parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (40 + k, 30), ((k * 37) % 256, (k * 91) % 256, (k * 53) % 256)).save(p)
    ann = pl.DataFrame({
        "image_id": ids, "summary": [f"image {k}" for k in range(n_images)], "tags": [[] for _ in ids],
        "confidence": [{"color": 1.0, "shape": 1.0, "is_bright": 1.0} for _ in ids],
        "annotator": ["test"] * n_images,
        "color": [["red", "green", "blue"][k % 3] for k in range(n_images)],
        "shape": [["circle", "square"][(k // 3) % 2] for k in range(n_images)],
        "is_bright": [k % 4 == 0 for k in range(n_images)],
    })
    images_df = pl.DataFrame({
        "image_id": ids, "image_url": [None] * n_images, "mime_type": ["image/png"] * n_images,
        "width": [40 + k for k in range(n_images)], "height": [30] * n_images, "file_size": [100] * n_images,
        "sha256": [f"{k:064x}" for k in range(n_images)], "phash": [None] * n_images, "license": [None] * n_images,
        "doi": [None] * n_images, "original_dataset_name": ["syn"] * n_images,
    }, schema_overrides={"image_url": pl.String, "phash": pl.String, "license": pl.String, "doi": pl.String})
    plan_rows, qrel_rows = [], []
    sizes = {"seed": 1, "positive": 2, "neutral": 1, "hard": 2, "nearmiss": 1, "easy": 2}
    for q in range(n_queries):
        qid = f"{name}_q{q + 1:04d}"
        chosen = rnd.sample(ids, sum(sizes.values()))
        cands, k = [], 0
        for pool in POOL_ORDER:
            for _ in range(sizes[pool]):
                cands.append({"image_id": chosen[k], "pool": pool, "reason": "test"})
                k += 1
        plan_rows.append({
            "query_id": qid, "seed_image_ids": [cands[0]["image_id"]],
            "candidate_image_ids": [c["image_id"] for c in cands], "candidates": cands,
            "difficulty": {p: sizes[p] for p in POOL_ORDER} | ({"hard": 0, "nearmiss": 0} if q % 3 == 0 else {}),
            "shortfall": [],
        })
        text = f"query number {q + 1} about {cands[0]['image_id'].split('/')[0]}"
        for c in cands:
            p_rel = {"seed": 0.95, "positive": 0.8, "neutral": 0.4, "hard": 0.3, "nearmiss": 0.2,
                     "easy": 0.05}[c["pool"]]
            if graded:
                lab = min(3, int(rnd.random() < p_rel) * rnd.choice([1, 2, 3]))
            else:
                lab = int(rnd.random() < p_rel)
            qrel_rows.append({"query_id": qid, "query_text": text, "image_id": c["image_id"], "relevance_label": lab,
                              "pool": c["pool"], "is_seed": c["pool"] == "seed",
                              "seed_not_relevant": False, "judge": "rules", "rationale": None})
    plan = pl.DataFrame(plan_rows, schema_overrides={"shortfall": pl.List(pl.Struct(
        {"pool": pl.String, "wanted": pl.Int64, "got": pl.Int64, "reason": pl.String}))})
    qrels = pl.DataFrame(qrel_rows, schema_overrides={"rationale": pl.String})
    paths = {"plan": root / "query_plan.jsonl", "annotations": root / "annotations.jsonl",
             "images": root / "images.jsonl", "qrels": root / "qrels.jsonl", "image_root": img_root,
             "queries": root / "queries.jsonl"}
    write_table(plan, "query_plan", paths["plan"])
    from benchmaker.formats import FacetModel

    write_table(ann, "annotations", paths["annotations"], facets=FacetModel.from_config(FACETS))
    write_table(images_df, "images", paths["images"])
    write_table(qrels, "qrels", paths["qrels"])
    # the queries the judge labelled under (the queries stage's file; the second judge labels under them)
    write_table(qrels.group_by("query_id", maintain_order=True).agg(pl.col("query_text").first()).with_columns(
        pl.lit("A relevant image shows the query's subject.").alias("narrative"), pl.lit("rules").alias("writer")),
        "queries", paths["queries"])
    return paths


def draw(paths: dict[str, Path], out: Path, **settings) -> tuple[Path, Path]:
    from benchmaker.audit import sample as S

    s = {"sample_size": 40, "seed": 7, "strata": ["pool", "judge_label"], "min_per_stratum": 2,
         "allocation": "proportional"} | settings
    sample, meta = out / "sample.jsonl", out / "sample.json"
    S.run(qrels=str(paths["qrels"]), plan=str(paths["plan"]), annotations=str(paths["annotations"]),
          sample=str(sample), sample_meta=str(meta), settings=s, facets=FACETS, benchmark="syn")
    return sample, meta

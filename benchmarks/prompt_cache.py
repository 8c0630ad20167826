"""Prompt caching: input, cached and output tokens and USD per image (vision) and per query (judge),
for this project's request layout and for upstream's, on a FireBench-size facet model.

    python benchmarks/prompt_cache.py                    # 60 images, 40 queries x 13 candidates
    python benchmarks/prompt_cache.py --images 200 --queries 100

Both layouts are sent, through the real sync runner and the openai SDK, to the fake OpenAI server
(tests/fake_openai.py) in its token-counting mode: ~4 characters per text token, 85 tokens per
low-detail image, the structured-output schema as a prefix to the system message, then the
instructions, then the input; cached tokens are the longest prefix already seen under the same
model and ``prompt_cache_key``, from 1,024 tokens on, in steps of 128 (OpenAI's rule). Each layout
gets its own fresh server (no shared cache). Prices: gpt-5-mini list prices (sync).

Facet model: 5 taxonomy facets (7 values each), 150-tag vocabulary, 5-12 tags, 2 booleans.
Upstream's layout (../shared/reference/upstream-benchmaker.md §5): vision = user-supplied system and
user prompts (the FireBench examples), the same schema but for ``confidence`` (an object of numbers
keyed by facet, :func:`upstream_vision_schema`), one image; judge = short system prompt, user
prompt, then ``DATA (JSON)`` with the full annotation rows (image ids, license, doi, confidence) of
the seeds and candidates, and a schema of ``{query_text, judgments: [{image_id, relevance_label}]}``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import polars as pl  # noqa: E402

PRICE = (0.25, 0.025, 2.00)      # gpt-5-mini, USD per 1M tokens: input, cached input, output

FACETS = {
    "taxonomy": {
        "scene": ["forest", "grassland", "shrubland", "urban", "wildland_urban_interface", "agricultural", "unknown"],
        "fire_stage": ["pre_fire", "ignition", "active", "smoldering", "post_fire", "prescribed", "unknown"],
        "viewpoint": ["ground", "aerial", "satellite", "tower_camera", "drone", "handheld", "unknown"],
        "time_of_day": ["dawn", "day", "dusk", "night", "overcast", "smoky_haze", "unknown"],
        "smoke_level": ["none", "light", "moderate", "heavy", "plume", "pyrocumulus", "unknown"],
    },
    "boolean": ["people_present", "vehicles_present"],
}
WORDS = [
    "flame", "front", "ember", "spot", "crown", "torch", "canopy", "ridge", "slope", "valley", "road",
    "structure", "truck", "engine", "crew", "helicopter", "tanker", "retardant", "drop", "line", "dozer", "hose",
    "hydrant", "power", "pole", "fence", "barn", "house", "roof", "chimney", "ash", "char", "snag", "stump",
    "log", "debris", "meadow", "pasture", "vineyard", "orchard", "chaparral", "pine", "oak", "fir", "cedar",
    "juniper", "sage", "grass", "brush", "burn", "scar", "perimeter", "containment", "backfire", "firebreak",
    "lookout", "radio", "map",
]


def facet_model():
    from benchmaker.formats import FacetModel

    rnd = random.Random(1)
    vocab = sorted({" ".join(rnd.sample(WORDS, 2)) for _ in range(400)})[:150]
    return FacetModel.from_config({**FACETS, "tags": {"vocabulary": vocab, "min": 5, "max": 12}}), vocab


def make_images(root: Path, n: int) -> pl.DataFrame:
    from PIL import Image

    rows = []
    for i in range(n):
        p = root / f"img_{i:05d}.jpg"
        Image.new("RGB", (64, 48), ((37 * i) % 256, (91 * i) % 256, (53 * i) % 256)).save(p, quality=80)
        data = p.read_bytes()
        rows.append({"image_id": p.name, "image_url": None, "mime_type": "image/jpeg", "width": 64, "height": 48,
                     "file_size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "phash": None,
                     "license": "CC-BY-4.0", "doi": "10.5281/zenodo.0000000", "original_dataset_name": "firebench",
                     "caption": None})
    return pl.DataFrame(rows)


def annotation(i: int, fm, vocab, rnd) -> dict:
    row = {"image_id": f"Wildfire_{i:05d}_FIRE_{rnd.randint(1000, 9999)}.jpg",
           "summary": " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(14, 24))).capitalize() + ".",
           "tags": rnd.sample(vocab, rnd.randint(fm.min_tags, fm.max_tags))}
    for name, values in fm.taxonomy.items():
        row[name] = rnd.choice(values)
    for name in fm.boolean:
        row[name] = rnd.random() < 0.3
    row["confidence"] = {n: round(rnd.uniform(0.5, 1), 2) for n in fm.names}
    return row


# -- upstream's layouts ------------------------------------------------------------------------------
UP_VISION_SYSTEM = ("You are labeling wildfire imagery for a fire-science retrieval benchmark. Output MUST be valid "
                    "JSON matching the schema. Be conservative: if unsure, choose 'unknown'. Do not guess from "
                    "file names.")
UP_VISION_USER = ("Analyze the image and output JSON with: summary <= 30 words, factual, no speculation; the facet "
                  "fields; tags: choose 12-18 tags ONLY from the provided enum list; confidence: 0..1 per field.")
UP_JUDGE_SYSTEM = ("You are a fire scientist creating and judging an image-retrieval benchmark. Judge relevance "
                   "ONLY from the summaries + facet metadata provided. Do not use file names, licenses or DOIs. "
                   "Binary relevance only.")
UP_JUDGE_USER = ("1) Write a realistic fire-scientist query_text that the seed images satisfy. 2) Label each "
                 "candidate image as relevant (1) or not relevant (0) to that query.")


def upstream_judge_schema() -> dict:
    one = {"type": "object", "additionalProperties": False,
           "properties": {"image_id": {"type": "string"}, "relevance_label": {"type": "integer", "enum": [0, 1]}},
           "required": ["image_id", "relevance_label"]}
    return {"type": "object", "additionalProperties": False,
            "properties": {"query_text": {"type": "string"}, "judgments": {"type": "array", "items": one}},
            "required": ["query_text", "judgments"]}


def upstream_vision_schema(fm) -> dict:
    """Upstream's vision schema: this project's, but ``confidence`` an object of numbers 0..1 keyed by
    facet (which the model writes out: every facet name again, and ``0.`` before each number)."""
    from benchmaker.vision.prompts import vision_schema

    schema = vision_schema(fm)
    schema["properties"]["confidence"] = {
        "type": "object", "additionalProperties": False,
        "properties": {n: {"type": "number", "minimum": 0, "maximum": 1} for n in fm.names}, "required": fm.names}
    return schema


def upstream_answer(body: dict, schema: dict):
    """What a model answers to upstream's judge request: every candidate's image id and a label."""
    import fake_openai

    text = fake_openai.request_text(body)
    data = json.JSONDecoder().raw_decode(text[text.find("DATA (JSON):") + 12:].lstrip())[0]
    return {"query_text": "active crown fire on a forested ridge with heavy smoke",
            "judgments": [{"image_id": c["image_id"], "relevance_label": i % 2}
                          for i, c in enumerate(data["candidates"])]}


# -- the runs ------------------------------------------------------------------------------------------
def run_layout(layout: str, imgs: pl.DataFrame, corpus: Path, fm, vocab, n_queries: int, n_cands: int) -> dict:
    import fake_openai

    from benchmaker.judge.openai import judge_items
    from benchmaker.losses import Losses
    from benchmaker.providers.engine import Item
    from benchmaker.providers.openai.runner import OpenAIRunner as Runner
    from benchmaker.providers.spec import ImageRef, RequestSpec, Text
    from benchmaker.vision.openai import vision_items
    from benchmaker.vision.prompts import check_answer

    fake = fake_openai.start()
    fake.count_tokens = True
    os.environ["OPENAI_API_KEY"] = "sk-test"
    settings = {"model": "gpt-5-mini", "base_url": fake.base_url, "mode": "sync", "concurrency": 1,
                "image_max_side": 64, "image_detail": "low", "max_attempts": 1,
                "prompt_cache_key": layout == "benchmaker"}
    out = {}
    try:
        # vision
        if layout == "benchmaker":
            items = list(vision_items(imgs, fm, settings, str(corpus)))
        else:
            schema = upstream_vision_schema(fm)
            items = [Item(r["image_id"], RequestSpec(system=UP_VISION_SYSTEM, parts=(
                Text(UP_VISION_USER), ImageRef(sha256=r["sha256"], path=str(corpus / r["image_id"]), width=64,
                                               height=48)), schema=schema, schema_name="imsearch_vision"),
                         check_answer(fm)) for r in imgs.iter_rows(named=True)]
        out["vision"] = _send(Runner(stage="vision", item_type="image", settings=settings, cache_dir=None), items,
                              Losses("vision"))
        # judge: the same plan and annotations for both layouts
        rnd = random.Random(7)
        ann_rows = [annotation(i, fm, vocab, rnd) for i in range(n_queries * n_cands)]
        if layout == "benchmaker":
            ann = pl.DataFrame([{k: v for k, v in r.items()} | {"annotator": "x"} for r in ann_rows])
            plan = pl.DataFrame([{"query_id": f"q{q:04d}", "seed_image_ids": [ann_rows[q * n_cands]["image_id"]],
                                  "candidates": [{"image_id": ann_rows[q * n_cands + c]["image_id"], "pool": "x",
                                                  "reason": "x"} for c in range(n_cands)],
                                  # the query writer's text and narrative (the judge labels, never writes them)
                                  "query_text": f"a photo of subject {q}",
                                  "narrative": "A relevant image shows the subject as its main content."}
                                 for q in range(n_queries)])
            js = {**settings, "labels": "binary", "rationale": False}
            items = [it for it, _ in judge_items(plan, ann, pl.DataFrame({"image_id": [], "sha256": []}), fm, js,
                                                 str(corpus), Losses("judge"))]
        else:
            fake.answer = upstream_answer
            schema = upstream_judge_schema()
            items = []
            for q in range(n_queries):
                rows = [{**r, "license": "CC-BY-4.0", "doi": "10.5281/zenodo.0000000", "annotator": "openai:gpt-5-mini"}
                        for r in ann_rows[q * n_cands:(q + 1) * n_cands]]
                data = {"query_id": f"firebench_q{q:05d}", "seed_images": rows[:1], "candidates": rows}
                items.append(Item(f"q{q:04d}", RequestSpec(system=UP_JUDGE_SYSTEM, parts=(
                    Text(UP_JUDGE_USER), Text("DATA (JSON):\n" + json.dumps(data))), schema=schema,
                    schema_name="imsearch_query_and_judgments")))
        out["judge"] = _send(Runner(stage="judge", item_type="query", settings=settings, cache_dir=None), items,
                             Losses("judge"))
    finally:
        fake_openai.stop(fake)
    return out


def _send(runner, items, losses) -> dict:
    answers = runner.run_sync(items, losses)
    rows = runner.cost_rows
    n = len(items)
    tin = sum(r["input_tokens"] for r in rows)
    tc = sum(r["cached_input_tokens"] for r in rows)
    tout = sum(r["output_tokens"] for r in rows)
    usd = ((tin - tc) * PRICE[0] + tc * PRICE[1] + tout * PRICE[2]) / 1e6
    return {"items": n, "answered": len(answers), "input": tin / n, "cached": tc / n, "output": tout / n,
            "cached_pct": 100 * tc / max(tin, 1), "usd": usd / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=60)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--candidates", type=int, default=13)   # upstream's FireBench run: 13
    a = ap.parse_args()
    fm, vocab = facet_model()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp)
        imgs = make_images(corpus, a.images)
        res = {lay: run_layout(lay, imgs, corpus, fm, vocab, a.queries, a.candidates)
               for lay in ("upstream", "benchmaker")}
    print(f"facet model: {len(fm.taxonomy)} taxonomy facets, {len(fm.boolean)} booleans, {len(vocab)} tags; "
          f"{a.images} images, {a.queries} queries x {a.candidates} candidates; gpt-5-mini sync prices")
    print(f"{'layout':11} {'stage':7} {'per':6} {'input':>8} {'cached':>8} {'cached%':>8} {'output':>7} "
          f"{'USD':>10} {'answered':>9}")
    for lay, r in res.items():
        for st, per in (("vision", "image"), ("judge", "query")):
            x = r[st]
            print(f"{lay:11} {st:7} {per:6} {x['input']:>8.0f} {x['cached']:>8.0f} {x['cached_pct']:>7.1f}% "
                  f"{x['output']:>7.0f} {x['usd']:>10.6f} {x['answered']:>5}/{x['items']}")
    for st in ("vision", "judge"):
        print(f"{st}: benchmaker / upstream USD = {res['benchmaker'][st]['usd'] / res['upstream'][st]['usd']:.2f}x")
    tot = {lay: r["vision"]["usd"] * a.images + r["judge"]["usd"] * a.queries for lay, r in res.items()}
    print(f"total for this run: benchmaker / upstream = {tot['benchmaker'] / tot['upstream']:.2f}x "
          f"(USD {tot['benchmaker']:.4f} vs {tot['upstream']:.4f})")


if __name__ == "__main__":
    main()

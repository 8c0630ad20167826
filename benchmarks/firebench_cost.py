"""Cost per image of an upstream config imported as is: FireBench's published ``config.toml``
(waggle-sensor/imsearch_benchmarks, ``FireBenchMaker/config.toml``) through ``benchmaker
import-upstream``, run unchanged except paths, against the fake OpenAI server in its token-counting
mode (tests/fake_openai.py: ~4 characters per text token, 85 per low-detail image, the schema then
the instructions then the input; cached = the longest prefix seen before under the same
``prompt_cache_key``, from 1,024 tokens in steps of 128, OpenAI's rule), through the real sync runner
and the openai SDK.

    python benchmarks/firebench_cost.py /path/to/FireBenchMaker/config.toml
    python benchmarks/firebench_cost.py config.toml --images 120 --queries 20 --candidates 13

USD uses the config's own prices (0.125 / 0.0125 / 1.00 per 1M input / cached / output tokens), as
upstream's published figures do: vision $0.000313 per image, judge $0.000960 per query of 13
candidates, $0.000473 per image for both (one query per six images). Annotations of the judge's
candidates are rows of typical FireBench length (summary, the five facets, 14-25 tags).

Since #31 a query is written by its own request, from its seed alone (the seed's pixels at low
detail and its annotation row: the ``queries`` row, per query), and the judge labels against it;
the judge is measured in both labelling modes: text-only (``judge``) and with each candidate's image
at low detail (``judge+img``, ``send_thumbnails: true``). Upstream's one request did both jobs, so
its per-query figure compares with ``queries`` + ``judge``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import polars as pl  # noqa: E402
import yaml  # noqa: E402

UPSTREAM = {"vision": 0.000313, "judge": 0.000960, "per_image": 0.000473}
QUERIES_PER_IMAGE = (UPSTREAM["per_image"] - UPSTREAM["vision"]) / UPSTREAM["judge"]   # 1/6


def make_images(root: Path, n: int) -> pl.DataFrame:
    from PIL import Image

    rows = []
    for i in range(n):
        p = root / f"img_{i:05d}.jpg"
        Image.new("RGB", (64, 48), ((37 * i) % 256, (91 * i) % 256, (53 * i) % 256)).save(p, quality=80)
        data = p.read_bytes()
        rows.append({"image_id": p.name, "image_url": f"https://img.example/{p.name}", "mime_type": "image/jpeg",
                     "width": 64, "height": 48, "file_size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                     "phash": None, "license": "CC-BY-4.0", "doi": None, "original_dataset_name": "firebench",
                     "caption": None})
    return pl.DataFrame(rows)



def imported_config(tmp: Path, toml: Path, n_images: int) -> tuple[dict, Path, list]:
    """FireBench's ``toml`` imported with ``benchmaker import-upstream`` in ``tmp`` (unchanged but for
    its image folder: ``n_images`` generated ones): (the config mapping, the image folder, the images)."""
    from benchmaker.upstream import import_upstream

    corpus = tmp / "images"
    corpus.mkdir()
    imgs = make_images(corpus, n_images)
    out = tmp / "imported.yaml"
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        import_upstream(toml, out=out, results=str(tmp / "results"))
    finally:
        os.chdir(cwd)
    raw = yaml.safe_load(out.read_text())
    raw["paths"]["image_root"] = str(corpus)
    return raw, corpus, imgs

def annotation(i: int, fm, rnd: random.Random) -> dict:
    words = ["smoke", "plume", "ridge", "forest", "valley", "haze", "camera", "rising", "white", "gray",
             "distant", "mountain", "slope", "trees", "sky", "horizon", "column", "thin", "dense", "fire"]
    row = {"image_id": f"ann_{i:05d}.jpg", "annotator": "openai:gpt-5-mini",
           "summary": " ".join(rnd.choice(words) for _ in range(rnd.randint(14, 24))).capitalize() + ".",
           "tags": rnd.sample(list(fm.vocabulary), rnd.randint(fm.min_tags, min(fm.max_tags, 18)))}
    for name, values in fm.taxonomy.items():
        row[name] = rnd.choice(values)
    for name in fm.boolean:
        row[name] = rnd.random() < 0.3
    row["confidence"] = {n: round(rnd.uniform(0.5, 1), 2) for n in fm.names}
    return row


def plan_over(ann: pl.DataFrame, n_queries: int, n_cands: int) -> pl.DataFrame:
    """``n_queries`` queries of ``n_cands`` candidates over the annotated images, the first one the seed."""
    ids = ann["image_id"].to_list()
    return pl.DataFrame([{"query_id": f"q{q:04d}", "seed_image_ids": [ids[(q * n_cands) % len(ids)]],
                          "candidates": [{"image_id": ids[(q * n_cands + c) % len(ids)], "pool": "x", "reason": "x"}
                                         for c in range(n_cands)]} for q in range(n_queries)])


def stage(runner, items, prices) -> dict:
    from benchmaker.losses import Losses

    answers = runner.run_sync(items, Losses(runner.stage))
    rows = runner.cost_rows
    n = len(items)
    tin = sum(r["input_tokens"] for r in rows)
    tc = sum(r["cached_input_tokens"] for r in rows)
    tout = sum(r["output_tokens"] for r in rows)
    usd = ((tin - tc) * prices[0] + tc * prices[1] + tout * prices[2]) / 1e6
    return {"items": n, "answered": len(answers), "input": tin / n, "cached": tc / n, "output": tout / n,
            "cached_pct": 100 * tc / max(tin, 1), "usd": usd / n}


def run(toml: Path, n_images: int, n_queries: int, n_cands: int) -> dict:
    import fake_openai

    from benchmaker.config import load_config
    from benchmaker.formats import FacetModel
    from benchmaker.judge.openai import judge_items, merged_settings
    from benchmaker.losses import Losses
    from benchmaker.providers.runners import provider_runner
    from benchmaker.providers.settings import query_settings
    from benchmaker.queries.openai import query_items, writer_settings
    from benchmaker.vision.openai import vision_items

    fake = fake_openai.start()
    fake.count_tokens = True
    os.environ["OPENAI_API_KEY"] = "sk-test"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            # one generated image per candidate too (labelling with images): no pool shares an image
            raw, corpus, all_imgs = imported_config(tmp, toml, max(n_images, n_queries * n_cands))
            imgs = all_imgs.head(n_images)
            out = tmp / "imported.yaml"
            out.write_text(yaml.safe_dump(raw))
            cfg = load_config(str(out))
            fm = FacetModel.from_config(cfg["facets"])
            # as against api.openai.com (no base_url: prompt_cache_key on), here the fake; sync, one at a time
            net = {"base_url": fake.base_url, "mode": "sync", "concurrency": 1, "prompt_cache_key": True,
                   "max_attempts": 1}
            vs = {**cfg["vision"]["openai"], **net}
            prices = (vs["prices"]["input"], vs["prices"]["cached_input"], vs["prices"]["output"]) \
                if vs.get("prices") else (0.125, 0.0125, 1.00)
            vr = provider_runner("openai", stage="vision", item_type="image", settings=vs, cache_dir=None)
            res = {"vision": stage(vr, list(vision_items(imgs, fm, vs, str(corpus))), prices)}
            rnd = random.Random(7)
            ann = pl.DataFrame([annotation(i, fm, rnd) for i in range(n_queries * n_cands)])
            # the candidates' images: the generated ones, one per annotation row (labelling with images)
            ann = ann.with_columns(pl.Series("image_id", all_imgs["image_id"].head(ann.height).to_list()))
            imgs = all_imgs
            plan = plan_over(ann, n_queries, n_cands)
            ws = {**writer_settings(query_settings(cfg["queries"], cfg["judge"])), **net}
            wr = provider_runner("openai", stage="queries", item_type="query", settings=ws, cache_dir=None)
            witems = list(query_items(plan, ann, imgs, fm, wr.settings, str(corpus), Losses("queries")))
            written = wr.run_sync(witems, Losses("queries"))
            res["queries"] = stage(wr, witems, prices)
            plan = plan.with_columns(
                pl.col("query_id").replace_strict({q: a["query_text"] for q, a in written.items()}).alias("query_text"),
                pl.col("query_id").replace_strict({q: a["narrative"] for q, a in written.items()}).alias("narrative"))
            js = {**merged_settings({**cfg["judge"][cfg["judge"]["adapter"]], "labels": cfg["judge"]["labels"],
                                     "rationale": cfg["judge"]["rationale"]}), **net}
            for name, images in (("judge", False), ("judge+img", True)):
                fake.prefixes.clear()      # each mode from a cold prompt cache (they share their text prefix)
                s = {**js, "send_thumbnails": images}
                items = [it for it, _ in judge_items(plan, ann, imgs, fm, s, str(corpus), Losses("judge"))]
                jr = provider_runner("openai", stage="judge", item_type="query", settings=s, cache_dir=None)
                res[name] = stage(jr, items, prices)
            res["config"] = {"vision_system_own": bool((vs.get("prompts") or {}).get("system")),
                             "judge_system_own": bool((js.get("prompts") or {}).get("system")),
                             "vocabulary": len(fm.vocabulary), "facets": len(fm.names)}
    finally:
        fake_openai.stop(fake)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("toml", type=Path, help="FireBenchMaker/config.toml of waggle-sensor/imsearch_benchmarks")
    ap.add_argument("--images", type=int, default=60)
    ap.add_argument("--queries", type=int, default=10)
    ap.add_argument("--candidates", type=int, default=13)
    a = ap.parse_args()
    r = run(a.toml, a.images, a.queries, a.candidates)
    print(f"imported {a.toml.name}: {r['config']}; {a.images} images, {a.queries} queries x {a.candidates} "
          "candidates; the config's prices")
    print(f"{'stage':7} {'per':6} {'input':>8} {'cached':>8} {'cached%':>8} {'output':>7} {'USD':>10} "
          f"{'upstream':>10} {'ratio':>6}")
    for st, per in (("vision", "image"), ("queries", "query"), ("judge", "query"), ("judge+img", "query")):
        x = r[st]
        up = UPSTREAM.get(st)
        print(f"{st:9} {per:6} {x['input']:>8.0f} {x['cached']:>8.0f} {x['cached_pct']:>7.1f}% {x['output']:>7.0f} "
              f"{x['usd']:>10.6f}" + (f" {up:>10.6f} {x['usd'] / up:>5.2f}x" if up else ""))
    q = r["queries"]["usd"] + r["judge"]["usd"]
    print(f"queries + judge per query (upstream's one request): {q:.6f} vs {UPSTREAM['judge']:.6f} = "
          f"{q / UPSTREAM['judge']:.2f}x; with images: {r['queries']['usd'] + r['judge+img']['usd']:.6f}")
    per_image = r["vision"]["usd"] + q * QUERIES_PER_IMAGE
    print(f"per image (vision + judge share, {QUERIES_PER_IMAGE:.3f} queries per image): {per_image:.6f} vs "
          f"upstream {UPSTREAM['per_image']:.6f} = {per_image / UPSTREAM['per_image']:.2f}x")


if __name__ == "__main__":
    main()

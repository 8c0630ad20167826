"""Build and parse N vision requests through the real code paths; print time and peak memory.

    python benchmarks/requests_build.py                 # N = 25,000, 50,000, 100,000 (one process each)
    python benchmarks/requests_build.py --n 100000      # one size

build: ``providers.batch.build_requests`` over a synthetic images table (150-tag vocabulary, 4
taxonomy facets, url transport so that no image file is needed), streaming requests.jsonl and the
manifest to disk. parse: the per-line work of ``collect`` over N Batch API output lines (custom_id
decoding, response parsing, strict-schema validation, cost rows streamed to a file, annotation rows
spilled and read back in order with polars). Peak memory is the
process's max RSS, measured per phase in a fresh process.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def facets() -> dict:
    return {
        "taxonomy": {"subject": [f"subject_{i}" for i in range(12)], "setting": ["indoor", "outdoor", "unknown"],
                     "shot": ["close_up", "medium", "wide", "aerial", "unknown"],
                     "season": ["spring", "summer", "autumn", "winter", "unknown"]},
        "boolean": ["person_present", "animal_present", "text_visible"],
        "tags": {"min": 12, "max": 18, "vocabulary": [f"tag number {i}" for i in range(150)]},
    }


def images(n: int):
    import polars as pl

    ids = [f"collection/part{i % 97:02d}/image_{i:07d}.jpg" for i in range(n)]
    return pl.DataFrame({"image_id": ids, "image_url": [f"https://img.example/{i}" for i in ids],
                         "sha256": [f"{i:064x}" for i in range(n)], "width": [1024] * n, "height": [768] * n,
                         "site": [f"site {i % 13}" for i in range(n)]})


SETTINGS = {"model": "gpt-5-mini", "mode": "batch", "image_transport": "url", "image_detail": "low",
            "metadata_columns": ["site"], "max_attempts": 3}


def phase_build(n: int, tmp: Path) -> None:
    from benchmaker.formats import FacetModel
    from benchmaker.providers import batch as pb
    from benchmaker.providers.engine import Runner
    from benchmaker.vision.openai import vision_items

    fm = FacetModel.from_config(facets())
    runner = Runner(stage="vision", item_type="image", settings=SETTINGS, cache_dir=None)
    imgs = images(n)
    t = time.perf_counter()
    counts = pb.build_requests(runner, vision_items(imgs, fm, SETTINGS, "/nonexistent"),
                               requests=str(tmp / "requests.jsonl"), manifest=str(tmp / "manifest.jsonl"))
    dt = time.perf_counter() - t
    size = (tmp / "requests.jsonl").stat().st_size
    print(json.dumps({"phase": "build", "n": n, "seconds": round(dt, 2), "requests": counts["requests"],
                      "mb_written": round(size / 1e6, 1), "peak_rss_mb": _rss()}))


def phase_parse(n: int, tmp: Path) -> None:
    from benchmaker.formats import FacetModel
    from benchmaker.io import dumps, iter_jsonl
    from benchmaker.providers import batch as pb
    from benchmaker.providers.engine import Item, Runner
    from benchmaker.providers.spec import ImageRef, RequestSpec, Text
    from benchmaker.vision.openai import AnswerSpill
    from benchmaker.vision.prompts import check_answer, vision_schema

    fm = FacetModel.from_config(facets())
    schema = vision_schema(fm)
    out = tmp / "output.jsonl"
    tags = facets()["tags"]["vocabulary"]
    with open(out, "w") as fh:   # what a Batch API output file looks like
        for i in range(n):
            ans = {"summary": f"image {i} shows something", "subject": f"subject_{i % 12}", "setting": "outdoor",
                   "shot": "wide", "season": "winter", "person_present": False, "animal_present": True,
                   "text_visible": False, "tags": tags[i % 100: i % 100 + 14],
                   "confidence": {k: 0.8 for k in fm.names}}
            body = {"status": "completed", "output": [{"type": "message", "content": [
                {"type": "output_text", "text": json.dumps(ans)}]}],
                "usage": {"input_tokens": 1500, "output_tokens": 300, "input_tokens_details": {"cached_tokens": 1024},
                          "output_tokens_details": {"reasoning_tokens": 128}}}
            fh.write(dumps({"id": f"r{i}", "custom_id": f"vision-{i}-a1",
                            "response": {"status_code": 200, "body": body}, "error": None}) + "\n")
    runner = Runner(stage="vision", item_type="image", settings=SETTINGS, cache_dir=None)
    check = check_answer(fm)
    t = time.perf_counter()
    # exactly what vision collect does per output line: costs streamed to a file, answers spilled
    spill = AnswerSpill(tmp / "answers.part.jsonl", fm, "openai:gpt-5-mini", [f"img{i}" for i in range(n)])
    with open(tmp / "costs.jsonl", "w") as cost_fh:
        runner.cost_sink = lambda row: cost_fh.write(dumps(row) + "\n")
        for row in iter_jsonl(out):
            idx, att = pb.parse_custom_id(row["custom_id"])
            item = Item(f"img{idx}", RequestSpec("", (Text(""), ImageRef("0")), schema, "x"), check, key="k")
            obj = runner.settle(item, pb._line_outcome(row, "responses"), attempt=att, mode="batch")
            if obj is not None:
                spill(idx, obj)
    frame = spill.frame()
    dt = time.perf_counter() - t
    assert frame.height == n, frame.height
    usd = runner.cost_total
    print(json.dumps({"phase": "parse", "n": n, "seconds": round(dt, 2), "answers": frame.height,
                      "cost_usd": round(usd, 2), "peak_rss_mb": _rss()}))


def _rss() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--phase", choices=["build", "parse"], default=None)
    args = ap.parse_args()
    if args.phase:
        with tempfile.TemporaryDirectory() as d:
            (phase_build if args.phase == "build" else phase_parse)(args.n, Path(d))
        return
    for n in ([args.n] if args.n else [25_000, 50_000, 100_000]):
        for phase in ("build", "parse"):
            subprocess.run([sys.executable, __file__, "--n", str(n), "--phase", phase], check=True,
                           env={**os.environ, "POLARS_MAX_THREADS": os.environ.get("POLARS_MAX_THREADS", "2")})


if __name__ == "__main__":
    main()

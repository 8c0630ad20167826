"""Build, submit and collect N vision requests through the real rule entry points; print time and
peak memory per phase.

    python benchmarks/requests_build.py                 # N = 25,000, 50,000, 100,000
    python benchmarks/requests_build.py --n 100000      # one size
    python benchmarks/requests_build.py --no-cache      # collect without response-cache writes
    python benchmarks/requests_build.py --n 1000000 --phases build,submit,table,collect

Each phase runs in a fresh process (so its peak RSS is its own) over one shared temporary folder:

* **build**: ``vision.openai.build`` (the ``vision_build`` rule) reads a synthetic ``images.jsonl``
  (150-tag vocabulary, 4 taxonomy facets, 3 booleans, url transport so that no image file is needed)
  and streams ``requests.jsonl`` and the manifest, with an empty response cache.
* **submit**: ``vision.openai.submit`` (the ``vision_submit`` rule): content-addressed chunk files
  (50,000 requests / 190 MB each), journal, one upload + batch per chunk, against an in-process stub
  client (no network; the stub only returns ids).
* **collect**: ``vision.openai.collect`` (the ``vision_collect`` rule) against the same stub, whose
  batches are completed and whose output files (N answers in the Batch API output format, written
  before the clock starts) are already downloaded: custom_id decoding, response parsing,
  strict-schema validation, response-cache writes, cost rows streamed to the
  cost file, annotation rows spilled and read back in order, annotations + losses written. Answers
  go to the response cache's pack segments (one append per answer, a segment published every
  25,000 entries; see docs/openai.md, "Response cache").
* **table**: reads the shard's ``images.jsonl`` alone (the first thing collect does). Collect's
  peak minus this phase's peak (``collect_over_table_mb``, printed last) is what collect itself
  holds: answers are spilled to index-range part files and written part by part, and per request it
  keeps a 32-byte key and two flag bytes, so this stays flat as the number of requests grows.
* **rebuild**: ``vision_build`` again over the filled cache: every item is answered by the cache
  (loading the segments' index, one look-up per item), nothing is written to ``requests.jsonl``.

``seconds`` is the phase's own work (imports and the synthetic input excluded); ``peak_rss_mb``
is the process's max RSS and ``base_rss_mb`` its RSS just before the phase started (imports,
synthetic input): the difference is what the phase itself holds.
"""

from __future__ import annotations

import argparse
import gzip
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


SETTINGS = {"model": "gpt-5-mini", "mode": "batch", "image_transport": "url", "image_detail": "low",
            "metadata_columns": ["site"], "max_attempts": 3, "poll_seconds": 0, "max_requests_per_batch": 50000,
            "max_bytes_per_batch": 190_000_000}


def write_images(n: int, path: Path) -> None:
    import polars as pl

    from benchmaker.formats import write_table

    i = pl.col("i")
    df = pl.DataFrame({"i": pl.int_range(0, n, eager=True)}).select(
        image_id=pl.format("collection/part{}/image_{}.jpg", (i % 97).cast(pl.String).str.zfill(2),
                           i.cast(pl.String).str.zfill(7)),
        mime_type=pl.lit("image/jpeg"), width=pl.lit(1024), height=pl.lit(768), file_size=pl.lit(1000),
        sha256=i.cast(pl.String).str.zfill(64), phash=pl.lit(None, pl.String), license=pl.lit("CC0-1.0"),
        doi=pl.lit(None, pl.String), original_dataset_name=pl.lit("bench"),
        site=pl.format("site {}", (i % 13).cast(pl.String)),
    ).with_columns(image_url="https://img.example/" + pl.col("image_id"))
    write_table(df, "images", path)


class _Obj(dict):
    def __getattr__(self, k):
        return self[k]

    def to_dict(self):
        return dict(self)


class StubClient:
    """The few client calls submit and collect make, answered in process (no network)."""

    def __init__(self):
        class Files:
            def create(self, file, purpose):
                return _Obj(id=f"file-{file[0]}")

            def list(self, purpose=None):
                return iter(())

        class Batches:
            def create(self, **kw):
                return _Obj(id="batch_" + kw["metadata"]["bm_chunk"][:16], status="validating", **kw)

            def retrieve(self, bid):
                return _Obj(id=bid, status="completed", output_file_id=f"out-{bid}", error_file_id=None,
                            request_counts={"total": 1, "completed": 1, "failed": 0})

            def list(self, limit=100):
                return iter(())

        self.files, self.batches = Files(), Batches()


def _paths(tmp: Path) -> dict:
    return {"images": str(tmp / "images.jsonl"), "requests": str(tmp / "requests.jsonl"),
            "manifest": str(tmp / "manifest.jsonl"), "submitted": str(tmp / "submitted.json"),
            "annotations": str(tmp / "annotations.jsonl"), "losses": str(tmp / "losses.jsonl"),
            "costs": str(tmp / "costs.jsonl"), "state_dir": str(tmp / "state"), "cache_dir": str(tmp / "cache")}


def phase_build(n: int, tmp: Path, cache: bool) -> dict:
    from benchmaker.vision import openai as vo

    p = _paths(tmp)
    write_images(n, Path(p["images"]))
    base = _rss_now()
    t = time.perf_counter()
    vo.build(images=p["images"], requests=p["requests"], manifest=p["manifest"], settings=SETTINGS,
             facets=facets(), image_root="/nonexistent", columns={}, cache_dir=p["cache_dir"])
    dt = time.perf_counter() - t
    size = Path(p["requests"]).stat().st_size
    return {"seconds": round(dt, 2), "mb_written": round(size / 1e6, 1), "base_rss_mb": base}


def phase_submit(n: int, tmp: Path, cache: bool) -> dict:
    from benchmaker.providers import openai as oai
    from benchmaker.vision import openai as vo

    p = _paths(tmp)
    oai.make_client = lambda settings, timeout=120.0: StubClient()
    base = _rss_now()
    t = time.perf_counter()
    vo.submit(requests=p["requests"], submitted=p["submitted"], settings=SETTINGS, state_dir=p["state_dir"],
              benchmark="bench", shard="00000")
    dt = time.perf_counter() - t
    sub = json.loads(Path(p["submitted"]).read_text())
    return {"seconds": round(dt, 2), "batches": len(sub["batches"]), "base_rss_mb": base}


def _write_outputs(tmp: Path, n: int) -> None:
    """The Batch API output file of every submitted batch (as collect would download it)."""
    from benchmaker.providers.batch_answers import _chunk_ids

    p = _paths(tmp)
    fm_tags = facets()["tags"]["vocabulary"]
    names = ["subject", "setting", "shot", "season", "person_present", "animal_present", "text_visible"]
    sub = json.loads(Path(p["submitted"]).read_text())
    dl = Path(p["state_dir"]) / "downloads"
    dl.mkdir(parents=True, exist_ok=True)
    for b in sub["batches"]:
        chunk = Path(p["state_dir"]) / "chunks" / f"{b['digest']}.jsonl"
        # as collect's download writes them: gzip level 1
        with gzip.open(dl / f"{b['batch_id']}.output.jsonl.gz", "wt", compresslevel=1) as fh:
            for cid in _chunk_ids(str(chunk)):
                i = int(cid.split("-")[1])
                ans = {"summary": f"image {i} shows something", "subject": f"subject_{i % 12}", "setting": "outdoor",
                       "shot": "wide", "season": "winter", "person_present": False, "animal_present": True,
                       "text_visible": False, "tags": fm_tags[i % 100: i % 100 + 14],
                       "confidence": {k: 0.8 for k in names}}
                body = {"id": f"resp_{i}", "object": "response", "status": "completed",
                        "output": [{"type": "message", "content": [{"type": "output_text", "text": json.dumps(ans)}]}],
                        "usage": {"input_tokens": 1500, "output_tokens": 300,
                                  "input_tokens_details": {"cached_tokens": 1024},
                                  "output_tokens_details": {"reasoning_tokens": 128}}}
                fh.write(json.dumps({"id": f"batch_req_{i}", "custom_id": cid,
                                     "response": {"status_code": 200, "request_id": "r", "body": body},
                                     "error": None}) + "\n")


def phase_collect(n: int, tmp: Path, cache: bool) -> dict:
    from benchmaker.providers import openai as oai
    from benchmaker.vision import openai as vo

    p = _paths(tmp)
    oai.make_client = lambda settings, timeout=120.0: StubClient()
    _write_outputs(tmp, n)
    base = _rss_now()
    t = time.perf_counter()
    vo.collect(images=p["images"], manifest=p["manifest"], submitted=p["submitted"], annotations=p["annotations"],
               losses=p["losses"], costs=p["costs"], settings=SETTINGS, facets=facets(), image_root="/nonexistent",
               columns={}, state_dir=p["state_dir"], benchmark="bench", shard="00000",
               cache_dir=p["cache_dir"] if cache else None)
    dt = time.perf_counter() - t
    with open(p["annotations"]) as fh:
        rows = sum(1 for _ in fh)
    assert rows == n, (rows, n)
    usd = 0.0
    with open(p["costs"]) as fh:
        for line in fh:
            usd += json.loads(line)["cost_usd"]
    return {"seconds": round(dt, 2), "annotations": rows, "cost_usd": round(usd, 2), "cache": cache,
            "base_rss_mb": base, "requests_mb": round(_du(p["requests"]) / 1e6, 1),
            "state_mb": round(_du(p["state_dir"]) / 1e6, 1),
            "cache_mb": round(_du(p["cache_dir"]) / 1e6, 1) if cache else 0.0}


def _du(path: str) -> int:
    """Bytes under a file or folder (the intermediate files a run leaves)."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0


def phase_table(n: int, tmp: Path, cache: bool) -> dict:
    """Only what collect reads first: the shard's images table (``read_table``). Its peak is what
    the shard's own table costs; collect's peak minus this one is what collect itself holds (answers,
    per-request state), which must not grow with the number of requests."""
    from benchmaker.formats import read_table

    p = _paths(tmp)
    base = _rss_now()
    t = time.perf_counter()
    imgs = read_table("images", p["images"], columns={})
    dt = time.perf_counter() - t
    return {"seconds": round(dt, 2), "rows": imgs.height, "base_rss_mb": base}


def phase_rebuild(n: int, tmp: Path, cache: bool) -> dict:
    """Build again over the cache that collect filled: every request is answered by the cache (the
    index of the pack segments is loaded once, then one in-memory look-up per item)."""
    from benchmaker.vision import openai as vo

    p = _paths(tmp)
    base = _rss_now()
    t = time.perf_counter()
    counts = vo.build(images=p["images"], requests=str(tmp / "requests2.jsonl"), manifest=str(tmp / "manifest2.jsonl"),
                      settings=SETTINGS, facets=facets(), image_root="/nonexistent", columns={},
                      cache_dir=p["cache_dir"])
    dt = time.perf_counter() - t
    with open(tmp / "manifest2.jsonl") as fh:
        cached = sum('"cached":true' in line for line in fh)
    assert cached == (n if cache else 0), (cached, n, counts)
    return {"seconds": round(dt, 2), "cached": cached, "base_rss_mb": base}


def _rss_now() -> float:
    """RSS now; also resets the tracemalloc peak (called right before a phase's timed part)."""
    import tracemalloc

    if tracemalloc.is_tracing():
        tracemalloc.reset_peak()
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _peak() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


PHASES = {"build": phase_build, "submit": phase_submit, "table": phase_table, "collect": phase_collect,
          "rebuild": phase_rebuild}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--phase", choices=list(PHASES), default=None)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--phases", default=None, help="comma-separated phases to run (default: all)")
    ap.add_argument("--no-cache", action="store_true", help="collect without writing the response cache")
    ap.add_argument("--tracemalloc", action="store_true",
                    help="also report the phase's peak Python-heap allocation (slower)")
    args = ap.parse_args()
    if args.phase:
        if args.tracemalloc:
            import tracemalloc

            tracemalloc.start()
        out = PHASES[args.phase](args.n, Path(args.dir), not args.no_cache)
        extra = {}
        if args.tracemalloc:
            extra["py_heap_peak_mb"] = round(tracemalloc.get_traced_memory()[1] / 1e6, 1)
        print(json.dumps({"phase": args.phase, "n": args.n, **out, "peak_rss_mb": _peak(), **extra}), flush=True)
        return
    for n in ([args.n] if args.n else [25_000, 50_000, 100_000]):
        peaks = {}
        with tempfile.TemporaryDirectory(prefix="bm-bench-") as d:
            for phase in (args.phases.split(",") if args.phases else PHASES):
                cmd = [sys.executable, __file__, "--n", str(n), "--phase", phase, "--dir", d]
                cmd += (["--no-cache"] if args.no_cache else []) + (["--tracemalloc"] if args.tracemalloc else [])
                r = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True,
                                   env={**os.environ, "POLARS_MAX_THREADS": os.environ.get("POLARS_MAX_THREADS", "2")})
                print(r.stdout, end="", flush=True)
                peaks[phase] = json.loads(r.stdout.strip().splitlines()[-1])["peak_rss_mb"]
        if "collect" in peaks and "table" in peaks:
            print(json.dumps({"n": n, "collect_peak_rss_mb": peaks["collect"], "table_peak_rss_mb": peaks["table"],
                              "collect_over_table_mb": round(peaks["collect"] - peaks["table"], 1)}), flush=True)


if __name__ == "__main__":
    main()

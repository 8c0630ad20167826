"""Planner benchmark: wall time and peak RSS of the plan stage on synthetic annotations.

    python benchmarks/planner.py                      # N=10k/Q=100 and N=1M/Q=10k
    python benchmarks/planner.py --sizes 200000:2000  # other N:Q pairs

The synthetic collection looks like a FireBench run: five skewed taxonomy facets (Zipf-like value
frequencies) and one boolean, a 150-tag vocabulary with 14-25 tags per image whose choice depends on
the image's facets (so tag overlap means something), a 1% sprinkling of exact duplicates (same sha256)
and of near duplicates (pHash within a few bits). Each query asks for 40 candidates (5 positive,
5 neutral, 15 hard, 10 near-miss, 5 easy). The columnar copies of the two files that the merges write
in a run (``benchmaker.columnar``) are written next to them (``copies_s``; ``--jsonl``: none, the
planner reads the JSONL as without them). The plan stage (``benchmaker.plan.run``: read + validate
the copies or the JSONL, index, plan, write) runs in a child process, so the numbers are the stage's own: wall time of
the child and its own peak resident set size (``VmHWM``: Linux carries ``ru_maxrss`` over ``execve``,
so it would report this generator's peak when that is larger). ``same_plan_as_before`` compares the plan's
sha256 with the one recorded before the planner's speed work (``KNOWN_PLANS``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]

TAXONOMY = {
    "viewpoint": ["fixed_long_range", "handheld", "aerial", "other", "unknown"],
    "plume_stage": ["incipient", "developing", "mature", "residual", "none", "unknown"],
    "lighting": ["day", "dusk", "night", "ir_nir", "unknown"],
    "confounder_type": ["cloud", "fog_marine_layer", "dust", "haze", "sun_glare", "none", "unknown"],
    "environment_type": ["forest", "grassland", "shrubland", "mountainous", "urban_wui", "coastal", "desert",
                         "agricultural", "water", "other", "unknown"],
}
BOOLEAN = ["flame_visible"]
VOCAB = [f"tag_{i:03d}" for i in range(150)]
FACETS = {"taxonomy": TAXONOMY, "boolean": BOOLEAN, "tags": {"min": 14, "max": 25, "vocabulary": VOCAB}}
SETTINGS = {
    "num_seeds": 100, "seeds_per_query": 1,
    "core_facets": ["plume_stage", "environment_type"],
    "off_facets": ["plume_stage", "environment_type", "lighting"],
    "diversity_facets": ["viewpoint"], "diversity_cap": 6,
    "pos_total": 5, "neutral_total": 5, "neg_total": 30, "neg_hard": 15, "neg_nearmiss": 10, "neg_easy": 5,
    "easy_max_jaccard": 0.1, "max_image_reuse": 3, "random_seed": 42,
}


# sha256 of query_plan.jsonl for this generator's collections, planned before the planner's speed
# work (issue 23): a faster planner must make the same plans (smaller sizes: tests/test_plan_golden.py)
KNOWN_PLANS = {
    "200000:2000": "97b79e62bf0dbc043da12cd275ae9fa27dc6e34ed7d5e1259764998133adf48e",
    "1000000:10000": "68866c172167d566f37666a05127da8179af175fc4a721123d33c28b524a37f2",
}


def _zipf(k: int, a: float = 1.1) -> np.ndarray:
    p = 1.0 / np.arange(1, k + 1) ** a
    return p / p.sum()


def generate(n: int, out: Path, seed: int = 7) -> tuple[Path, Path]:
    """Write annotations.jsonl and images.jsonl for ``n`` synthetic images into ``out``."""
    rng = np.random.default_rng(seed)
    ids = np.array([f"cam{(i % 97):02d}/img_{i:07d}.jpg" for i in range(n)])
    cols: dict[str, object] = {"image_id": ids}
    codes = {}
    for f, vals in TAXONOMY.items():
        c = rng.choice(len(vals), size=n, p=_zipf(len(vals)))
        codes[f] = c
        cols[f] = np.asarray(vals)[c]
    cols["flame_visible"] = rng.random(n) < 0.3
    # tags: 14..25 per image; 60% drawn from a facet-dependent window of the vocabulary, 40% global Zipf
    n_tags = rng.integers(14, 26, size=n)
    total = int(n_tags.sum())
    owner = np.repeat(np.arange(n), n_tags)
    shift = (codes["plume_stage"] * 23 + codes["environment_type"] * 11 + codes["lighting"] * 5)[owner]
    local = (shift + rng.choice(30, size=total, p=_zipf(30, 0.8))) % 150
    glob = rng.choice(150, size=total, p=_zipf(150, 1.0))
    tag = np.where(rng.random(total) < 0.6, local, glob)
    tags = (
        pl.DataFrame({"i": owner, "t": np.asarray(VOCAB)[tag]})
        .group_by("i", maintain_order=True).agg(pl.col("t").unique(maintain_order=True))
        .sort("i")["t"]
    )
    conf = pl.struct([pl.lit(0.9).alias(f) for f in [*TAXONOMY, *BOOLEAN]])
    ann = pl.DataFrame(cols).with_columns(
        tags=tags, summary=pl.lit("synthetic image"), annotator=pl.lit("synthetic"),
    ).with_columns(confidence=conf)
    # fingerprints: unique sha256 / random 64-bit pHash, with 1% exact and 1% near duplicates
    sha = rng.integers(0, 2**63 - 1, size=n, dtype=np.int64)
    ph = rng.integers(0, 2**63 - 1, size=n, dtype=np.int64).astype(np.uint64)
    dup = rng.choice(n, size=max(1, n // 100), replace=False)
    sha[dup] = sha[(dup + 1) % n]
    near = rng.choice(n, size=max(1, n // 100), replace=False)
    ph[near] = ph[(near + 1) % n] ^ np.uint64(0b1011)
    images = pl.DataFrame({
        "image_id": ids,
        "image_url": None, "mime_type": "image/jpeg", "width": 640, "height": 480, "file_size": 100_000,
        "sha256": [f"{x:064x}" for x in sha.tolist()],
        "phash": [f"{x:016x}" for x in ph.tolist()],
        "license": "CC0-1.0", "doi": None, "original_dataset_name": "synthetic",
    })
    a, i = out / "annotations.jsonl", out / "images.jsonl"
    ann.write_ndjson(a)
    images.write_ndjson(i)
    return a, i


CHILD = """
import json, logging, sys, time, resource
logging.basicConfig(level=logging.INFO, format="%(relativeCreated)8.0f ms %(message)s")
sys.path.insert(0, {src!r})
from benchmaker.plan import run
from benchmaker.runner import own_peak_kib  # VmHWM: ru_maxrss would carry the parent's peak
t0 = time.perf_counter()
run(annotations={a!r}, images={i!r}, plan={p!r}, losses={l!r}, settings=json.loads({s!r}),
    facets=json.loads({f!r}), benchmark_name="synth", columns={{}}, **json.loads({c!r}))
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"wall_s": time.perf_counter() - t0, "cpu_s": ru.ru_utime + ru.ru_stime,
                  "maxrss_mb": own_peak_kib() / 1024}}))
"""


def write_copies(a: Path, i: Path) -> dict[str, str]:
    """The columnar copies merge_annotations and merge_images write in a run (benchmaker.columnar)."""
    sys.path.insert(0, str(ROOT / "src"))
    from benchmaker.columnar import write_copy_of_jsonl
    from benchmaker.formats import FacetModel

    copies = {"annotations_columns": str(a.with_suffix(".columns.parquet")),
              "images_columns": str(i.with_suffix(".columns.parquet"))}
    write_copy_of_jsonl("annotations", a, copies["annotations_columns"], facets=FacetModel.from_config(FACETS))
    write_copy_of_jsonl("images", i, copies["images_columns"])
    return copies


def bench(n: int, q: int, workdir: Path, jsonl: bool = False) -> dict:
    t0 = time.perf_counter()
    a, i = generate(n, workdir)
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    copies = {} if jsonl else write_copies(a, i)
    copies_s = time.perf_counter() - t0
    settings = {**SETTINGS, "num_seeds": q}
    p, losses = workdir / "query_plan.jsonl", workdir / "losses.jsonl"
    code = CHILD.format(src=str(ROOT / "src"), a=str(a), i=str(i), p=str(p), l=str(losses),
                        s=json.dumps(settings), f=json.dumps(FACETS), c=json.dumps(copies))
    env = dict(os.environ, POLARS_MAX_THREADS=os.environ.get("POLARS_MAX_THREADS", "2"))
    load = os.getloadavg()[0]
    t1 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t1
    if res.returncode:
        sys.stderr.write(res.stderr)
        raise SystemExit(f"plan stage failed for N={n} Q={q}")
    inner = json.loads(res.stdout.strip().splitlines()[-1])
    for line in res.stderr.splitlines():
        if "plan:" not in line and "WARNING" not in line:  # skip progress bars
            sys.stderr.write(f"  [N={n}] {line}\n")
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    plan = pl.read_ndjson(p, infer_schema_length=None)
    diff = plan.select(pl.col("difficulty").struct.unnest()).sum().row(0, named=True)
    n_short = plan.filter(pl.col("shortfall").list.len() > 0).height
    return {
        "N": n, "Q": q, "queries": plan.height, "gen_s": round(gen_s, 1),
        "read": "JSONL" if jsonl else "columnar copies", "copies_s": round(copies_s, 1),
        "stage_wall_s": round(inner["wall_s"], 1), "process_cpu_s": round(inner["cpu_s"], 1),
        "process_wall_s": round(wall, 1), "load_1min_at_start": round(load, 1),
        "peak_rss_mb": round(inner["maxrss_mb"]), "candidates": diff,
        "queries_with_shortfall": n_short,
        "annotations_mb": round(a.stat().st_size / 2**20),
        "plan_sha256": digest,
        "same_plan_as_before": (KNOWN_PLANS[f"{n}:{q}"] == digest) if f"{n}:{q}" in KNOWN_PLANS else "not recorded",
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="*", default=["10000:100", "1000000:10000"], help="N:Q pairs")
    ap.add_argument("--workdir", default=None, help="where to write the synthetic files (default: a temp dir)")
    ap.add_argument("--jsonl", action="store_true", help="no columnar copies: the planner reads the JSONL files")
    args = ap.parse_args(argv)
    for spec in args.sizes:
        n, q = (int(x) for x in spec.split(":"))
        with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
            r = bench(n, q, Path(tmp), jsonl=args.jsonl)
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()

"""Time pool deepening on synthetic data with the offline (rules) judge (issue 21, docs/deepen.md).

    python benchmarks/deepen.py [--systems 10] [--queries 1000] [--images 100000] [--k 20] [--depth 100]

Data: ``images`` images with annotations (one taxonomy facet, tags); ``queries`` planned queries,
each a judged pool of 50 (seed first); per system a corpus run of ``depth`` images per query drawn
from the query's neighbourhood (its pool plus 250 other images, system-specific noise), so systems
overlap partly, as real ones do. Measured, each in a child process (wall time and peak memory of the
process tree, benchmarks/measure.py):

* every ``deepen_system`` job (one per system: each reads every system's top k, computes the same
  assignment, and the rules judge labels its own new pairs), one after the other;
* the ``deepen`` merge: the deepened qrels with provenance, the evaluate aggregate on them for every
  run (pool / corpus / condensed scopes, drill-downs, paired tests; no embeddings, so no diversity),
  the report and leave-one-system-out (each system re-scored with ranx, Kendall tau).

ranx's numba compilation is paid once into NUMBA_CACHE_DIR before the measured children.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from measure import run_measured  # noqa: E402

from benchmaker.formats import write_table  # noqa: E402 - after the sys.path insert

SUBJECTS = ["cat", "dog", "bird", "car", "tree", "house", "boat", "person", "flower", "horse"]
VOCAB = [f"tag{i}" for i in range(40)]
FACETS = {"taxonomy": {"subject": SUBJECTS}, "boolean": [], "tags": {"min": 2, "max": 4, "vocabulary": VOCAB}}
POOL = 50


def make(d: Path, n_sys: int, n_q: int, n_img: int, depth: int, seed: int = 0) -> None:
    from benchmaker.evaluate.runs import write_run

    rng = np.random.default_rng(seed)
    ids = np.array([f"cam{i % 100:03d}/img{i:07d}.jpg" for i in range(n_img)], dtype=object)
    subj = rng.integers(0, len(SUBJECTS), n_img)
    tags = rng.integers(0, len(VOCAB), (n_img, 3))
    write_table(pl.DataFrame({
        "image_id": ids.tolist(), "image_url": None, "mime_type": "image/jpeg", "width": 640, "height": 480,
        "file_size": 1000, "sha256": [f"{i:064x}" for i in range(n_img)], "phash": None, "license": None,
        "doi": None, "original_dataset_name": "synthetic"}), "images", d / "images.jsonl")
    write_table(pl.DataFrame({
        "image_id": ids.tolist(), "summary": "a picture", "tags": [[VOCAB[t] for t in row] for row in tags],
        "confidence": [{"subject": 0.9}] * n_img, "annotator": "synthetic",
        "subject": [SUBJECTS[s] for s in subj]}), "annotations", d / "annotations.jsonl")
    pools = np.stack([rng.choice(n_img, size=POOL, replace=False) for _ in range(n_q)])
    qids = [f"q{i:06d}" for i in range(n_q)]
    cands = [[{"image_id": ids[j], "pool": "seed" if n == 0 else "neutral", "reason": "synthetic"}
              for n, j in enumerate(p)] for p in pools]
    plan = pl.DataFrame({
        "query_id": qids, "seed_image_ids": [[ids[p[0]]] for p in pools],
        "candidate_image_ids": [[ids[j] for j in p] for p in pools], "candidates": cands,
        "difficulty": 0.5, "shortfall": [[] for _ in qids],
        "profile": [{"subject": SUBJECTS[subj[p[0]]]} for p in pools]},
        schema_overrides={"shortfall": pl.List(pl.Struct({"pool": pl.String, "wanted": pl.Int64, "got": pl.Int64,
                                                           "reason": pl.String}))})
    write_table(plan, "query_plan", d / "query_plan.jsonl")
    rel = (subj[pools] == subj[pools[:, :1]]).astype(np.int64)
    write_table(pl.DataFrame({
        "query_id": np.repeat(qids, POOL), "query_text": np.repeat([f"query {i}" for i in range(n_q)], POOL),
        "image_id": ids[pools.ravel()].tolist(), "relevance_label": rel.ravel(),
        "pool": np.tile(np.array(["seed"] + ["neutral"] * (POOL - 1)), n_q),
        "is_seed": np.tile(np.arange(POOL) == 0, n_q),
        "seed_not_relevant": False, "judge": "rules"}), "qrels", d / "qrels.jsonl")
    hood = np.concatenate([pools, rng.integers(0, n_img, (n_q, 250))], axis=1)   # each query's neighbourhood
    for s in range(n_sys):
        name = f"sys{s:02d}"
        score = rng.random(hood.shape) + 0.3 * (subj[hood] == subj[pools[:, :1]])
        top = np.argsort(-score, axis=1)[:, :depth]
        img = np.take_along_axis(hood, top, axis=1)
        run = pl.DataFrame({"query_id": np.repeat(qids, depth), "image_id": ids[img.ravel()].tolist(),
                            "score": np.take_along_axis(score, top, axis=1).ravel()})
        write_run(run.unique(["query_id", "image_id"], keep="first"), d / "runs" / f"{name}.trec", name)
        (d / "runs" / f"{name}.json").write_text(json.dumps({
            "name": name, "kind": "trec_run", "scopes": ["pool", "corpus"], "depth": depth, "sees_judge_text": False,
            "timing": {}}))


def _deepen(n_sys: int, k: int) -> dict:
    return {"systems": [f"sys{s:02d}" for s in range(n_sys)], "k": k, "max_pairs": None, "max_usd": None}


def child_system(d: Path, n_sys: int, k: int, system: str) -> None:
    from benchmaker.deepen import label

    t0 = time.perf_counter()
    out = label.run(qrels=str(d / "qrels.jsonl"), plan=str(d / "query_plan.jsonl"),
                    annotations=str(d / "annotations.jsonl"), images=str(d / "images.jsonl"),
                    runs=[str(d / "runs" / f"sys{s:02d}.trec") for s in range(n_sys)], system=system,
                    labels=str(d / "labels" / f"{system}.jsonl"), losses=str(d / "losses" / f"{system}.jsonl"),
                    costs=str(d / "costs" / f"{system}.jsonl"), adapter="rules",
                    settings={"labels": "binary", "rationale": False, "adapter_settings": {}},
                    deepen=_deepen(n_sys, k), facets=FACETS, image_root=str(d), columns={})
    print(json.dumps({"system": system, "pairs": out["pairs"], "seconds": round(time.perf_counter() - t0, 2)}))


def child_merge(d: Path, n_sys: int, k: int) -> None:
    import logging

    from benchmaker.deepen import merge

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")

    names = [f"sys{s:02d}" for s in range(n_sys)]
    o = d / "deepen"
    t0 = time.perf_counter()
    rep = merge.run(qrels=str(d / "qrels.jsonl"), labels=[str(d / "labels" / f"{n}.jsonl") for n in names],
                    runs=[str(d / "runs" / f"{n}.trec") for n in names],
                    metas=[str(d / "runs" / f"{n}.json") for n in names], images=str(d / "images.jsonl"),
                    annotations=str(d / "annotations.jsonl"), deepened=str(o / "qrels.jsonl"),
                    report_json=str(o / "report.json"), report_csv=str(o / "report.csv"),
                    leave_one_out=str(o / "leave_one_out.csv"), leaderboard_csv=str(o / "ev" / "leaderboard.csv"),
                    leaderboard_json=str(o / "ev" / "leaderboard.json"), drilldown=str(o / "ev" / "drilldown.csv"),
                    significance_csv=str(o / "ev" / "significance.csv"), per_query=str(o / "ev" / "per_query.csv"),
                    sage_leaderboard=str(o / "ev" / "sage_leaderboard.csv"),
                    costs=[str(d / "costs" / f"{n}.jsonl") for n in names], settings={"k": [10]},
                    deepen=_deepen(n_sys, k), facets=FACETS, columns={})
    loo = rep["leave_one_out"]
    print(json.dumps({"pairs_added": rep["pairs_added"], "relevant_share": rep["relevant_share"],
                      "min_tau": loo.get("min_kendall_tau"), "systems": loo.get("systems_ranked"),
                      "seconds": round(time.perf_counter() - t0, 2)}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--systems", type=int, default=10)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--images", type=int, default=100_000)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--child", nargs="*", default=None)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    if a.child is not None:
        d = Path(a.dir)
        if a.child[0] == "system":
            child_system(d, a.systems, a.k, a.child[1])
        else:
            child_merge(d, a.systems, a.k)
        return
    os.environ.setdefault("NUMBA_CACHE_DIR", str(Path.home() / ".cache" / "benchmaker" / "numba"))
    with tempfile.TemporaryDirectory(prefix="bm-deepen-") as tmp:
        d = Path(tmp)
        (d / "runs").mkdir()
        t0 = time.perf_counter()
        make(d, a.systems, a.queries, a.images, a.depth)
        print(f"data: {a.systems} systems x {a.queries} queries (depth {a.depth}) over {a.images} images, "
              f"{time.perf_counter() - t0:.1f} s")
        base = [sys.executable, __file__, "--dir", str(d), "--systems", str(a.systems), "--k", str(a.k)]
        walls, peaks, pairs = [], [], 0
        for s in range(a.systems):
            m = run_measured([*base, "--child", "system", f"sys{s:02d}"])
            assert m.returncode == 0, m.stderr[-3000:]
            walls.append(m.wall_s)
            peaks.append(m.peak_mb)
            pairs += json.loads(m.stdout.strip().splitlines()[-1])["pairs"]
        print(f"deepen_system x {a.systems} (top {a.k}, rules judge): {pairs} new pairs; per job wall "
              f"{min(walls):.1f}-{max(walls):.1f} s (sum {sum(walls):.1f} s), peak {max(peaks):.0f} MB")
        m = run_measured([*base, "--child", "merge"])
        assert m.returncode == 0, m.stderr[-3000:]
        r = json.loads(m.stdout.strip().splitlines()[-1])
        print(f"deepen (merge + evaluate on the deepened qrels + leave-one-out): wall {m.wall_s:.1f} s, peak "
              f"{m.peak_mb:.0f} MB; {r['pairs_added']} pairs added, relevant share {r['relevant_share']:.3f}, "
              f"min tau {r['min_tau']} over {r['systems']} systems")
        for ln in m.stderr.splitlines():
            if ln.startswith("deepen: ") or ln.startswith("evaluate: "):
                print("  " + ln)


if __name__ == "__main__":
    main()

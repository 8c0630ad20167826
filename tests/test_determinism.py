"""Same config and images, same bytes: whatever the job order, core count, batch sizes, embedding
cache state, or a kill -9 and resume. And every setting either changes the output (a rerun trigger,
part of the cache key) or is not a rerun trigger (``snakemake -n`` says nothing to do).

The workflow runs twice on the tiny corpus, in two folders with the same config file contents
(tests/support_runs.py; the session fixture ``tiny_runs``, whose run A tests/test_workflow.py reads too):

* A: fresh, ``--cores 1``;
* B: runtime knobs changed (batch sizes, workers: not part of the output), the embedding cache
  pre-warmed by ``embed_images`` of half the shards of another benchmark with 10 shards (so B's
  jobs encode other subsets of images than A's, and find the rest in the cache), then ``--cores 2``
  killed with SIGKILL mid-run, unlocked and resumed with ``--cores 1``.

Every data file of A and B must have the same sha256.
"""

from __future__ import annotations

import os
import re
import time

import numpy as np
import pytest
import support
from support_runs import EPOCH, config_for, smk

job_stats = support.job_stats  # parse Snakemake's 'Job stats' table (tests/support.py)


@pytest.fixture(scope="module")
def runs(tiny_runs):
    """The two builds (tests/support_runs.py), shared with tests/test_workflow.py."""
    return tiny_runs


@pytest.mark.slow
def test_two_runs_in_other_orders_give_identical_bytes(runs):
    assert runs["killed"], "the second run finished before it could be killed"
    da, db = runs["digests_a"], runs["digests_b"]
    assert set(da) == set(db), set(da) ^ set(db)
    for must in ("images.jsonl", "annotations.jsonl", "query_plan.jsonl", "qrels.jsonl", "qrels_with_score.jsonl",
                 "summary/facet_distribution.csv", "summary/summary.json", "summary/report.md",
                 "hf_dataset/dataset_metadata.json", "embeddings/images/00000.parquet"):
        assert must in da, must
    assert any(k.startswith("hf_dataset/data/") and k.endswith(".parquet") for k in da)
    differ = sorted(k for k in da if da[k] != db[k])
    assert not differ, f"files that differ between the two runs: {differ}"


@pytest.mark.slow
def test_stage_versions_cover_every_module_the_jobs_ran(runs):
    """benchmaker.runner warns when a stage ran a benchmaker module outside its stage version."""
    for run in ("a", "b"):
        for log in (runs[run] / "results" / "tiny" / "logs").rglob("*.log"):
            assert "misses modules it ran" not in log.read_text(), log


@pytest.mark.slow
def test_runtime_knobs_are_not_rerun_triggers(runs):
    cfg = config_for(runs["shared"], runs["corpus"], **{
        "similarity": {"batch_size": 7, "num_workers": 0, "cache_dir": str(runs["shared"] / "elsewhere")},
        "vision.clip": {"batch_size": 2, "num_workers": 0}})
    r = smk(["-n", "-c1"], runs["a"], cfg, name="knobs.yaml")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Nothing to be done" in r.stdout + r.stderr, job_stats(r.stdout + r.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("section, key, value", [("similarity", "precision", "bf16"),
                                                 ("similarity", "device", "auto")])
def test_similarity_numerics_rerun_embeddings_only(runs, section, key, value):
    cfg = config_for(runs["shared"], runs["corpus"], **{section: {key: value}})
    r = smk(["-n", "-c1"], runs["a"], cfg, name=f"{key}.yaml")
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    assert set(stats) == {"embed_images", "embed_queries", "score", "summary", "export", "all"}, stats


@pytest.mark.slow
def test_vision_precision_reruns_vision_not_embeddings(runs):
    cfg = config_for(runs["shared"], runs["corpus"], **{"vision.clip": {"precision": "bf16"}})
    r = smk(["-n", "-c1"], runs["a"], cfg, name="vprec.yaml")
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    assert stats.get("vision") == 2 and "embed_images" not in stats and "preprocess" not in stats, stats


@pytest.mark.slow
def test_replacing_a_local_checkpoint_reruns_every_rule_that_uses_it(runs):
    weights = runs["shared"] / "clip" / "open_clip_model.safetensors"
    st = weights.stat()
    os.utime(weights, (time.time() + 5, time.time() + 5))  # replaced in place: same path, newer file
    try:
        r = smk(["-n", "-c1"], runs["a"], runs["base"], name="ckpt.yaml")
    finally:
        os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    assert stats.get("vision") == 2 and stats.get("embed_images") == 2 and stats.get("embed_queries") == 1, stats
    assert "preprocess" not in stats, stats


# ------------------------------------------------------------------------------- unit level, fast
@pytest.fixture(scope="module")
def clip(tiny_clip):
    from benchmaker.similarity.model import load_clip

    return load_clip(f"local-dir:{tiny_clip}", None, device="cpu", precision="fp32", reuse=False)


def test_an_embedding_does_not_depend_on_batch_size_or_partners(clip, tiny_corpus):
    """The measurement behind ENCODE_BATCH: fixed-shape forward passes give bit-identical rows
    whatever the other rows, their number, the batch size and the thread count."""
    import torch

    from benchmaker.similarity import embed

    paths = sorted(str(p) for p in tiny_corpus.rglob("*.png") if p.parent.name != "broken")[:12]

    def encode(some, **kw):
        rows = {}
        for idx, emb, failed in embed.iter_image_batches(clip, some, num_workers=0, **kw):
            assert not failed
            rows.update(zip(idx.tolist(), emb))
        return np.stack([rows[i] for i in range(len(some))])

    ref = encode(paths, batch_size=8)
    for bs in (1, 3, 5):
        assert np.array_equal(ref, encode(paths, batch_size=bs)), bs
    assert np.array_equal(ref[::-1], encode(paths[::-1], batch_size=4))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = encode(paths[5:6])
    finally:
        torch.set_num_threads(threads)
    assert np.array_equal(ref[5:6], alone)
    texts = ["a red circle", "blue stripes", "a gray square on a white background"] * 30
    full, _ = clip.encode_texts(texts)
    part, _ = clip.encode_texts(texts[1:2])
    assert np.array_equal(full[1:2], part) and np.array_equal(full[1], full[4])


def test_numerics_are_part_of_the_cache_key(tiny_clip):
    from benchmaker.similarity.model import ENCODE_BATCH, load_clip

    fp32 = load_clip(f"local-dir:{tiny_clip}", None, device="cpu", precision="fp32", reuse=False)
    bf16 = load_clip(f"local-dir:{tiny_clip}", None, device="cpu", precision="bf16", reuse=False)
    assert fp32.model_id == bf16.model_id
    assert fp32.cache_key != bf16.cache_key
    assert fp32.encode_batch == ENCODE_BATCH["cpu"]
    assert f"b{ENCODE_BATCH['cpu']}" in fp32.numerics and "fp32" in fp32.numerics and fp32.numerics.startswith("cpu-")


def test_pass_size_per_device_kind_is_in_the_cache_key_and_stays_deterministic(tiny_clip, tiny_corpus,
                                                                               monkeypatch):
    """The pass size comes from ENCODE_BATCH[device kind]; another value is another cache key, and
    with it an embedding still does not depend on the batch size or on the rows encoded beside it."""
    from benchmaker.similarity import embed, model

    ref = model.load_clip(f"local-dir:{tiny_clip}", None, device="cpu", precision="fp32", reuse=False)
    monkeypatch.setitem(model.ENCODE_BATCH, "cpu", 5)
    monkeypatch.setitem(model.ENCODE_BATCH, "cuda", 999)  # other kinds do not touch the CPU's pass size
    small = model.load_clip(f"local-dir:{tiny_clip}", None, device="cpu", precision="fp32", reuse=False)
    assert small.encode_batch == 5 and "|b5|" in small.numerics
    assert small.model_id == ref.model_id and small.cache_key != ref.cache_key
    assert model.encode_batch("cuda:1") == 999 and model.encode_batch("cpu") == 5

    paths = sorted(str(p) for p in tiny_corpus.rglob("*.png") if p.parent.name != "broken")[:12]
    calls = small.encode_image_calls

    def encode(some, **kw):
        rows = {}
        for idx, emb, failed in embed.iter_image_batches(small, some, num_workers=0, **kw):
            assert not failed
            rows.update(zip(idx.tolist(), emb))
        return np.stack([rows[i] for i in range(len(some))])

    full = encode(paths, batch_size=7)
    assert small.encode_image_calls - calls == 3  # 12 rows in passes of 5: 5 + 5 + 2 padded to 5
    for bs in (1, 4):
        assert np.array_equal(full, encode(paths, batch_size=bs)), bs
    assert np.array_equal(full[7:8], encode(paths[7:8]))


def test_created_utc_honours_source_date_epoch(monkeypatch):
    from benchmaker.export.facts import created_utc

    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    assert created_utc() == "2023-11-14T22:13:20Z"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(ValueError, match="SOURCE_DATE_EPOCH"):
        created_utc()
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", created_utc())


def test_facet_distribution_rows_in_config_order():
    import polars as pl

    from benchmaker.formats import FacetModel
    from benchmaker.summary.stats import facet_distribution

    fm = FacetModel.from_config(support.TINY_FACETS)
    ann = pl.DataFrame({"color": ["gray", "blue", None, "gray"], "shape": ["circle"] * 4,
                        "is_bright": [False, True, None, False]})
    for frame in (ann, ann.reverse(), ann.sample(fraction=1.0, shuffle=True, seed=3)):
        got = facet_distribution(frame, fm)
        assert got.filter(pl.col("facet") == "color")["value"].to_list() == \
            [*support.TINY_FACETS["taxonomy"]["color"], "null"]
        assert got.filter(pl.col("facet") == "is_bright")["value"].to_list() == ["true", "false", "null"]


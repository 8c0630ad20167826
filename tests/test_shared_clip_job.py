"""One process per shard: the vision rule writes embed_images' outputs with its one model load."""

from __future__ import annotations

import logging

import support
from test_vision_clip import images_table, settings
from test_workflow import job_stats

from benchmaker.formats import write_table
from benchmaker.losses import read_losses
from benchmaker.similarity import embed, loads
from benchmaker.vision import run as vision_run


def test_vision_job_writes_the_embeddings_with_one_model_load(tmp_path, tiny_corpus, tiny_clip, caplog,
                                                               monkeypatch):
    imgs = images_table(tiny_corpus)
    shard = tmp_path / "shard.jsonl"
    write_table(imgs, "images", shard)
    model = {"model": f"local-dir:{tiny_clip}", "pretrained": None, "precision": "auto"}
    runtime = {"device": "cpu", "batch_size": 8, "num_workers": 0}
    monkeypatch.setattr(loads, "_seen", set())
    from benchmaker.similarity import model as model_mod
    monkeypatch.setattr(model_mod, "_CACHE", {})
    caplog.set_level(logging.INFO)
    vision_run(images=str(shard), annotations=str(tmp_path / "ann.jsonl"), losses=str(tmp_path / "vl.jsonl"),
               adapter="clip", settings=settings(tiny_clip, embedding_cache_dir=str(tmp_path / "c1")),
               facets=support.TINY_FACETS, image_root=str(tiny_corpus), columns={},
               embeddings=str(tmp_path / "shared.parquet"), embed_losses=str(tmp_path / "el.jsonl"),
               similarity=model, similarity_runtime=runtime)
    assert len([r for r in caplog.records if "model load" in r.getMessage()
                and "in this job" in r.getMessage()]) == 1
    assert loads.loads_in_process() == 1
    # the same file and losses as the separate embed_images job (fresh cache: computed again)
    embed.run_images(images=str(shard), embeddings=str(tmp_path / "alone.parquet"),
                     losses=str(tmp_path / "el2.jsonl"), model=model, runtime=runtime,
                     cache_dir=str(tmp_path / "c2"), image_root=str(tiny_corpus))
    a, ma = embed.read_embeddings(tmp_path / "shared.parquet")
    b, mb = embed.read_embeddings(tmp_path / "alone.parquet")
    assert a["image_id"].to_list() == b["image_id"].to_list() and a.height == 30
    assert a["model_id"].to_list() == b["model_id"].to_list() and ma == mb
    assert read_losses(tmp_path / "el.jsonl").equals(read_losses(tmp_path / "el2.jsonl"))
    assert read_losses(tmp_path / "vl.jsonl").height == 3


def test_dry_run_has_no_embed_images_when_shared(tmp_path, tiny_cfg):
    n = tiny_cfg["n_shards"]
    tiny_cfg["similarity"]["share_vision_job"] = True
    tiny_cfg["vision"]["clip"]["device"] = tiny_cfg["similarity"]["device"]
    cfg = support.write_config(tmp_path / "config.yaml", tiny_cfg)
    r = support.snakemake(["-n", "-c1"], tmp_path, cfg)
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    assert stats["vision"] == n and "embed_images" not in stats and "decode_images" not in stats
    assert stats["score"] == 1
    # a different model for similarity: two jobs per shard again
    tiny_cfg["similarity"]["precision"] = "fp16"
    cfg = support.write_config(tmp_path / "config.yaml", tiny_cfg)
    r = support.snakemake(["-n", "-c1"], tmp_path, cfg)
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    assert stats["embed_images"] == n and stats["decode_images"] == n

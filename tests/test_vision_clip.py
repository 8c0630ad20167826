"""The clip vision adapter: contract, determinism, tag bounds, losses, shared embedding cache."""

from __future__ import annotations

import hashlib

import polars as pl
import pytest
import support

from benchmaker.formats import FacetModel, read_table, write_table
from benchmaker.losses import Losses, read_losses
from benchmaker.similarity import embed
from benchmaker.similarity.model import load_clip
from benchmaker.vision import run as vision_run
from benchmaker.vision.base import get_annotator
from benchmaker.vision.clip import ClipAnnotator, _bool_phrases


def images_table(corpus) -> pl.DataFrame:
    rows = []
    for p in sorted(x for x in corpus.rglob("*") if x.is_file()):
        data = p.read_bytes()
        rows.append({
            "image_id": str(p.relative_to(corpus)), "image_url": None, "mime_type": "image/jpeg", "width": 1,
            "height": 1, "file_size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "phash": None,
            "license": "CC0-1.0", "doi": None, "original_dataset_name": "tiny",
        })
    return pl.DataFrame(rows)


@pytest.fixture()
def fm() -> FacetModel:
    return FacetModel.from_config(support.TINY_FACETS)


def settings(tiny_clip, **kw):
    s = {"model": f"local-dir:{tiny_clip}", "pretrained": None, "device": "cpu", "batch_size": 8,
         "prompt_template": "a photo of {}.", "tag_threshold": 0.0, "num_workers": 0}
    s.update(kw)
    return s


def test_annotations_contract_and_determinism(tmp_path, tiny_corpus, tiny_clip, fm):
    imgs = images_table(tiny_corpus)
    ann = get_annotator("clip", facets=fm, settings=settings(tiny_clip), image_root=str(tiny_corpus),
                        cache_dir=str(tmp_path / ".cache" / "vision"))
    losses = Losses("vision")
    out = ann.annotate(imgs, losses)
    n_bad = sum(1 for i in imgs["image_id"] if i.startswith("broken/"))
    assert out.height == imgs.height - n_bad == 30
    write_table(out, "annotations", tmp_path / "ann.jsonl", facets=fm)  # validates the contract
    back = read_table("annotations", tmp_path / "ann.jsonl", facets=fm)
    assert back.height == 30
    assert sorted(r["item_id"] for r in losses.rows) == sorted(i for i in imgs["image_id"] if i.startswith("broken/"))
    assert {r["item_type"] for r in losses.rows} == {"image"}
    assert all(a.startswith("clip:") and "sha256:" in a for a in out["annotator"])
    for row in out.iter_rows(named=True):
        assert set(row["confidence"]) == {"color", "shape", "is_bright"}
        assert all(0.0 <= v <= 1.0 for v in row["confidence"].values())
        assert row["color"] in fm.taxonomy["color"] and row["shape"] in fm.taxonomy["shape"]
        assert fm.min_tags <= len(row["tags"]) <= fm.max_tags
        assert len(set(row["tags"])) == len(row["tags"]) and set(row["tags"]) <= set(fm.vocabulary)
        assert row["summary"].startswith("Zero-shot CLIP: color: ")
    # a second, independent annotator (cache hit) gives identical output
    again = ClipAnnotator(facets=fm, settings=settings(tiny_clip), image_root=str(tiny_corpus),
                          cache_dir=str(tmp_path / ".cache" / "vision")).annotate(imgs, Losses("vision"))
    assert again.equals(out)
    # ... and so does one without any cache
    fresh = ClipAnnotator(facets=fm, settings=settings(tiny_clip), image_root=str(tiny_corpus),
                          cache_dir=None).annotate(imgs, Losses("vision"))
    assert fresh.drop("confidence").equals(out.drop("confidence"))


def test_tag_threshold_bounds(tmp_path, tiny_corpus, tiny_clip, fm):
    imgs = images_table(tiny_corpus).filter(~pl.col("image_id").str.starts_with("broken/"))
    strict = ClipAnnotator(facets=fm, settings=settings(tiny_clip, tag_threshold=1.01), image_root=str(tiny_corpus),
                           cache_dir=None).annotate(imgs, Losses("vision"))
    loose = ClipAnnotator(facets=fm, settings=settings(tiny_clip, tag_threshold=0.0), image_root=str(tiny_corpus),
                          cache_dir=None).annotate(imgs, Losses("vision"))
    assert set(strict["tags"].list.len()) == {fm.min_tags}
    assert set(loose["tags"].list.len()) == {fm.max_tags}
    # the top tags agree: extra tags only ever extend the list
    for a, b in zip(strict["tags"], loose["tags"]):
        assert b.to_list()[: fm.min_tags] == a.to_list()
    mid = ClipAnnotator(facets=fm, settings=settings(tiny_clip, tag_threshold=0.9), image_root=str(tiny_corpus),
                        cache_dir=None).annotate(imgs, Losses("vision"))
    assert all(fm.min_tags <= n <= fm.max_tags for n in mid["tags"].list.len())


def test_vision_stage_shares_embedding_cache_with_embed_images(tmp_path, tiny_corpus, tiny_clip, fm):
    imgs = images_table(tiny_corpus)
    shard = tmp_path / "shard.jsonl"
    write_table(imgs, "images", shard)
    cache_root = tmp_path / "results" / ".cache"
    vision_run(images=str(shard), annotations=str(tmp_path / "ann.jsonl"), losses=str(tmp_path / "vl.jsonl"),
               adapter="clip", settings=settings(tiny_clip), facets=support.TINY_FACETS,
               image_root=str(tiny_corpus), columns={}, cache_dir=str(cache_root / "vision"))
    assert read_losses(tmp_path / "vl.jsonl").height == 3
    clip = load_clip(f"local-dir:{tiny_clip}", None, device="cpu")
    before = clip.encode_image_calls
    embed.run_images(images=str(shard), embeddings=str(tmp_path / "e.parquet"), losses=str(tmp_path / "el.jsonl"),
                     model={"model": f"local-dir:{tiny_clip}", "pretrained": None, "precision": "auto"},
                     runtime={"device": "cpu", "batch_size": 8, "num_workers": 0},
                     cache_dir=str(cache_root / "embeddings"), image_root=str(tiny_corpus))
    # only the 3 undecodable images were tried again (one batch), the 30 good ones came from the cache
    assert clip.encode_image_calls == before
    assert embed.read_embeddings(tmp_path / "e.parquet")[0].height == 30


def test_fallback_values_and_bool_phrases(tmp_path, tiny_corpus, tiny_clip):
    assert _bool_phrases("is_bright") == ("bright", "not bright")
    assert _bool_phrases("flame_visible") == ("flame visible", "no flame visible")
    facets = FacetModel(taxonomy={"only": ["unknown"], "color": ["red", "other"]}, boolean=[],
                        vocabulary=["red"], min_tags=3, max_tags=5)
    imgs = images_table(tiny_corpus).filter(pl.col("image_id").str.starts_with("red/"))
    out = ClipAnnotator(facets=facets, settings=settings(tiny_clip), image_root=str(tiny_corpus),
                        cache_dir=None).annotate(imgs, Losses("vision"))
    assert set(out["only"]) == {"unknown"}
    assert set(out["color"]) == {"red"}  # a single real value always wins (p = 1)
    assert set(out["tags"].list.len()) == {1}  # min capped by the vocabulary size
    with pytest.raises(ValueError, match="prompt_template"):
        ClipAnnotator(facets=facets, settings=settings(tiny_clip, prompt_template="a {nope}"),
                      image_root=str(tiny_corpus), cache_dir=None)

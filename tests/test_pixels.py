"""The pixel store (rule decode_images): images decoded once on a CPU job; the embed job reads only
the store, and an embedding is the same bits whatever store, grouping or pass position gave it."""

from __future__ import annotations

import shutil

import numpy as np
import polars as pl
import pytest
from test_similarity import images_table

from benchmaker.formats import FormatError, write_table
from benchmaker.losses import read_losses
from benchmaker.similarity import decode, embed, pixels
from benchmaker.similarity.model import load_clip


@pytest.fixture()
def shards(tmp_path, tiny_corpus, tiny_clip):
    """Three shards over a private copy of the corpus (duplicates across shards, two bad files)."""
    corpus = tmp_path / "images"
    shutil.copytree(tiny_corpus, corpus)
    ids = sorted(str(p.relative_to(corpus)) for p in corpus.rglob("*") if p.is_file() and "broken" not in p.parts)
    ids = ids[:14] + ["broken/truncated.jpg", "broken/not_an_image.jpg"]
    imgs = images_table(corpus, ids)
    files = []
    for k, part in enumerate((imgs[0:6], imgs[6:11], imgs[11:])):
        files.append(tmp_path / f"shards/{k:05d}.jsonl")
        files[-1].parent.mkdir(exist_ok=True)
        write_table(part, "images", files[-1])
    model = {"model": f"local-dir:{tiny_clip}", "pretrained": None, "precision": "fp32"}
    return dict(tmp=tmp_path, corpus=corpus, files=files, model=model, ids=ids)


def _decode(s, k: int) -> tuple[str, str]:
    npy, idx = s["tmp"] / f"pixels/{k:05d}.npy", s["tmp"] / f"pixels/{k:05d}.parquet"
    decode.run_shard(images=str(s["files"][k]), pixels=str(npy), index=str(idx), model=s["model"],
                     image_root=str(s["corpus"]), threads=1)
    return str(npy), str(idx)


def _embed(s, name: str, shard_ks: list[int], stores=None, cache=None) -> pl.DataFrame:
    out = s["tmp"] / f"{name}.parquet"
    kw = {}
    if stores is not None:
        kw = {"pixels": [stores[k][0] for k in shard_ks], "pixel_index": [stores[k][1] for k in shard_ks]}
    embed.run_images(images=[str(s["files"][k]) for k in shard_ks], embeddings=str(out),
                     losses=str(s["tmp"] / f"{name}.losses.jsonl"), model=s["model"],
                     runtime={"device": "cpu", "batch_size": 3, "num_workers": 0},
                     cache_dir=str(cache) if cache else None, image_root=str(s["corpus"]), **kw)
    return embed.read_embeddings(out, kind="image")[0]


def _vectors(df: pl.DataFrame) -> dict[str, bytes]:
    return {i: np.asarray(e, dtype=np.float32).tobytes() for i, e in zip(df["image_id"], df["embedding"].to_list())}


def test_embeddings_are_built_from_the_store_with_the_image_files_unreadable(shards):
    """decode_images, then the originals are gone: embed_images still embeds every shard from the
    stores alone, with the same bits as decoding the files, and the same losses."""
    s = shards
    from_files = _vectors(_embed(s, "files", [0, 1, 2]))
    stores = [_decode(s, k) for k in range(3)]
    shutil.rmtree(s["corpus"])  # no image file left to open
    grouped = _embed(s, "store", [0, 1, 2], stores)
    assert _vectors(grouped) == from_files and len(from_files) == 14
    lost = read_losses(s["tmp"] / "store.losses.jsonl")
    assert sorted(lost["item_id"].to_list()) == ["broken/not_an_image.jpg", "broken/truncated.jpg"]
    assert set(lost["reason"]) == {"image_decode_error"}


def test_same_bits_whatever_store_grouping_pass_position_or_cache(shards, tmp_path, monkeypatch):
    """One image, embedded per shard, in a group of shards, from a store whose other rows differ (so
    it sits at another position of another forward pass), and from the cache: the same bits."""
    s = shards
    stores = [_decode(s, k) for k in range(3)]
    grouped = _vectors(_embed(s, "g012", [0, 1, 2], stores))
    single = {}
    for k in (2, 0, 1):
        single |= _vectors(_embed(s, f"s{k}", [k], stores))
    assert single == grouped
    # the shard's images in reverse order: every image at another pass position beside other rows
    rev = s["tmp"] / "shards/rev.jsonl"
    write_table(pl.read_ndjson(s["files"][0])[::-1], "images", rev)
    s["files"].append(rev)
    stores.append(_decode(s, 3))
    assert np.load(stores[3][0])[0].tobytes() != np.load(stores[0][0])[0].tobytes()
    assert _vectors(_embed(s, "rev", [3], stores)) == {k: v for k, v in grouped.items()
                                                       if k in set(pl.read_ndjson(rev)["image_id"])}
    cache = tmp_path / "cache"
    _embed(s, "warm", [1], stores, cache=cache)
    monkeypatch.setattr(embed, "iter_store_batches", lambda *a, **k: iter(()))  # nothing encoded now
    assert _vectors(_embed(s, "cached", [1], stores, cache=cache)) == single_of(grouped, s, 1)


def single_of(vectors: dict[str, bytes], s, k: int) -> dict[str, bytes]:
    ids = set(pl.read_ndjson(s["files"][k])["image_id"])
    return {i: v for i, v in vectors.items() if i in ids}


def test_store_of_another_model_input_is_refused(shards, tiny_clip):
    s = shards
    npy, idx = _decode(s, 0)
    clip = load_clip(f"local-dir:{tiny_clip}", None, device="cpu", precision="fp32")
    store = pixels.PixelStore(npy, idx)
    assert store.spec_id == pixels.PixelSpec.from_cfg(clip.preprocess_cfg).id
    assert store.pixels.shape[1:] == (3, *clip.image_size)
    with pytest.raises(FormatError, match="rerun decode_images"):
        pixels.check_spec(clip, store.spec_id.replace("bicubic", "bilinear"), idx)
    with pytest.raises(FormatError, match="none of the pixel stores"):
        pixels.store_rows([store], ["0" * 64])


def test_pixel_spec_of_named_models_without_building_them():
    """ViT-B-32's 224 px bicubic; a SigLIP's own size and resize mode from its pretrained config."""
    assert pixels.pixel_spec("ViT-B-32", "laion2b_s34b_b79k") == pixels.PixelSpec((224, 224))
    big = pixels.pixel_spec("ViT-L-14-336", "openai")
    assert big.size == (336, 336)

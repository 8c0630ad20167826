"""The embedding cache's index: lookups read only the rows asked for; old caches are migrated."""

import json

import numpy as np
import polars as pl

from benchmaker.similarity import cache as cache_mod
from benchmaker.similarity.cache import EmbeddingCache


def _cache(root, dim=4):
    return EmbeddingCache(root, model_id="m|w|p", cache_key="m-123", dim=dim)


def _vec(i, dim=4):
    return np.full(dim, float(i), np.float32)


def test_lookup_reads_only_wanted_rows_through_the_index(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_mod, "REINDEX_EVERY", 3)
    c = _cache(tmp_path)
    for p in range(10):  # 10 parts of 100 rows
        shas = [f"{p:02d}{r:062d}" for r in range(100)]
        c.put(shas, np.stack([_vec(p * 100 + r) for r in range(100)]))
    c = _cache(tmp_path)
    want = [f"{p:02d}{r:062d}" for p, r in [(0, 5), (7, 99), (3, 0)]] + ["f" * 64]
    got = c.lookup(want)
    assert got["sha256"].to_list() == want[:3]  # in the order asked, misses left out
    assert [v[0] for v in got["embedding"].to_list()] == [5.0, 799.0, 300.0]
    assert c.rows_read == 3 and c.hits == 3 and c.misses == 1
    # more than REINDEX_EVERY unindexed parts: the lookup wrote an index covering all 10
    (meta,) = list((tmp_path / "m-123").glob("index-*.json"))
    assert len(np.load(meta.with_suffix(".npy"))) == 1000
    # new parts after the index are found through their own keys; the next reindex covers them
    c.put(["new"], _vec(-1)[None])
    assert c.lookup(["new", want[0]])["sha256"].to_list() == ["new", want[0]]
    for i in range(4):
        c.put([f"x{i}"], _vec(i)[None])
    c2 = _cache(tmp_path)
    assert c2.lookup([f"x{i}" for i in range(4)]).height == 4
    assert len(np.load(max((tmp_path / "m-123").glob("index-*.npy")))) == 1005


def test_duplicates_first_part_wins_and_hash_collisions_are_not_hits(tmp_path, monkeypatch):
    c = _cache(tmp_path)
    c.put(["a", "b"], np.stack([_vec(1), _vec(2)]))
    c.put(["a"], _vec(9)[None])
    c.reindex()
    assert c.lookup(["a"])["embedding"].to_list()[0][0] == 1.0
    # every key hashes to the same value: the full key decides
    monkeypatch.setattr(cache_mod, "key_hashes", lambda keys: np.zeros(len(list(keys)), np.uint64))
    c2 = _cache(tmp_path / "collide")
    c2.put(["a", "b"], np.stack([_vec(1), _vec(2)]))
    c2.reindex()
    got = c2.lookup(["b", "zz"])
    assert got["sha256"].to_list() == ["b"] and got["embedding"].to_list()[0][0] == 2.0


def test_format1_parquet_cache_is_migrated(tmp_path):
    d = tmp_path / "m-123"
    d.mkdir()
    (d / "model.json").write_text('{"model_id": "m|w|p", "dim": 4, "format": 1}\n')
    pl.DataFrame({"sha256": ["s1", "s2"],
                  "embedding": pl.Series(np.stack([_vec(1), _vec(2)]), dtype=pl.Array(pl.Float32, 4))}
                 ).write_parquet(d / "part-1-1-abc.parquet")
    c = _cache(tmp_path)
    got = c.lookup(["s2", "s1"])
    assert got["sha256"].to_list() == ["s2", "s1"] and got["embedding"].to_list()[0] == [2.0] * 4
    assert not list(d.glob("*.parquet")) and c.parts() == ["part-1-1-abc"]
    assert json.loads((d / "model.json").read_text())["format"] == 2


def test_unreadable_part_is_skipped(tmp_path):
    c = _cache(tmp_path)
    c.put(["a"], _vec(1)[None])
    c.put(["b"], _vec(2)[None])
    bad = c.parts()[0]
    (tmp_path / "m-123" / f"{bad}.emb.npy").write_bytes(b"garbage")
    got = c.lookup(["a", "b"])
    assert got["sha256"].to_list() == ["b"]

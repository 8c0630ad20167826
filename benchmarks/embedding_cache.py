"""Embedding cache lookup time vs cache size: one shard's lookup (1,000 sha256) in a cache of N rows.

    PYTHONPATH=src python benchmarks/embedding_cache.py [N ...]     (default 200000 600000)

Prints, per N: the time of a lookup while the parts are unindexed-but-few, after the index exists,
and the rows read (the lookup touches only the rows asked for). 512-d float32, parts of 1,000 rows
(one per shard job, as embed_images writes them).
"""

import hashlib
import sys
import tempfile
import time

import numpy as np

from benchmaker.similarity.cache import EmbeddingCache


def sha(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def main(sizes):
    dim, part = 512, 1000
    rng = np.random.default_rng(0)
    for n in sizes:
        with tempfile.TemporaryDirectory() as d:
            c = EmbeddingCache(d, model_id="bench", cache_key="bench", dim=dim)
            t = time.perf_counter()
            for s in range(0, n, part):
                c.put([sha(i) for i in range(s, s + part)], rng.standard_normal((part, dim), dtype=np.float32))
            t_put = time.perf_counter() - t
            t = time.perf_counter()
            c.reindex()
            t_idx = time.perf_counter() - t
            want = [sha(int(i)) for i in rng.choice(n, 1000, replace=False)]
            for label in ("first", "second"):
                c2 = EmbeddingCache(d, model_id="bench", cache_key="bench", dim=dim)
                t = time.perf_counter()
                got = c2.lookup(want)
                dt = time.perf_counter() - t
                print(f"cache rows {n:>8}: lookup of 1000 keys ({label}) {dt:.3f} s, hits {got.height}, "
                      f"rows read {c2.rows_read}")
            print(f"cache rows {n:>8}: writing {n // part} parts {t_put:.1f} s, full reindex {t_idx:.2f} s")


if __name__ == "__main__":
    main([int(x) for x in sys.argv[1:]] or [200_000, 600_000])

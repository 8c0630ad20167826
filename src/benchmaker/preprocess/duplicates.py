"""Duplicate groups over the whole corpus: byte-identical (same sha256) and perceptual near-duplicates
(pHash Hamming distance <= ``preprocess.near_duplicate_threshold``), joined transitively.

Decided once per corpus, in ``merge_images`` (the shards' pHashes are computed by the per-shard
preprocess jobs; a group can span shards, so no shard can decide it). ``duplicate_group`` of an image
is the image_id of the first member of its group (image ids sorted): a singleton's group is its own id,
so ``duplicate_group == image_id`` means "no duplicate" and the column is stable whatever the shard
count or job order.

Near pairs are found without comparing all pairs (multi-index hashing, Norouzi et al. 2012): the 64
pHash bits are cut into ``m`` bit ranges; two hashes within distance ``t`` differ in at most ``t`` ranges,
so they agree exactly on at least ``r = m - t`` of them (pigeonhole). For each of the C(m, r) choices of
``r`` ranges the hashes are sorted by those bits; only hashes equal on them are compared (vectorised
XOR + popcount). Every pair within ``t`` is found; ``m`` is chosen to minimise the expected work for
the corpus size. Groups are the connected components (scipy.sparse.csgraph) of both kinds of links.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import polars as pl

from ..settings_schema import default

__all__ = ["duplicate_groups", "group_counts", "phash_codes", "DEFAULT_THRESHOLD"]

# pHash bits, as plan.phash_max_distance; resized or re-encoded copies measured 0-4 bits away, distinct
# photos of the example corpus 18 or more
DEFAULT_THRESHOLD = default("preprocess.near_duplicate_threshold")
_MAX_PAIRS_PER_STEP = 4_000_000  # candidate pairs compared per vectorised step (memory: ~100 MB)


def phash_codes(phash: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 codes, known mask) of 16-hex-digit pHash strings (null or malformed = unknown)."""
    ph = phash.cast(pl.String).str.to_integer(base=16, dtype=pl.UInt64, strict=False)
    return ph.fill_null(0).to_numpy().astype(np.uint64), ph.is_not_null().to_numpy()


def _ranges(m: int) -> list[tuple[int, int]]:
    """(first bit, width) of ``m`` contiguous, nearly equal ranges of a 64-bit hash."""
    bounds = [round(64 * k / m) for k in range(m + 1)]
    return [(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:])]


def _key(codes: np.ndarray, ranges: list[tuple[int, int]]) -> np.ndarray:
    """The bits of ``ranges`` packed side by side, in the narrowest unsigned dtype (a 16-bit key is
    sorted by numpy's radix sort)."""
    key = np.zeros(codes.size, dtype=np.uint64)
    shift = 0
    for lo, width in ranges:
        key |= ((codes >> np.uint64(lo)) & np.uint64((1 << width) - 1)) << np.uint64(shift)
        shift += width
    return key.astype(np.uint16 if shift <= 16 else np.uint32 if shift <= 32 else np.uint64)


def _plan(n: int, t: int) -> tuple[int, int]:
    """(m, r) with the least expected work for ``n`` uniformly spread hashes: C(m, r) sorts plus the
    candidate pairs, about n^2 / 2 / 2^(64 r / m) per choice of ranges."""
    best = None
    for m in range(t + 1, 65):
        r = m - t
        tables = math.comb(m, r)
        if tables > 2000:
            break
        cost = tables * (n * max(1.0, math.log2(max(n, 2))) + n * n / 2 / 2 ** (64 * r / m))
        if best is None or cost < best[0]:
            best = (cost, m, r)
    return (best[1], best[2]) if best else (t + 1, 1)


def _near_pairs(codes: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i < j) into ``codes`` whose Hamming distance is at most ``t``."""
    n = codes.size
    if n < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    m, r = _plan(n, t)
    ranges = _ranges(m)
    out_i, out_j = [], []
    for chosen in itertools.combinations(range(m), r):
        key = _key(codes, [ranges[c] for c in chosen])
        order = np.argsort(key, kind="stable")
        ks = key[order]
        cs = codes[order]  # the hashes in key order: each step compares two slices of one array
        # run boundaries of equal keys; ends[k] = one past the last position of k's run
        starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
        lengths = np.diff(np.r_[starts, n])
        if lengths.max() < 2:
            continue
        ends = np.repeat(starts + lengths, lengths)
        active = np.flatnonzero(ends - np.arange(n) > 1)  # positions with a later member in their run
        d = 1
        while active.size:
            for lo in range(0, active.size, _MAX_PAIRS_PER_STEP):
                k = active[lo:lo + _MAX_PAIRS_PER_STEP]
                near = np.bitwise_count(cs[k] ^ cs[k + d]) <= t
                if near.any():
                    a, b = order[k[near]], order[k[near] + d]
                    out_i.append(np.minimum(a, b))
                    out_j.append(np.maximum(a, b))
            d += 1
            active = active[ends[active] - active > d]
    if not out_i:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(out_i).astype(np.int64), np.concatenate(out_j).astype(np.int64)


def duplicate_groups(df: pl.DataFrame, threshold: int | None = DEFAULT_THRESHOLD) -> pl.Series:
    """``duplicate_group`` for the rows of ``df`` (``image_id``, ``sha256``, ``phash``), in row order.

    ``threshold``: the largest pHash Hamming distance (bits of 64) that makes two images
    near-duplicates; ``None`` or negative: byte-identical copies only. Images without a pHash join
    groups by sha256 only."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = df.height
    ids = df["image_id"]
    if n == 0:
        return pl.Series("duplicate_group", [], dtype=pl.String)
    rows, cols = [], []
    # byte-identical: link each member of a sha256 group to the group's first row
    sha = df.select(pl.col("sha256").rank("dense").cast(pl.Int64) - 1)["sha256"].to_numpy()
    order = np.argsort(sha, kind="stable")
    first = np.r_[True, sha[order][1:] != sha[order][:-1]]
    head = order[np.maximum.accumulate(np.where(first, np.arange(n), 0))]
    rows.append(head[~first])
    cols.append(order[~first])
    if threshold is not None and threshold >= 0 and "phash" in df.columns:
        codes, known = phash_codes(df["phash"])
        pos = np.flatnonzero(known)
        i, j = _near_pairs(codes[pos], int(threshold))
        rows.append(pos[i])
        cols.append(pos[j])
    r, c = np.concatenate(rows), np.concatenate(cols)
    graph = coo_matrix((np.ones(r.size, dtype=np.int8), (r, c)), shape=(n, n)).tocsr()
    _, label = connected_components(graph, directed=False)
    # the group's name: the smallest image_id among its members
    rank = ids.rank("ordinal").cast(pl.Int64).to_numpy() - 1   # position in sorted id order
    best = np.full(label.max() + 1, n, dtype=np.int64)
    np.minimum.at(best, label, rank)
    by_rank = np.argsort(rank)
    return pl.Series("duplicate_group", ids.to_numpy()[by_rank[best[label]]], dtype=pl.String)


def group_counts(groups: pl.Series) -> dict[str, int]:
    """``groups`` (groups with more than one member), ``images_in_groups`` and ``extra_copies`` (images
    beyond the first of each group) of a ``duplicate_group`` column."""
    sizes = groups.value_counts(name="n").filter(pl.col("n") > 1)["n"]
    return {"groups": int(sizes.len()), "images_in_groups": int(sizes.sum() or 0),
            "extra_copies": int((sizes.sum() or 0) - sizes.len())}

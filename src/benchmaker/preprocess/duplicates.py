"""Duplicate groups over the whole corpus: byte-identical (same sha256) and perceptual near-duplicates,
joined transitively. Two images are near-duplicates when

1. their pHashes (grey levels, 64 bits) differ in at most ``preprocess.near_duplicate_threshold`` bits,
   and
2. their colour signatures agree (benchmaker.preprocess.inspect.color_signature_of: the mean CIELAB
   colour of a 4 x 4 grid and the lightness deviation): the *colour distance*, the larger of the
   largest CIE76 colour difference of a cell and the difference of the lightness deviations (both in
   L* units, 0-100), is at most :data:`COLOR_MAX`; and at most :data:`FLAT_COLOR_MAX` when either image
   is *near-uniform* (lightness deviation below :data:`FLAT_SPREAD`).

pHash works on grey levels, so a red and a green version of one drawing, or a cold and a warm version
of one photo, hash alike: the colour signature tells them apart. An image that is (nearly) uniform at
the 32 x 32 grey size pHash uses has a degenerate hash (``8000000000000000``, only the DC bit), whatever
it shows: a blank stamp, a faint wallpaper, fine stripes all hash alike, so for them pHash says
nothing and the colour signature must agree closely. An image without a colour signature (an
images.jsonl row written before it existed, or no decode) joins groups by its bytes only. The
thresholds were measured on the example corpus (docs/preprocess.md, "Duplicate groups").

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

__all__ = ["duplicate_groups", "group_counts", "phash_codes", "signatures", "color_distance", "DEFAULT_THRESHOLD",
           "COLOR_MAX", "FLAT_COLOR_MAX", "FLAT_SPREAD"]

# pHash bits, the one near-duplicate threshold (the planner uses the groups); resized or re-encoded copies
# of the example's photos measured 0-2 bits away, distinct photos 20 or more (benchmarks/duplicate_signals.py)
DEFAULT_THRESHOLD = default("preprocess.near_duplicate_threshold")
# colour distances, in L* units (0-100; CIE76 colour difference, 1 = about the smallest visible step):
# resized and re-encoded copies of the example's photos are within 1.5, copies cropped by 1 % within 4.4;
# colour variants of coloured photos 12 or more (benchmarks/duplicate_signals.py, docs/preprocess.md)
COLOR_MAX = 8.0
FLAT_SPREAD = 4.0      # lightness deviation below which an image is near-uniform (its pHash says nothing)
FLAT_COLOR_MAX = 1.0   # near-uniform images: the colour signatures must be this close
_SIG_CELLS = 16        # SIGNATURE_GRID ** 2 (benchmaker.preprocess.inspect)
_L_SCALE = 100.0 / 255.0  # PIL's LAB lightness byte -> L*
_MAX_PAIRS_PER_STEP = 4_000_000  # candidate pairs compared per vectorised step (memory: ~100 MB)


def phash_codes(phash: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 codes, known mask) of 16-hex-digit pHash strings (null or malformed = unknown)."""
    ph = phash.cast(pl.String).str.to_integer(base=16, dtype=pl.UInt64, strict=False)
    return ph.fill_null(0).to_numpy().astype(np.uint64), ph.is_not_null().to_numpy()


def signatures(sig: pl.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cells (n, 16, 3) float: L*, a*, b* of each cell; spread (n,) float: lightness deviation in L*
    units; known mask) of colour signature hex strings (null or malformed = unknown)."""
    n = sig.len()
    width = 2 * (_SIG_CELLS * 3 + 1)
    known = (sig.cast(pl.String).str.len_chars() == width).fill_null(False).to_numpy()
    raw = np.zeros((n, _SIG_CELLS * 3 + 1), dtype=np.uint8)
    idx = np.flatnonzero(known)
    if idx.size:
        try:
            data = b"".join(bytes.fromhex(x) for x in sig.gather(idx).to_list())
        except ValueError:   # not hex: each row on its own
            for i, x in zip(idx, sig.gather(idx).to_list()):
                try:
                    raw[i] = np.frombuffer(bytes.fromhex(x), dtype=np.uint8)
                except ValueError:
                    known[i] = False
        else:
            raw[idx] = np.frombuffer(data, dtype=np.uint8).reshape(idx.size, -1)
    cells = raw[:, :-1].reshape(n, _SIG_CELLS, 3)
    lab = np.empty(cells.shape, dtype=np.float64)
    lab[..., 0] = cells[..., 0] * _L_SCALE
    lab[..., 1:] = cells[..., 1:].view(np.int8)
    return lab, raw[:, -1] * _L_SCALE, known


def color_distance(lab: np.ndarray, spread: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """The colour distance of the pairs (i, j): max(largest CIE76 difference of a cell, difference of
    the lightness deviations), in L* units. The largest cell, not the mean: a variant that recolours
    one part of the image (one stripe of a flag) is as far as its most changed part."""
    de = np.sqrt(((lab[i] - lab[j]) ** 2).sum(axis=2)).max(axis=1)
    return np.maximum(de, np.abs(spread[i] - spread[j]))


def _colour_agrees(df: pl.DataFrame, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Which near pairs (by pHash) the colour signatures confirm (module docstring, rule 2)."""
    if "color_signature" not in df.columns:
        return np.zeros(i.size, dtype=bool)
    lab, spread, known = signatures(df["color_signature"])
    ok = known[i] & known[j]
    dist = color_distance(lab, spread, i, j)
    flat = (spread[i] < FLAT_SPREAD) | (spread[j] < FLAT_SPREAD)
    return ok & (dist <= np.where(flat, FLAT_COLOR_MAX, COLOR_MAX))


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
    near-duplicates, when their colour signatures (``color_signature``) agree too; ``None`` or
    negative: byte-identical copies only. Images without a pHash or a colour signature join groups by
    sha256 only."""
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
        keep = _colour_agrees(df, pos[i], pos[j])
        rows.append(pos[i][keep])
        cols.append(pos[j][keep])
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

"""The planner's in-memory index: facet codes, facet-key buckets, tag sets, duplicate fingerprints.

Everything is keyed by the position of an image in the *id-sorted* annotation table, so the index
(and therefore the plan) does not depend on the order of the annotation file or on how many shards
produced it. Built once in O(N log N) with polars/numpy; per-query work then only touches bounded
samples of the buckets (see ``Index.window``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import polars as pl

from ..formats import FacetModel

__all__ = ["Index", "Buckets", "build_index"]


@dataclass
class Buckets:
    """Images grouped by the values of a tuple of facets, each group in a fixed random order."""

    facets: tuple[int, ...]           # facet column numbers in Index.codes
    radix: np.ndarray                 # multipliers for the mixed-radix key
    members: np.ndarray               # image positions, grouped by key, random order within a key
    spans: dict[int, tuple[int, int]]  # key -> (start, end) in members

    def key_of(self, profile_codes: np.ndarray) -> int:
        return int((profile_codes[list(self.facets)].astype(np.int64) * self.radix).sum())

    def get(self, profile_codes: np.ndarray) -> np.ndarray:
        span = self.spans.get(self.key_of(profile_codes))
        if span is None:
            return members_empty()
        return self.members[span[0]:span[1]]


def members_empty() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


@dataclass
class Index:
    ids: list[str]                    # image ids, sorted
    facet_names: list[str]            # all facets (taxonomy then boolean)
    values: list[list[str]]           # per facet: sorted distinct values as strings (code -> value)
    typed: list[dict[str, object]]    # per facet: string value -> original typed value (bool for booleans)
    codes: np.ndarray                 # (N, F) int32 facet codes
    tag_vocab: list[str]              # distinct tags, sorted
    tag_bits: np.ndarray | None       # (N, W) uint64 tag bitsets when the vocabulary is <= MAX_BITSET_TAGS
    tag_flat: np.ndarray              # otherwise CSR of distinct tag codes (int32) ...
    tag_start: np.ndarray             # (N,) int64
    tag_len: np.ndarray               # (N,) int64 number of distinct tags
    sha_code: np.ndarray              # (N,) uint64 hash of sha256
    sha_ok: np.ndarray                # (N,) bool, sha256 known
    phash: np.ndarray                 # (N,) uint64
    phash_ok: np.ndarray              # (N,) bool
    perm_rank: np.ndarray             # (N,) random rank of each image (fixed by the RNG)
    global_order: np.ndarray          # image positions in random order (the "all images" bucket)
    _buckets: dict[tuple[int, ...], Buckets] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.ids)

    def col(self, facet: str) -> int:
        return self.facet_names.index(facet)

    def buckets(self, facets: Sequence[int]) -> Buckets:
        key = tuple(facets)
        if key not in self._buckets:
            self._buckets[key] = self._make_buckets(key)
        return self._buckets[key]

    def _make_buckets(self, facets: tuple[int, ...]) -> Buckets:
        n = self.n
        radix = np.ones(len(facets), dtype=np.int64)
        mult = 1
        for i in range(len(facets) - 1, -1, -1):
            radix[i] = mult
            mult *= max(1, len(self.values[facets[i]]))
            if mult > 2**62:
                raise ValueError("too many facet combinations for a bucket key")
        if facets:
            key = (self.codes[:, list(facets)].astype(np.int64) * radix).sum(axis=1)
        else:
            key = np.zeros(n, dtype=np.int64)
        order = np.lexsort((self.perm_rank, key))
        skey = key[order]
        uniq, starts = np.unique(skey, return_index=True)
        ends = np.append(starts[1:], n)
        spans = {int(k): (int(s), int(e)) for k, s, e in zip(uniq, starts, ends)}
        return Buckets(facets=facets, radix=radix, members=order.astype(np.int64), spans=spans)

    def seed_set(self, seeds: np.ndarray) -> tuple[np.ndarray, int]:
        """The union of the seeds' tags: (bitset row or boolean vocabulary mask, number of tags)."""
        if self.tag_bits is not None:
            row = np.bitwise_or.reduce(self.tag_bits[seeds], axis=0)
            return row, int(np.bitwise_count(row).sum())
        mask = np.zeros(max(1, len(self.tag_vocab)), dtype=bool)
        for i in seeds:
            mask[self.tag_codes(int(i))] = True
        return mask, int(mask.sum())

    def jaccard(self, idx: np.ndarray, seed_set: tuple[np.ndarray, int]) -> np.ndarray:
        """Tag Jaccard of images ``idx`` with a seed tag set from ``seed_set``."""
        if idx.size == 0:
            return np.zeros(0, dtype=np.float64)
        ref, n_ref = seed_set
        lens = self.tag_len[idx]
        if self.tag_bits is not None:
            inter = np.bitwise_count(self.tag_bits[idx] & ref).sum(axis=1).astype(np.float64)
        else:
            total = int(lens.sum())
            inter = np.zeros(idx.size, dtype=np.float64)
            if total:
                seg = np.repeat(np.arange(idx.size), lens)
                offs = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
                pos = np.repeat(self.tag_start[idx], lens) + offs
                inter = np.bincount(seg, weights=ref[self.tag_flat[pos]], minlength=idx.size)
        union = lens + n_ref - inter
        return np.where(union > 0, inter / np.maximum(union, 1), 0.0)

    def tag_codes(self, i: int) -> np.ndarray:
        if self.tag_bits is not None:
            bits = np.unpackbits(self.tag_bits[i].view(np.uint8), bitorder="little")
            return np.flatnonzero(bits).astype(np.int32)
        s = self.tag_start[i]
        return self.tag_flat[s:s + self.tag_len[i]]

    def tags_of(self, i: int) -> list[str]:
        return [self.tag_vocab[t] for t in self.tag_codes(i)]


MAX_BITSET_TAGS = 1024


def build_index(ann: pl.DataFrame, images: pl.DataFrame, facets: FacetModel, rng: np.random.Generator) -> Index:
    """Index the annotated images; ``images`` supplies sha256/phash (missing ones disable the dup check)."""
    names = facets.names
    ann = ann.select(["image_id", "tags", *names]).sort("image_id")
    n = ann.height
    ids = ann["image_id"].to_list()

    codes = np.zeros((n, len(names)), dtype=np.int32)
    values: list[list[str]] = []
    typed: list[dict[str, object]] = []
    for j, f in enumerate(names):
        s = ann[f].cast(pl.String).fill_null("<null>")
        vals = sorted(s.unique().to_list())
        values.append(vals)
        codes[:, j] = s.cast(pl.Enum(vals)).to_physical().to_numpy()
        tmap: dict[str, object] = {}
        for v in vals:
            if f in facets.boolean:
                tmap[v] = {"true": True, "false": False}.get(v)
            else:
                tmap[v] = None if v == "<null>" else v
        typed.append(tmap)

    # tags: distinct tag codes per image, as bitsets (small vocabulary) or CSR (large vocabulary)
    long = (
        ann.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("i"), pl.col("tags"))
        .explode("tags").drop_nulls("tags")
    )
    ann = ann.drop("tags")
    vocab = sorted(long["tags"].unique().to_list())
    owner = long["i"].to_numpy()
    tcode = long["tags"].cast(pl.Enum(vocab)).to_physical().to_numpy().astype(np.int64)
    del long
    n_words = (len(vocab) + 63) // 64
    bits = None
    flat = np.zeros(0, dtype=np.int32)
    starts = np.zeros(n, dtype=np.int64)
    if len(vocab) <= MAX_BITSET_TAGS:
        bits = np.zeros(n * max(1, n_words), dtype=np.uint64)
        np.bitwise_or.at(bits, owner * max(1, n_words) + tcode // 64,
                         np.left_shift(np.uint64(1), (tcode % 64).astype(np.uint64)))
        bits = bits.reshape(n, max(1, n_words))
        lens = np.bitwise_count(bits).sum(axis=1).astype(np.int64)
    else:
        key = np.unique(owner * len(vocab) + tcode)
        owner, flat = key // len(vocab), (key % len(vocab)).astype(np.int32)
        lens = np.bincount(owner, minlength=n).astype(np.int64)
        starts = (np.cumsum(lens) - lens).astype(np.int64)
    del owner, tcode

    # duplicate fingerprints from images.jsonl
    fp = ann.select("image_id").join(
        images.select(
            "image_id",
            pl.col("sha256").cast(pl.String).alias("sha"),
            pl.col("phash").cast(pl.String).str.to_integer(base=16, dtype=pl.UInt64, strict=False).alias("ph"),
        ).unique("image_id", keep="first"),
        on="image_id", how="left", maintain_order="left",
    )
    sha_ok = fp["sha"].is_not_null().to_numpy()
    sha_code = fp["sha"].hash(seed=0).to_numpy().astype(np.uint64)
    ph = fp["ph"]
    phash_ok = ph.is_not_null().to_numpy()
    phash = ph.fill_null(0).to_numpy().astype(np.uint64)

    perm = rng.permutation(n).astype(np.int64)  # perm[k] = image at random position k
    perm_rank = np.empty(n, dtype=np.int64)
    perm_rank[perm] = np.arange(n)
    return Index(
        ids=ids, facet_names=list(names), values=values, typed=typed, codes=codes,
        tag_vocab=vocab, tag_bits=bits, tag_flat=flat, tag_start=starts, tag_len=lens,
        sha_code=sha_code, sha_ok=sha_ok, phash=phash, phash_ok=phash_ok, perm_rank=perm_rank,
        global_order=perm,
    )

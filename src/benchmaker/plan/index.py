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

__all__ = ["Index", "Buckets", "Postings", "build_index"]


@dataclass
class Buckets:
    """Images grouped by the values of a tuple of facets, each group in a fixed random order."""

    facets: tuple[int, ...]           # facet column numbers in Index.codes
    radix: np.ndarray | None          # multipliers for the mixed-radix key (None: too many combinations)
    members: np.ndarray               # image positions, grouped by key, random order within a key
    spans: dict[int, tuple[int, int]]  # key -> (start, end) in members (every image's key: Index.image_keys)
    row_keys: dict[tuple[int, ...], int] | None = None  # facet codes -> key when radix is None

    def key_of(self, profile_codes: np.ndarray) -> int:
        if self.radix is None:
            return self.row_keys.get(tuple(int(c) for c in profile_codes[list(self.facets)]), -1)
        codes = profile_codes.tolist()  # Python ints: the same sum, without numpy's per-call overhead
        return sum(codes[f] * r for f, r in zip(self.facets, self.radix.tolist()))

    def get(self, profile_codes: np.ndarray) -> np.ndarray:
        span = self.spans.get(self.key_of(profile_codes))
        if span is None:
            return members_empty()
        return self.members[span[0]:span[1]]


@dataclass
class Postings:
    """Per (bucket key, tag): the bucket's images carrying the tag, in the index's fixed random order."""

    facets: tuple[int, ...]
    n_tags: int
    keys: np.ndarray       # sorted bucket_key * n_tags + tag
    starts: np.ndarray     # len(keys) + 1 offsets into members
    members: np.ndarray    # image positions

    def lists(self, bucket_key: int, tags: np.ndarray) -> list[np.ndarray]:
        """The posting list of each tag in ``tags`` inside bucket ``bucket_key`` (empty when none)."""
        if tags.size == 0 or self.keys.size == 0:
            return [members_empty() for _ in tags]
        want = bucket_key * self.n_tags + tags
        pos = np.minimum(np.searchsorted(self.keys, want), self.keys.size - 1)
        hit = self.keys[pos] == want
        return [self.members[self.starts[p]:self.starts[p + 1]] if h else members_empty()
                for p, h in zip(pos.tolist(), hit.tolist())]


def members_empty() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


@dataclass
class Index:
    ids: list[str]                    # image ids, sorted
    facet_names: list[str]            # all facets (taxonomy then boolean)
    values: list[list[str]]           # per facet: sorted distinct values as strings (code -> value)
    typed: list[dict[str, object]]    # per facet: string value -> original typed value (bool for booleans)
    codes: np.ndarray                 # (N, F) int32 facet codes, column-major (``codes.T[f]`` contiguous)
    tag_vocab: list[str]              # distinct tags, sorted
    tag_bits: np.ndarray | None       # (N, W) uint64 tag bitsets when the vocabulary is <= MAX_BITSET_TAGS,
    #                                   stored word by word (column-major: ``tag_bits.T[w]`` is contiguous)
    tag_flat: np.ndarray              # otherwise CSR of distinct tag codes (int32) ...
    tag_start: np.ndarray             # (N,) int64
    tag_len: np.ndarray               # (N,) int64 number of distinct tags
    sha_code: np.ndarray              # (N,) uint64 hash of sha256
    sha_ok: np.ndarray                # (N,) bool, sha256 known
    group_code: np.ndarray            # (N,) uint64 hash of duplicate_group (images.jsonl)
    group_ok: np.ndarray              # (N,) bool, duplicate_group known
    perm_rank: np.ndarray             # (N,) random rank of each image (fixed by the RNG)
    global_order: np.ndarray          # image positions in random order (the "all images" bucket)
    _buckets: dict[tuple[int, ...], Buckets] = field(default_factory=dict)
    _postings: dict[tuple, "Postings"] = field(default_factory=dict)

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

    def image_keys(self, facets: Sequence[int]) -> np.ndarray:
        """(N,) the bucket key of every image for ``facets`` (computed when asked: not kept per bucket,
        as only the inverted index and the diversity cap need them)."""
        return self._bucket_keys(tuple(facets))[1]

    def _bucket_keys(self, facets: tuple[int, ...]) -> tuple[np.ndarray | None, np.ndarray,
                                                              dict[tuple[int, ...], int] | None]:
        """(radix, every image's key, the numbered combinations when radix is None)."""
        n = self.n
        radix: np.ndarray | None = np.ones(len(facets), dtype=np.int64)
        row_keys = None
        mult = 1
        for i in range(len(facets) - 1, -1, -1):
            radix[i] = mult
            mult *= max(1, len(self.values[facets[i]]))
            if mult > 2**62:  # too many combinations for a mixed-radix int64: number the ones present
                radix = None
                break
        if radix is None:
            rows, key = np.unique(self.codes[:, list(facets)], axis=0, return_inverse=True)
            key = key.reshape(-1).astype(np.int64)
            row_keys = {tuple(int(c) for c in r): k for k, r in enumerate(rows)}
        elif facets:
            key = np.zeros(n, dtype=np.int64)
            for f, r in zip(facets, radix.tolist()):  # one contiguous facet column at a time (column-major codes)
                key += self.codes[:, f].astype(np.int64) * r
        else:
            key = np.zeros(n, dtype=np.int64)
        return radix, key, row_keys

    def _make_buckets(self, facets: tuple[int, ...]) -> Buckets:
        n = self.n
        radix, key, row_keys = self._bucket_keys(facets)
        perm = self.global_order
        kp = key[perm]
        if kp.size and 0 <= kp.min() and kp.max() < 2**16:
            kp = kp.astype(np.uint16)  # numpy's stable sort of 16-bit ints is a radix sort: the same order, O(N)
        order = perm[np.argsort(kp, kind="stable")]  # by key, the fixed random order within a key
        del kp
        skey = key[order]
        starts = np.flatnonzero(np.append(True, skey[1:] != skey[:-1])) if n else np.zeros(0, np.int64)
        uniq = skey[starts]
        ends = np.append(starts[1:], n)
        spans = {int(k): (int(s), int(e)) for k, s, e in zip(uniq, starts, ends)}
        return Buckets(facets=facets, radix=radix, members=order, spans=spans, row_keys=row_keys)

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
            words = self.tag_bits.T  # (W, N), each word contiguous: one 1-D gather per word
            inter = np.zeros(idx.size, dtype=np.int64)  # exact counts: the same Jaccard as in float64
            for w in range(words.shape[0]):
                inter += np.bitwise_count(words[w].take(idx) & ref[w])
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

    def seed_tag_codes(self, seed_set: tuple[np.ndarray, int]) -> np.ndarray:
        """The tag codes of a seed tag set from ``seed_set``."""
        ref = seed_set[0]
        if self.tag_bits is not None:
            return np.flatnonzero(np.unpackbits(ref.view(np.uint8), bitorder="little")).astype(np.int64)
        return np.flatnonzero(ref).astype(np.int64)

    def tag_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(image position, tag code) of every distinct tag of every image (in no particular order)."""
        if self.tag_bits is None:
            return np.repeat(np.arange(self.n, dtype=np.int64), self.tag_len), self.tag_flat.astype(np.int64)
        owners, tags = [], []
        for w in range(self.tag_bits.shape[1]):  # one 64-tag word at a time keeps the temporaries small
            bits = np.unpackbits(self.tag_bits[:, w:w + 1].copy().view(np.uint8), axis=1, bitorder="little")
            o, t = np.nonzero(bits)
            owners.append(o.astype(np.int64))
            tags.append(t.astype(np.int64) + 64 * w)
        return np.concatenate(owners), np.concatenate(tags)

    def postings(self, facets: Sequence[int], pairs: tuple[np.ndarray, np.ndarray] | None = None) -> "Postings":
        """Inverted index: for each (facet-key bucket, tag), its images in the fixed random order.

        ``pairs`` = (image position, tag code) of every tag of every image (duplicates allowed); taken
        from the bitsets/CSR when not given.
        """
        key = tuple(facets)
        if key not in self._postings:
            self._postings[key] = self._make_postings(key, pairs)
        return self._postings[key]

    def _make_postings(self, facets: tuple[int, ...], pairs: tuple[np.ndarray, np.ndarray] | None) -> "Postings":
        b = self.buckets(facets)
        owner, tag = pairs if pairs is not None else self.tag_pairs()
        n, v = max(1, self.n), max(1, len(self.tag_vocab))
        n_keys = (max(b.spans) + 1) if b.spans else 1
        bkey = self.image_keys(facets)
        if n_keys * v * n < 2**62:  # one packed int64 sort: (bucket key, tag, random rank)
            step = 1 << 20  # in slices, in place: no N-sized temporaries besides the packed keys
            packed = np.empty(owner.size, dtype=np.int64)
            for a in range(0, owner.size, step):
                o = owner[a:a + step]
                packed[a:a + step] = (bkey[o] * v + tag[a:a + step]) * n + self.perm_rank[o]
            packed.sort()  # numpy's in-place sort: SIMD on x86, no copy
            if packed.size:
                dup = packed[1:] == packed[:-1]  # a tag listed twice
                if dup.any():
                    packed = packed[np.append(True, ~dup)]
                del dup
            members = np.empty(packed.size, dtype=np.int32 if self.n < 2**31 else np.int64)
            for a in range(0, packed.size, step):
                members[a:a + step] = self.global_order[packed[a:a + step] % n]
            comp = packed
            comp //= n
            del packed
        else:  # too many (bucket, tag, image) combinations for one int64: three-key sort
            order = np.lexsort((self.perm_rank[owner], tag, bkey[owner]))
            comp, members = (bkey[owner] * v + tag)[order], owner[order]
            if comp.size:
                keep = np.append(True, (comp[1:] != comp[:-1]) | (members[1:] != members[:-1]))
                comp, members = comp[keep], members[keep]
        starts = np.flatnonzero(np.append(True, comp[1:] != comp[:-1])) if comp.size else np.zeros(0, np.int64)
        keys = comp[starts]
        del comp
        return Postings(facets=facets, n_tags=v, keys=keys,
                        starts=np.append(starts, members.size).astype(np.int64),
                        members=members.astype(np.int32 if self.n < 2**31 else np.int64, copy=False))

    def tag_codes(self, i: int) -> np.ndarray:
        if self.tag_bits is not None:
            bits = np.unpackbits(np.ascontiguousarray(self.tag_bits[i]).view(np.uint8), bitorder="little")
            return np.flatnonzero(bits).astype(np.int32)
        s = self.tag_start[i]
        return self.tag_flat[s:s + self.tag_len[i]]


MAX_BITSET_TAGS = 1024


def _tag_codes(tags: pl.Series) -> tuple[list[str], np.ndarray]:
    """(the distinct tags sorted, each tag's code in that vocabulary as int32) from a Categorical
    series without nulls: the categorical codes present are counted and remapped, instead of a unique
    and an Enum cast over every tag (~0.35 s at 20M tags)."""
    phys = tags.to_physical().to_numpy()
    if not phys.size:
        return [], np.zeros(0, dtype=np.int32)
    first = np.full(int(phys.max()) + 1, -1, dtype=np.int64)
    first[phys[::-1]] = np.arange(phys.size - 1, -1, -1)  # the first row holding each code
    present = np.flatnonzero(first >= 0)
    names = tags.gather(first[present]).cast(pl.String).to_list()
    if len(set(names)) != len(names):  # two codes for one string (never with one categorical pool): by value
        vocab = sorted(set(names))
        return vocab, tags.cast(pl.String).cast(pl.Enum(vocab)).to_physical().to_numpy().astype(np.int32)
    order = sorted(range(len(names)), key=names.__getitem__)
    remap = np.zeros(first.size, dtype=np.int32)
    remap[present[order]] = np.arange(len(order), dtype=np.int32)
    return [names[k] for k in order], remap[phys]


def _facet_codes(ann: pl.DataFrame, facets: FacetModel, rank: np.ndarray):
    """Each facet's value codes of every image (in image-id order, column-major), its sorted values
    (``<null>`` for a missing one) and each value's typed form (a boolean facet's True/False)."""
    names = facets.names
    n = ann.height
    codes = np.zeros((n, len(names)), dtype=np.int32, order="F")  # column-major: one facet's codes contiguous
    values: list[list[str]] = []
    typed: list[dict[str, object]] = []
    for j, f in enumerate(names):
        s = ann[f].cast(pl.String).fill_null("<null>")
        vals = sorted(s.unique().to_list())
        values.append(vals)
        codes[rank, j] = s.cast(pl.Enum(vals)).to_physical().to_numpy()
        tmap: dict[str, object] = {}
        for v in vals:
            if f in facets.boolean:
                tmap[v] = {"true": True, "false": False}.get(v)
            else:
                tmap[v] = None if v == "<null>" else v
        typed.append(tmap)
    return codes, values, typed


def _fingerprints(images: pl.DataFrame, sorted_ids: pl.Series):
    """The duplicate fingerprints of the annotated images (in id order) from images.jsonl: sha256 and
    duplicate group, hashed, each with whether it is known."""
    n = sorted_ids.len()
    fp = images.select(
        "image_id",
        pl.col("sha256").cast(pl.String).alias("sha"),
        (pl.col("duplicate_group") if "duplicate_group" in images.columns else pl.lit(None))
        .cast(pl.String).alias("group"),
    )
    if not (fp.height == n and fp["image_id"].cast(pl.String).equals(sorted_ids)):
        # images.jsonl does not list exactly the annotated images in id order: look them up (when it
        # does, as a run's sorted files do, its rows are already the annotations' sorted rows)
        fp = pl.DataFrame({"image_id": sorted_ids}).join(fp.unique("image_id", keep="first"), on="image_id",
                                                         how="left", maintain_order="left")
    sha_ok = fp["sha"].is_not_null().to_numpy()
    sha_code = fp["sha"].hash(seed=0).to_numpy().astype(np.uint64)
    group_ok = fp["group"].is_not_null().to_numpy()
    group_code = fp["group"].hash(seed=0).to_numpy().astype(np.uint64)
    return sha_code, sha_ok, group_code, group_ok


def build_index(ann: pl.DataFrame, images: pl.DataFrame, facets: FacetModel, rng: np.random.Generator,
                postings_for: Sequence[str] | None = None, postings_min_bucket: int = 0) -> Index:
    """Index the annotated images; ``images`` supplies sha256 and duplicate_group (the duplicate checks
    of a seed: same bytes, same group; a missing one disables that check).

    ``postings_for``: facets whose (bucket, tag) inverted index is built right away (from the tag
    pairs at hand, cheaper than later) when some bucket of those facets holds more than
    ``postings_min_bucket`` images.
    """
    names = facets.names
    # image positions in image-id order, without a sorted copy of the table (its tags are most of it)
    order = ann["image_id"].arg_sort().to_numpy()  # sorted position -> row
    n = ann.height
    pos_t = np.int32 if n < 2**31 else np.int64
    rank = np.empty(n, dtype=pos_t)
    rank[order] = np.arange(n, dtype=pos_t)  # row -> sorted position
    sorted_ids = ann["image_id"].gather(order)
    ids = sorted_ids.to_list()

    codes, values, typed = _facet_codes(ann, facets, rank)

    # tags: distinct tag codes per image, as bitsets (small vocabulary) or CSR (large vocabulary);
    # (image, tag) pairs as int32 codes (the strings are only looked at once, for the vocabulary)
    # (the distinct tags via categorical codes: 4 bytes per tag, not an exploded copy of the strings)
    long = (
        pl.DataFrame({"i": pl.int_range(n, dtype=pl.Int64 if pos_t is np.int64 else pl.Int32, eager=True),
                      "t": ann["tags"].cast(pl.List(pl.Categorical))})
        .explode("t").drop_nulls("t")
    )
    owner = rank[long["i"].to_numpy()]
    vocab, tcode = _tag_codes(long["t"])
    del long, rank
    n_words = (len(vocab) + 63) // 64
    bits = None
    flat = np.zeros(0, dtype=np.int32)
    starts = np.zeros(n, dtype=np.int64)
    if len(vocab) <= MAX_BITSET_TAGS:
        bits = np.zeros(n * max(1, n_words), dtype=np.uint64)
        for a in range(0, owner.size, 1 << 20):  # in slices: no pair-sized int64 temporaries
            o, t = owner[a:a + (1 << 20)].astype(np.int64), tcode[a:a + (1 << 20)]
            np.bitwise_or.at(bits, o * max(1, n_words) + t // 64,
                             np.left_shift(np.uint64(1), (t % 64).astype(np.uint64)))
        bits = np.ascontiguousarray(bits.reshape(n, max(1, n_words)).T).T  # word-major (Index.tag_bits)
        lens = np.bitwise_count(bits).sum(axis=1).astype(np.int64)
    else:
        key = np.unique(owner.astype(np.int64) * len(vocab) + tcode)
        owner, tcode = key // len(vocab), key % len(vocab)
        flat = tcode.astype(np.int32)
        lens = np.bincount(owner, minlength=n).astype(np.int64)
        starts = (np.cumsum(lens) - lens).astype(np.int64)

    sha_code, sha_ok, group_code, group_ok = _fingerprints(images, sorted_ids)

    perm = rng.permutation(n).astype(np.int64)  # perm[k] = image at random position k
    perm_rank = np.empty(n, dtype=np.int64)
    perm_rank[perm] = np.arange(n)
    index = Index(
        ids=ids, facet_names=list(names), values=values, typed=typed, codes=codes,
        tag_vocab=vocab, tag_bits=bits, tag_flat=flat, tag_start=starts, tag_len=lens,
        sha_code=sha_code, sha_ok=sha_ok, group_code=group_code, group_ok=group_ok, perm_rank=perm_rank,
        global_order=perm,
    )
    if postings_for is not None:
        cols = [index.col(f) for f in postings_for]
        b = index.buckets(cols)
        if b.spans and max(e - s for s, e in b.spans.values()) > postings_min_bucket:
            index.postings(cols, pairs=(owner, tcode))
    return index

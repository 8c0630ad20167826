"""The embedding cache: image embeddings keyed by (image sha256, model identity).

Layout (docs/similarity.md)::

    <cache_dir>/<model cache_key>/model.json                    the model identity it holds
    <cache_dir>/<model cache_key>/part-<ns>-<pid>-<rand>.emb.npy   float32 [n, dim] embeddings
    <cache_dir>/<model cache_key>/part-<ns>-<pid>-<rand>.keys.npy  the n sha256 keys (fixed-width bytes)
    <cache_dir>/<model cache_key>/index-<ns>-<pid>-<rand>.npy      sorted (key hash, part, row) of many parts
    <cache_dir>/<model cache_key>/index-<ns>-<pid>-<rand>.json     the part names that index covers

``cache_key`` = ``<arch slug>-<sha256(model_id)[:16]>`` and ``model_id`` names architecture, weights
and preprocessing (see ``similarity.model``), so other weights or other preprocessing never hit.

**Writes** add a new part (embeddings first, keys last: a part exists once its keys file does), each
file written under a temporary name and renamed into place, so concurrent shard jobs (or the vision
stage and ``embed_images``) never see half a part and never write the same file.

**Lookups touch only the keys asked for.** The newest index is memory-mapped and searched with
``searchsorted`` for the 64-bit BLAKE2b hashes of the wanted keys (``O(k log N)`` pages for k keys in
a cache of N rows); only the matching rows of the matching parts are read, through memory maps, and
their full keys compared (a hash collision is never a hit). Parts newer than the index (fewer than
``REINDEX_EVERY``) are searched through their own keys files. When more parts than that are outside
the index, the lookup writes a new index covering all of them (merge of the old index and the new
keys: cost amortised over ``REINDEX_EVERY`` writes); two processes doing so at once write two valid
indexes and the newest is used. Memory is proportional to the request plus the unindexed parts,
never to the cache.

Caches of format 1 (``part-*.parquet`` with ``sha256, embedding``) are migrated on first use: each
parquet part is rewritten as a part of this format and then removed (two processes migrating at once
give duplicate rows, which are harmless: the first part in name order wins). Unreadable parts are
skipped with a warning. Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import polars as pl

from ..io import atomic_path, atomic_write_text
from ..logs import get_logger

__all__ = ["CacheError", "EmbeddingCache", "key_hashes"]

log = get_logger("similarity.cache")
CACHE_FORMAT = 2
REINDEX_EVERY = 32
_INDEX_DTYPE = np.dtype([("h", "<u8"), ("part", "<i4"), ("row", "<i4")])


class CacheError(RuntimeError):
    pass


def key_hashes(keys: Iterable[str]) -> np.ndarray:
    """64-bit BLAKE2b of each key (uint64): stable across processes, versions and machines."""
    return np.fromiter((int.from_bytes(hashlib.blake2b(k.encode(), digest_size=8).digest(), "little")
                        for k in keys), dtype=np.uint64)


def _save_npy(path: Path, arr: np.ndarray) -> None:
    with atomic_path(path, suffix=".npy.tmp") as tmp, open(tmp, "wb") as fh:
        np.save(fh, arr, allow_pickle=False)


class EmbeddingCache:
    """Append-only, multi-writer embedding cache for one model identity."""

    def __init__(self, root: str | os.PathLike, *, model_id: str, cache_key: str, dim: int):
        self.root = Path(root)
        self.model_id = model_id
        self.dim = int(dim)
        self.dir = self.root / cache_key
        self.hits = 0
        self.misses = 0
        self.rows_read = 0  # embedding rows read by lookups (what a lookup touches)
        self.dir.mkdir(parents=True, exist_ok=True)
        meta = self.dir / "model.json"
        if meta.exists():
            try:
                have = json.loads(meta.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                have = None
            if have and (have.get("model_id") != model_id or int(have.get("dim", dim)) != self.dim):
                raise CacheError(f"embedding cache {self.dir} belongs to {have.get('model_id')!r} "
                                 f"(dim {have.get('dim')}), not {model_id!r} (dim {dim})")
        else:
            atomic_write_text(meta, json.dumps({"model_id": model_id, "dim": self.dim,
                                                "format": CACHE_FORMAT}, indent=2) + "\n")

    @classmethod
    def for_model(cls, root: str | os.PathLike, clip) -> EmbeddingCache:
        return cls(root, model_id=clip.model_id, cache_key=clip.cache_key, dim=clip.embed_dim)

    # ------------------------------------------------------------------------------------------ layout
    def parts(self) -> list[str]:
        """Names (``part-...``) of the complete parts, in name (= time) order."""
        return sorted(p.name[:-len(".keys.npy")] for p in self.dir.glob("part-*.keys.npy"))

    def _keys(self, part: str) -> np.ndarray:
        return np.load(self.dir / f"{part}.keys.npy", mmap_mode="r", allow_pickle=False)

    def _emb(self, part: str) -> np.ndarray:
        return np.load(self.dir / f"{part}.emb.npy", mmap_mode="r", allow_pickle=False)

    def _latest_index(self) -> tuple[list[str], np.ndarray | None]:
        for meta in sorted(self.dir.glob("index-*.json"), reverse=True):
            try:
                names = json.loads(meta.read_text(encoding="utf-8"))["parts"]
                arr = np.load(meta.with_suffix(".npy"), mmap_mode="r", allow_pickle=False)
                if arr.dtype != _INDEX_DTYPE:
                    raise ValueError(f"dtype {arr.dtype}")
                return list(names), arr
            except Exception as exc:  # a half-deleted or foreign index: try the previous one
                log.warning("embedding cache: skipping unreadable index %s (%s)", meta, exc)
        return [], None

    def _migrate_parquet(self) -> None:
        """Rewrite format-1 parquet parts as parts of this format (then remove them)."""
        for f in sorted(self.dir.glob("part-*.parquet")):
            try:
                df = pl.read_parquet(f, columns=["sha256", "embedding"]).filter(pl.col("embedding").is_not_null())
                emb = np.asarray(df["embedding"].to_numpy(), dtype=np.float32).reshape(df.height, -1)
                if df.height and emb.shape[1] != self.dim:
                    raise CacheError(f"embeddings are {emb.shape[1]}-d, not {self.dim}-d")
                self._write_part(f.name[:-len(".parquet")], df["sha256"].to_list(), emb)
                f.unlink(missing_ok=True)
                log.info("embedding cache: migrated %s (%d rows) to format %d", f.name, df.height, CACHE_FORMAT)
            except FileNotFoundError:
                continue  # another process migrated it
            except Exception as exc:
                log.warning("embedding cache: skipping unreadable part file %s (%s)", f, exc)
        if not any(self.dir.glob("part-*.parquet")):
            atomic_write_text(self.dir / "model.json", json.dumps(
                {"model_id": self.model_id, "dim": self.dim, "format": CACHE_FORMAT}, indent=2) + "\n")

    def reindex(self) -> Path | None:
        """Write a new index covering every complete part; returns its path (None if no parts)."""
        names = self.parts()
        if not names:
            return None
        old_names, old = self._latest_index()
        pos = {n: i for i, n in enumerate(names)}
        pieces = []
        covered = set()
        if old is not None and all(n in pos for n in old_names):
            remap = np.array([pos[n] for n in old_names], dtype=np.int32)
            arr = np.array(old)  # copy out of the map
            arr["part"] = remap[arr["part"]] if len(arr) else arr["part"]
            pieces.append(arr)
            covered = set(old_names)
        for n in names:
            if n in covered:
                continue
            try:
                keys = self._keys(n)
            except Exception as exc:
                log.warning("embedding cache: skipping unreadable part %s (%s)", n, exc)
                continue
            a = np.empty(len(keys), dtype=_INDEX_DTYPE)
            a["h"] = key_hashes(k.decode() for k in keys)
            a["part"] = pos[n]
            a["row"] = np.arange(len(keys), dtype=np.int32)
            pieces.append(a)
        idx = np.concatenate(pieces) if pieces else np.empty(0, dtype=_INDEX_DTYPE)
        idx = idx[np.lexsort((idx["row"], idx["part"], idx["h"]))]  # by hash, then part (= age), row
        stem = f"index-{time.time_ns()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        _save_npy(self.dir / f"{stem}.npy", idx)
        atomic_write_text(self.dir / f"{stem}.json", json.dumps({"parts": names}) + "\n")
        for meta in sorted(self.dir.glob("index-*.json"))[:-2]:  # keep the two newest
            meta.with_suffix(".npy").unlink(missing_ok=True)
            meta.unlink(missing_ok=True)
        log.debug("embedding cache: index %s covers %d parts, %d rows", stem, len(names), len(idx))
        return self.dir / f"{stem}.npy"

    # ------------------------------------------------------------------------------------------ lookup
    def lookup(self, sha256s: Iterable[str]) -> pl.DataFrame:
        """Cached rows for these shas: DataFrame ``sha256, embedding`` (Array(Float32, dim)), unique,
        in the order asked."""
        wanted = pl.Series("sha256", list(sha256s), dtype=pl.String).unique(maintain_order=True)
        empty = pl.DataFrame(schema={"sha256": pl.String, "embedding": pl.Array(pl.Float32, self.dim)})
        if any(self.dir.glob("part-*.parquet")):
            self._migrate_parquet()
        names = self.parts()
        if not names or wanted.len() == 0:
            self.misses += wanted.len()
            return empty
        idx_names, idx = self._latest_index()
        covered = set(idx_names)
        unindexed = [n for n in names if n not in covered]
        if len(unindexed) > REINDEX_EVERY:
            self.reindex()
            idx_names, idx = self._latest_index()
            covered = set(idx_names)
            unindexed = [n for n in names if n not in covered]

        keys = wanted.to_list()
        h = key_hashes(keys)
        # candidates: (wanted position, part name, row), oldest part first for each key
        cand: list[tuple[int, str, int]] = []
        if idx is not None and len(idx):
            lo = np.searchsorted(idx["h"], h, side="left")
            hi = np.searchsorted(idx["h"], h, side="right")
            for i in np.nonzero(hi > lo)[0]:
                for e in idx[lo[i]:hi[i]]:
                    cand.append((int(i), idx_names[int(e["part"])], int(e["row"])))
        if unindexed:
            want_pos = {k: i for i, k in enumerate(keys)}
            want_b = np.array([k.encode() for k in keys])
            for n in unindexed:
                try:
                    pk = self._keys(n)
                    hit = np.nonzero(np.isin(pk, want_b))[0] if len(pk) else []
                except Exception as exc:
                    log.warning("embedding cache: skipping unreadable part %s (%s)", n, exc)
                    continue
                for r in hit:
                    i = want_pos.get(pk[r].decode())
                    if i is not None:
                        cand.append((i, n, int(r)))

        order = {n: i for i, n in enumerate(names)}
        cand.sort(key=lambda c: (c[0], order.get(c[1], 1 << 30), c[2]))
        found_pos: list[int] = []
        vecs: list[np.ndarray] = []
        by_part: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for i, n, r in cand:
            if found_pos and found_pos[-1] == i:
                continue  # the first (oldest) copy wins
            try:
                if n not in by_part:
                    by_part[n] = (self._keys(n), self._emb(n))
                pk, pe = by_part[n]
                if pk[r].decode() != keys[i]:
                    continue  # 64-bit hash collision
                v = np.array(pe[r], dtype=np.float32)
            except Exception as exc:
                log.warning("embedding cache: skipping unreadable part %s (%s)", n, exc)
                continue
            if v.shape != (self.dim,):
                raise CacheError(f"embedding cache {self.dir}: part {n} holds {v.shape} vectors, not {self.dim}-d")
            found_pos.append(i)
            vecs.append(v)
        self.rows_read += len(vecs)
        if not vecs:
            self.misses += wanted.len()
            return empty
        found = pl.DataFrame({
            "sha256": pl.Series([keys[i] for i in found_pos], dtype=pl.String),
            "embedding": pl.Series(np.stack(vecs), dtype=pl.Array(pl.Float32, self.dim)),
        })
        self.hits += found.height
        self.misses += wanted.len() - found.height
        return found

    # ------------------------------------------------------------------------------------------- write
    def _write_part(self, stem: str, keys: list[str], emb: np.ndarray) -> None:
        width = max(1, max((len(k.encode()) for k in keys), default=1))
        karr = np.array([k.encode() for k in keys], dtype=f"S{width}")
        _save_npy(self.dir / f"{stem}.emb.npy", emb)
        _save_npy(self.dir / f"{stem}.keys.npy", karr)  # last: the part is complete once this exists

    def put(self, sha256s: list[str], embeddings: np.ndarray, **provenance: str) -> Path | None:
        """Add embeddings (float32 [n, dim]) for these shas as one new part; returns its keys file."""
        if len(sha256s) == 0:
            return None
        emb = np.ascontiguousarray(embeddings, dtype=np.float32)
        if emb.shape != (len(sha256s), self.dim):
            raise CacheError(f"embedding cache: got array {emb.shape}, expected ({len(sha256s)}, {self.dim})")
        stem = f"part-{time.time_ns()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._write_part(stem, [str(s) for s in sha256s], emb)
        log.debug("embedding cache: wrote %d rows to %s (%s)", len(sha256s), stem,
                  ", ".join(f"{k}={v}" for k, v in provenance.items()))
        return self.dir / f"{stem}.keys.npy"

"""The embedding cache: image embeddings keyed by (image sha256, model identity).

Layout (docs/similarity.md)::

    <cache_dir>/<model cache_key>/model.json                       the model identity it holds
    <cache_dir>/<model cache_key>/part-<ns>-<pid>-<rand>.parquet    sha256, embedding (+ provenance)

``cache_key`` = ``<arch slug>-<sha256(model_id)[:16]>`` and ``model_id`` names architecture, weights
and preprocessing (see ``similarity.model``), so other weights or other preprocessing never hit.
Every write adds a new part file, written under a temporary name and renamed into place: concurrent
shard jobs (or the vision stage and ``embed_images``) never see half a file and never write the same
file. A lookup scans only the ``sha256`` column of the part files for the shas it asks for, so
memory stays proportional to the request, not to the cache. Duplicate rows (the same image embedded
by two jobs at once) are harmless; the first is used. Unreadable part files are skipped with a
warning. Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Iterable

import numpy as np
import polars as pl

from ..io import atomic_path, atomic_write_text
from ..logs import get_logger

__all__ = ["EmbeddingCache", "CacheError"]

log = get_logger("similarity.cache")
CACHE_FORMAT = 1


class CacheError(RuntimeError):
    pass


class EmbeddingCache:
    """Append-only, multi-writer embedding cache for one model identity."""

    def __init__(self, root: str | os.PathLike, *, model_id: str, cache_key: str, dim: int):
        self.root = Path(root)
        self.model_id = model_id
        self.dim = int(dim)
        self.dir = self.root / cache_key
        self.hits = 0
        self.misses = 0
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
    def for_model(cls, root: str | os.PathLike, clip) -> "EmbeddingCache":
        return cls(root, model_id=clip.model_id, cache_key=clip.cache_key, dim=clip.embed_dim)

    def parts(self) -> list[Path]:
        return sorted(self.dir.glob("part-*.parquet"))

    def _scan(self, files: list[Path], wanted: pl.Series) -> pl.DataFrame:
        return (
            pl.scan_parquet(files)
            .select("sha256", "embedding")
            .filter(pl.col("sha256").is_in(wanted.implode()))
            .collect()
        )

    def lookup(self, sha256s: Iterable[str]) -> pl.DataFrame:
        """Cached rows for these shas: DataFrame ``sha256, embedding`` (Array(Float32, dim)), unique."""
        wanted = pl.Series("sha256", list(sha256s), dtype=pl.String).unique()
        empty = pl.DataFrame(schema={"sha256": pl.String, "embedding": pl.Array(pl.Float32, self.dim)})
        files = self.parts()
        if not files or wanted.len() == 0:
            self.misses += wanted.len()
            return empty
        try:
            found = self._scan(files, wanted)
        except Exception as exc:  # one bad part file: fall back to reading them one by one
            log.warning("embedding cache %s: combined scan failed (%s); reading part files one by one",
                        self.dir, exc)
            frames = []
            for f in files:
                try:
                    frames.append(self._scan([f], wanted))
                except Exception as exc2:
                    log.warning("embedding cache: skipping unreadable part file %s (%s)", f, exc2)
            found = pl.concat(frames) if frames else empty
        found = found.filter(pl.col("embedding").is_not_null())
        if found.height and found.schema["embedding"] != pl.Array(pl.Float32, self.dim):
            try:
                found = found.with_columns(pl.col("embedding").cast(pl.Array(pl.Float32, self.dim)))
            except Exception as exc:
                raise CacheError(f"embedding cache {self.dir}: embeddings are not {self.dim}-d float32: {exc}")
        found = found.unique("sha256", keep="first", maintain_order=True)
        self.hits += found.height
        self.misses += wanted.len() - found.height
        return found

    def put(self, sha256s: list[str], embeddings: np.ndarray, **provenance: str) -> Path | None:
        """Add embeddings (float32 [n, dim]) for these shas as one new part file; returns its path."""
        if len(sha256s) == 0:
            return None
        emb = np.ascontiguousarray(embeddings, dtype=np.float32)
        if emb.shape != (len(sha256s), self.dim):
            raise CacheError(f"embedding cache: got array {emb.shape}, expected ({len(sha256s)}, {self.dim})")
        df = pl.DataFrame({"sha256": pl.Series(list(sha256s), dtype=pl.String),
                           "embedding": pl.Series(emb, dtype=pl.Array(pl.Float32, self.dim))})
        name = f"part-{time.time_ns()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.parquet"
        path = self.dir / name
        meta = {"benchmaker.model_id": self.model_id, "benchmaker.cache_format": str(CACHE_FORMAT),
                **{f"benchmaker.{k}": str(v) for k, v in provenance.items()}}
        with atomic_path(path, suffix=".parquet.tmp") as tmp:
            df.write_parquet(tmp, compression="zstd", metadata=meta)
        log.debug("embedding cache: wrote %d rows to %s", df.height, path)
        return path

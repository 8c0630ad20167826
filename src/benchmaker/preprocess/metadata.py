"""metadata.jsonl: user columns merged into images.jsonl by image_id.

Each line is ``{"image_id": ..., <any other keys>}`` (the id key may also carry its configured column
name). Rules:

* keys that preprocess computes or that the dataset reserves (image_id, sha256, width, license, tags,
  ...) are never overwritten: they are reported and dropped;
* rows whose id is not among the accepted images are reported (count and examples) and dropped;
* a duplicated id keeps its last row (reported).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import polars as pl

from ..formats import KINDS, RESERVED_COLUMNS

__all__ = ["MetadataReport", "load_metadata", "merge_metadata", "PROTECTED_COLUMNS"]

# computed by preprocess or reserved for later stages: metadata may not set them
PROTECTED_COLUMNS = frozenset(KINDS["images"].required) | frozenset(RESERVED_COLUMNS) | {"path", "reason", "detail"}


@dataclass
class MetadataReport:
    rows: int = 0
    matched: int = 0
    unmatched: int = 0
    unmatched_examples: list[str] = field(default_factory=list)
    duplicates: int = 0
    ignored_columns: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    images_without_metadata: int = 0

    def log(self, logger: logging.Logger, source: str) -> None:
        logger.info(
            "metadata %s: %d row(s), %d matched an image, %d unmatched; %d image(s) without metadata; columns %s",
            source, self.rows, self.matched, self.unmatched, self.images_without_metadata, self.columns,
        )
        if self.unmatched:
            logger.warning(
                "metadata %s: %d row(s) name an image_id that is not among the accepted images "
                "(missing, quarantined or misspelled), e.g. %s",
                source, self.unmatched, self.unmatched_examples,
            )
        if self.duplicates:
            logger.warning("metadata %s: %d image_id(s) appear more than once; the last row wins",
                           source, self.duplicates)
        if self.ignored_columns:
            logger.warning(
                "metadata %s: column(s) %s are computed by preprocess or reserved, so they were ignored",
                source, self.ignored_columns,
            )


def load_metadata(path: str | os.PathLike, columns: Mapping[str, str] | None = None) -> pl.DataFrame:
    """Read metadata.jsonl; the id column is renamed to ``image_id``. Raises ValueError when unusable."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"metadata {p}: file not found (paths.metadata_jsonl)")
    if p.stat().st_size == 0:
        return pl.DataFrame(schema={"image_id": pl.String})
    try:
        df = pl.read_ndjson(p, infer_schema_length=None)
    except Exception as exc:
        raise ValueError(f"metadata {p}: not valid JSON lines: {exc}") from None
    from ..settings_schema import filled

    id_disk = filled("columns", columns)["image_id"]
    if id_disk != "image_id" and id_disk in df.columns:
        if "image_id" in df.columns:
            raise ValueError(f"metadata {p}: has both '{id_disk}' and 'image_id'; keep one id column")
        df = df.rename({id_disk: "image_id"})
    if "image_id" not in df.columns:
        raise ValueError(f"metadata {p}: every row needs an 'image_id' key (columns found: {df.columns})")
    if df.schema["image_id"] != pl.String:
        try:
            df = df.with_columns(pl.col("image_id").cast(pl.String, strict=True))
        except Exception:
            raise ValueError(f"metadata {p}: 'image_id' must be a string (got {df.schema['image_id']})") from None
    return df


def merge_metadata(
    images: pl.DataFrame, meta: pl.DataFrame, columns: Mapping[str, str] | None = None
) -> tuple[pl.DataFrame, MetadataReport]:
    """Left-join metadata onto images by image_id, protecting computed and reserved columns."""
    rep = MetadataReport(rows=meta.height)
    disk_names = {v for k, v in (columns or {}).items() if k in PROTECTED_COLUMNS}
    protected = PROTECTED_COLUMNS | disk_names | set(images.columns)
    rep.ignored_columns = sorted(c for c in meta.columns if c != "image_id" and c in protected)
    keep = [c for c in meta.columns if c == "image_id" or c not in protected]
    meta = meta.select(keep).filter(pl.col("image_id").is_not_null())
    dup = meta.group_by("image_id").len().filter(pl.col("len") > 1)
    rep.duplicates = dup.height
    if dup.height:
        meta = meta.unique(subset="image_id", keep="last", maintain_order=True)
    is_known = pl.col("image_id").is_in(images["image_id"].implode())
    unmatched = meta.filter(~is_known)["image_id"]
    rep.unmatched = unmatched.len()
    rep.unmatched_examples = unmatched.sort().head(5).to_list()
    meta = meta.filter(is_known)
    rep.matched = meta.height
    rep.images_without_metadata = images.height - meta.height
    rep.columns = [c for c in meta.columns if c != "image_id"]
    if not rep.columns:
        return images, rep
    return images.join(meta, on="image_id", how="left", maintain_order="left"), rep

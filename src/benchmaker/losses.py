"""The losses file: every permanent loss of a stage (an image, a query or a pair) with its reason.

Format (docs/formats.md, kind ``losses``): one JSON object per line with
``stage, item_type (image|query|pair), item_id, reason, detail, attempts`` and, for pairs, ``query_id``.
The summary and the dataset card report these files; nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import polars as pl

from .formats import empty_table, read_table, write_table

__all__ = ["Losses", "read_losses", "merge_losses"]


@dataclass
class Losses:
    stage: str
    rows: list[dict] = field(default_factory=list)

    def add(self, item_type: str, item_id: str, reason: str, detail: str | None = None,
            attempts: int = 1, query_id: str | None = None) -> None:
        if item_type not in ("image", "query", "pair"):
            raise ValueError(f"item_type must be image, query or pair, not {item_type!r}")
        self.rows.append({
            "stage": self.stage, "item_type": item_type, "item_id": str(item_id), "reason": reason,
            "detail": None if detail is None else str(detail)[:2000], "attempts": int(attempts),
            "query_id": query_id,
        })

    def __len__(self) -> int:
        return len(self.rows)

    def to_frame(self) -> pl.DataFrame:
        if not self.rows:
            return empty_table("losses").with_columns(pl.lit(None, pl.String).alias("query_id"))
        return pl.DataFrame(self.rows, schema={
            "stage": pl.String, "item_type": pl.String, "item_id": pl.String, "reason": pl.String,
            "detail": pl.String, "attempts": pl.Int64, "query_id": pl.String,
        })

    def write(self, path: str | Path) -> int:
        return write_table(self.to_frame(), "losses", path)


def read_losses(path: str | Path) -> pl.DataFrame:
    df = read_table("losses", path)
    if "query_id" not in df.columns:
        df = df.with_columns(pl.lit(None, pl.String).alias("query_id"))
    return df.select("stage", "item_type", "item_id", "reason", "detail", "attempts",
                     pl.col("query_id").cast(pl.String))


def merge_losses(paths: Iterable[str | Path], out: str | Path) -> int:
    frames = [read_losses(p) for p in paths]
    frames = [f for f in frames if f.height]
    df = pl.concat(frames) if frames else Losses("merged").to_frame()
    return write_table(df, "losses", out)

"""Shared helpers of the test_openai_* files: a fake server fixture and tiny inputs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl

from benchmaker.formats import write_table

SETTINGS = {"model": "gpt-5-mini", "mode": "sync", "api": "responses", "max_attempts": 3, "poll_seconds": 0,
            "concurrency": 4, "image_max_side": 64, "batch_discount": 0.5}
# the fake's usage per request: 1000 input (200 cached), 150 output (50 reasoning); gpt-5-mini prices
SYNC_COST = (800 * 0.25 + 200 * 0.025 + 150 * 2.00) / 1e6


def images_frame(corpus: Path, n: int | None = None) -> pl.DataFrame:
    rows = []
    for p in sorted(corpus.rglob("*")):
        if p.suffix not in (".jpg", ".png") or "broken" in p.parts:
            continue
        data = p.read_bytes()
        rid = str(p.relative_to(corpus))
        rows.append({"image_id": rid, "image_url": f"https://img.example/{rid}", "mime_type": "image/jpeg",
                     "width": 100, "height": 100, "file_size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                     "phash": None, "license": "CC0-1.0", "doi": None, "original_dataset_name": "tiny",
                     "caption": f"caption of {p.stem}"})
    df = pl.DataFrame(rows)
    return df.head(n) if n else df


def write_images(df: pl.DataFrame, path: Path) -> str:
    write_table(df, "images", path)
    return str(path)

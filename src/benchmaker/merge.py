"""Merging per-shard outputs into the single files named in the contract.

``merge_annotations`` streams: each shard's part is read and validated once, on its own, sorted by
``image_id`` and spilled to a temporary file next to the output; the spilled parts are then merged
line by line (``heapq.merge`` on the image id), so the job holds one shard at a time plus one line per
shard, never the whole corpus (issue 15, docs/performance.md). The bytes written are those of
``write_table`` on the concatenated, sorted table: every part is cast to the parts' common schema
before it is spilled, and polars writes a JSON line from the row's values and dtypes alone.
"""

from __future__ import annotations

import heapq
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl

from .formats import FacetModel, FormatError, read_table, to_disk_names
from .io import atomic_path
from .logs import get_logger
from .losses import merge_losses

__all__ = ["merge_annotations"]

log = get_logger("merge")


def _common_schema(schemas: Sequence[pl.Schema]) -> pl.Schema:
    """The schema ``pl.concat(..., how="vertical_relaxed")`` gives frames with these schemas."""
    return pl.concat([pl.DataFrame(schema=s) for s in schemas], how="vertical_relaxed").schema


def _lines(ids_path: Path, rows_path: Path) -> Iterator[tuple[str, str]]:
    with open(ids_path, encoding="utf-8") as ids, open(rows_path, encoding="utf-8") as rows:
        for id_line, row_line in zip(ids, rows, strict=True):
            yield json.loads(id_line)["image_id"], row_line


def _spill(df: pl.DataFrame, stem: Path, columns: Mapping[str, str]) -> tuple[Path, Path]:
    ids_p, rows_p = stem.with_suffix(".ids"), stem.with_suffix(".jsonl")
    df.select("image_id").write_ndjson(ids_p)
    to_disk_names(df, columns).write_ndjson(rows_p)
    return ids_p, rows_p


def merge_annotations(*, parts: Sequence[str], loss_parts: Sequence[str], annotations: str, losses: str,
                      facets: Mapping[str, Any], columns: Mapping[str, str]) -> None:
    fm = FacetModel.from_config(facets)
    out = Path(annotations)
    out.parent.mkdir(parents=True, exist_ok=True)
    spill = Path(tempfile.mkdtemp(prefix=f".{out.name}.parts.", dir=out.parent))
    try:
        # one part in memory at a time: validated, sorted, spilled (rows + their ids) with its schema
        spilled, schemas, kept = [], [], []
        for p in parts:
            df = read_table("annotations", p, columns=columns, facets=fm)
            if not df.height:
                continue
            k = len(spilled)
            spilled.append(_spill(df.sort("image_id"), spill / f"{k:05d}", columns))
            schemas.append(df.schema)
            kept.append(p)
            del df
        if not kept:  # every shard empty: the (validated) empty table of the first part
            read_table("annotations", parts[0], columns=columns, facets=fm)
            with atomic_path(out) as tmp:
                tmp.write_text("")
            n = 0
        else:
            # parts whose dtypes differ from the common schema (vertical_relaxed) are cast and spilled
            # again, so every line is what write_table writes for the concatenated table
            common = _common_schema(schemas)
            for k, (schema, p) in enumerate(zip(schemas, kept)):
                if schema != common:
                    df = read_table("annotations", p, columns=columns, facets=fm)
                    df = df.select(pl.col(c).cast(t) for c, t in common.items()).sort("image_id")
                    spilled[k] = _spill(df, spill / f"{k:05d}", columns)
            n, last = 0, None
            with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as fh:
                for image_id, line in heapq.merge(*(_lines(i, r) for i, r in spilled), key=lambda t: t[0]):
                    if image_id == last:
                        raise FormatError(f"merge: image_id {image_id!r} is annotated in two shards' parts "
                                          f"({', '.join(kept)})")
                    fh.write(line)
                    last = image_id
                    n += 1
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    n_loss = merge_losses(loss_parts, losses)
    log.info("merged %d shards: %d annotations, %d losses", len(parts), n, n_loss)

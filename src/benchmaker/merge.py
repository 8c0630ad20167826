"""Merging per-shard outputs into the single files named in the contract.

``merge_annotations`` streams: each shard's part is read and validated once, on its own, sorted by
``image_id`` and spilled to a temporary file next to the output; the spilled parts are then merged
line by line (``heapq.merge`` on the image id), so the job holds one shard at a time plus one line per
shard, never the whole corpus (issue 15, docs/performance.md). The bytes written are those of
``write_table`` on the concatenated, sorted table: every part is cast to the parts' common schema
before it is spilled, and polars writes a JSON line from the row's values and dtypes alone.

With ``annotations_columns`` the merge also writes the planner's columnar copy of the result
(``benchmaker.columnar``): each part's copy columns are spilled as Arrow IPC next to its rows, the
line merge records which part each output row came from, and the copy is then assembled in row groups
from the spilled parts read a small record batch at a time (one row group in memory): the bytes of
``columnar.write_copy_of_jsonl`` on the merged file, without parsing it again.
"""

from __future__ import annotations

import heapq
import json
import shutil
import tempfile
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl

from .columnar import ROW_GROUP, copy_columns, write_copy
from .formats import FacetModel, FormatError, read_table, to_disk_names
from .io import atomic_path, temporary_prefix
from .logs import get_logger
from .losses import merge_losses

__all__ = ["merge_annotations"]

log = get_logger("merge")


def _common_schema(schemas: Sequence[pl.Schema]) -> pl.Schema:
    """The schema ``pl.concat(..., how="vertical_relaxed")`` gives frames with these schemas."""
    return pl.concat([pl.DataFrame(schema=s) for s in schemas], how="vertical_relaxed").schema


def _lines(ids_path: Path, rows_path: Path, part: int) -> Iterator[tuple[str, int, str]]:
    with open(ids_path, encoding="utf-8") as ids, open(rows_path, encoding="utf-8") as rows:
        for id_line, row_line in zip(ids, rows, strict=True):
            yield json.loads(id_line)["image_id"], part, row_line


def _spill(df: pl.DataFrame, stem: Path, columns: Mapping[str, str], copy: list[str]) -> tuple[Path, Path]:
    ids_p, rows_p = stem.with_suffix(".ids"), stem.with_suffix(".jsonl")
    df.select("image_id").write_ndjson(ids_p)
    to_disk_names(df, columns).write_ndjson(rows_p)
    if copy:  # the columnar copy's columns, in small record batches read one at a time when the copy is assembled
        import pyarrow as pa

        tbl = df.select(copy).to_arrow(compat_level=pl.CompatLevel.oldest())  # large_string: arrow can take() it
        with pa.ipc.new_file(str(stem.with_suffix(".arrow")), tbl.schema) as w:
            w.write_table(tbl, max_chunksize=_SPILL_BATCH)
    return ids_p, rows_p


_SPILL_BATCH = 1024


class _PartRows:
    """The rows of one spilled part in order, read a record batch at a time (no part is held whole)."""

    def __init__(self, path: Path):
        import pyarrow as pa

        self.reader = pa.ipc.open_file(pa.OSFile(str(path)))
        self.next_batch, self.batch, self.pos = 0, None, 0

    def take(self, count: int) -> list:
        out = []
        while count:
            if self.batch is None or self.pos == self.batch.num_rows:
                self.batch, self.pos = self.reader.get_batch(self.next_batch), 0
                self.next_batch += 1
            k = min(count, self.batch.num_rows - self.pos)
            out.append(self.batch.slice(self.pos, k))
            self.pos += k
            count -= k
        return out


def _copy_row_groups(stems: list[Path], source: "array[int]") -> Iterator[object]:
    """The merged rows' copy columns, ``ROW_GROUP`` rows at a time: row r of the merge is the next
    unread row of part ``source[r]`` (each part was merged in its own order)."""
    import pyarrow as pa

    parts = [_PartRows(s.with_suffix(".arrow")) for s in stems]
    src = np.frombuffer(source, dtype=np.uint32) if len(source) else np.zeros(0, np.uint32)
    for a in range(0, src.size, ROW_GROUP):
        s = src[a:a + ROW_GROUP]
        counts = np.bincount(s, minlength=len(parts))
        pieces = [b for k in np.flatnonzero(counts).tolist() for b in parts[k].take(int(counts[k]))]
        order = np.argsort(s, kind="stable")  # row i of the part-grouped pieces is merged row order[i]
        inv = np.empty_like(order)
        inv[order] = np.arange(order.size)
        yield pa.Table.from_batches(pieces).take(pa.array(inv))


def merge_annotations(*, parts: Sequence[str], loss_parts: Sequence[str], annotations: str, losses: str,
                      facets: Mapping[str, Any], columns: Mapping[str, str],
                      annotations_columns: str | None = None) -> None:
    """``annotations_columns``: where to write the planner's columnar copy (module doc), if at all."""
    fm = FacetModel.from_config(facets)
    names = copy_columns("annotations", fm)
    copy = list(names) if annotations_columns else []
    out = Path(annotations)
    out.parent.mkdir(parents=True, exist_ok=True)
    spill = Path(tempfile.mkdtemp(prefix=temporary_prefix(out, "parts."), dir=out.parent))
    try:
        # one part in memory at a time: validated, sorted, spilled (rows + their ids) with its schema
        spilled, schemas, kept = [], [], []
        for p in parts:
            df = read_table("annotations", p, columns=columns, facets=fm)
            if not df.height:
                continue
            k = len(spilled)
            spilled.append(_spill(df.sort("image_id"), spill / f"{k:05d}", columns, copy))
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
                    spilled[k] = _spill(df, spill / f"{k:05d}", columns, copy)
            n, last = 0, None
            source = array("I")  # the part of each merged row (for the columnar copy)
            with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as fh:
                for image_id, part, line in heapq.merge(*(_lines(i, r, k) for k, (i, r) in enumerate(spilled)),
                                                        key=lambda t: t[0]):
                    if image_id == last:
                        raise FormatError(f"merge: image_id {image_id!r} is annotated in two shards' parts "
                                          f"({', '.join(kept)})")
                    fh.write(line)
                    last = image_id
                    n += 1
                    source.append(part)
        if annotations_columns:
            stems = [spill / f"{k:05d}" for k in range(len(spilled))]
            write_copy(_copy_row_groups(stems, source) if kept else (), annotations_columns, kind="annotations",
                       source=out, names=names, columns=columns)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    n_loss = merge_losses(loss_parts, losses)
    log.info("merged %d shards: %d annotations, %d losses", len(parts), n, n_loss)

"""Columnar copies of JSONL tables: the columns a fast reader needs, as parquet (docs/formats.md).

The planner reads 1M annotations as JSON in ~5 s, the same columns as parquet in ~0.5 s. So the jobs
that write ``annotations.jsonl`` and ``images.jsonl`` (the merges) also write an internal copy of the
columns the planner's index uses (``COPIES``), rows sorted by ``image_id``, and the plan stage reads it
instead. The JSONL stays the contract; the copy is a cache of it that proves what it was made from:
its parquet key-value metadata (``META_KEY``) holds the JSONL's byte size and xxh3-128 digest and the
disk names of the columns, checked on every read together with the schema and the content checks of
the JSONL reader. A missing, stale (the JSONL was edited or replaced after the merge), foreign or
malformed copy is not used: :func:`read_copy` returns None after one log line saying why, and the
caller reads the JSONL.

Same rows, same bytes: a copy is written in row groups of ``ROW_GROUP`` rows with fixed parquet
settings, so the merge (which streams the rows) and :func:`write_copy_of_jsonl` (from the whole file)
write identical files for the same JSONL.
"""

from __future__ import annotations

import json
import mmap
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import polars as pl

from .formats import FacetModel, _rename_map
from .io import atomic_path
from .logs import get_logger
from .table_blocks import iter_table_columns

__all__ = ["COPIES", "ROW_GROUP", "copy_columns", "file_digest", "read_copy", "write_copy",
           "write_copy_of_jsonl"]

log = get_logger("columnar")

META_KEY = b"benchmaker.columnar"
FORMAT_VERSION = 1
ROW_GROUP = 1 << 16
# kind -> (columns always held, optional columns held when the table has them)
COPIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "annotations": (("image_id", "tags"), ()),   # + every facet, in the facet model's order
    "images": (("image_id", "sha256", "phash"), ("duplicate_group",)),
}
NULLABLE = {"images": frozenset({"phash", "duplicate_group"})}


def copy_columns(kind: str, facets: FacetModel | None = None) -> dict[str, Any]:
    """The columns a copy of ``kind`` holds (canonical names) and their dtypes as read back."""
    if kind == "annotations":
        fm = facets or FacetModel()
        return {"image_id": pl.String, "tags": pl.List(pl.Categorical),
                **{f: pl.String for f in fm.taxonomy}, **{f: pl.Boolean for f in fm.boolean}}
    keep, opt = COPIES[kind]
    return {c: pl.String for c in (*keep, *opt)}


def file_digest(path: str | os.PathLike, step: int = 64 << 20) -> dict[str, Any]:
    """Byte size and xxh3-128 digest of a file: memory-mapped (no copy; ~0.1 s for 0.5 GB in the page
    cache), the pages of each ``step`` bytes hashed released from the process (``MADV_DONTNEED``), so
    hashing a large file does not raise the resident size of the job."""
    import xxhash

    h = xxhash.xxh3_128()
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size:
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm, memoryview(mm) as view:
                for a in range(0, size, step):
                    with view[a:a + step] as chunk:
                        h.update(chunk)
                    if hasattr(mmap, "MADV_DONTNEED"):
                        mm.madvise(mmap.MADV_DONTNEED, a, min(step, size - a))
    return {"bytes": size, "xxh3_128": h.hexdigest()}


def _arrow_schema(names: Mapping[str, Any]):
    import pyarrow as pa

    def typ(dtype: Any):
        if dtype == pl.Boolean:
            return pa.bool_()
        if isinstance(dtype, pl.List):  # tags: dictionary-encoded, read back as lists of Categorical
            return pa.large_list(pa.dictionary(pa.int32(), pa.large_string()))
        return pa.large_string()
    return pa.schema([pa.field(c, typ(t)) for c, t in names.items()])


def _row_group(tbl: Any, schema: Any) -> Any:
    """One row group of the copy as an arrow table of exactly ``schema``: the same rows give the same
    arrays whatever their source (a polars frame or gathered IPC slices)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cols = []
    for field in schema:
        col = tbl.column(field.name).combine_chunks()
        if pa.types.is_large_list(field.type):
            col = col.cast(pa.large_list(pa.large_string()))
            values = pc.list_flatten(col).dictionary_encode()  # dictionary in first-appearance order
            offsets = pc.subtract(col.offsets, col.offsets[0]) if len(col) else pa.array([0], pa.int64())
            col = pa.LargeListArray.from_arrays(offsets, values.cast(field.type.value_type))
        else:
            col = col.cast(field.type)
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=schema)


def write_copy(row_groups: Iterable[Any] | pl.DataFrame, path: str | os.PathLike, *, kind: str,
               source: str | os.PathLike, names: Mapping[str, Any], columns: Mapping[str, str] | None = None) -> None:
    """Write the copy of JSONL file ``source`` (already written) from its rows sorted by image id, given
    as one polars frame, or as arrow tables or polars frames of ``ROW_GROUP`` rows (the last one
    shorter), holding ``names``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(row_groups, pl.DataFrame):
        df = row_groups.select(list(names))
        row_groups = (df.slice(a, ROW_GROUP) for a in range(0, df.height, ROW_GROUP))

    rename = _rename_map(columns, to_disk=True)
    meta = {"format_version": FORMAT_VERSION, "kind": kind, "source": file_digest(source),
            "disk_names": {c: rename.get(c, c) for c in names}}
    schema = _arrow_schema(names).with_metadata({META_KEY: json.dumps(meta, sort_keys=True).encode()})
    with atomic_path(path) as tmp:
        with pq.ParquetWriter(tmp, schema, compression="zstd", compression_level=3, use_dictionary=True,
                              write_statistics=False, version="2.6", data_page_version="1.0") as w:
            for rg in row_groups:
                t = rg.to_arrow() if isinstance(rg, pl.DataFrame) else rg
                if t.num_rows:
                    w.write_table(_row_group(t, schema), row_group_size=ROW_GROUP)
                del t, rg
                pa.default_memory_pool().release_unused()  # arrow's allocator keeps freed pages otherwise


def write_copy_of_jsonl(kind: str, jsonl: str | os.PathLike, path: str | os.PathLike, *,
                        facets: FacetModel | None = None, columns: Mapping[str, str] | None = None) -> int:
    """The copy of an existing JSONL table (read and checked as the planner reads it); rows."""
    opt = COPIES[kind][1]
    names = copy_columns(kind, facets)
    keep = [c for c in names if c not in opt]
    frames = list(iter_table_columns(kind, jsonl, keep, optional=opt, columns=columns, facets=facets))
    df = pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame(schema=names)
    have = {c: t for c, t in names.items() if c in df.columns}
    df = df.select(list(have)).sort("image_id")
    write_copy(df, path, kind=kind, source=jsonl, names=have, columns=columns)
    return df.height


def read_copy(path: str | os.PathLike | None, *, kind: str, source: str | os.PathLike,
              facets: FacetModel | None = None, columns: Mapping[str, str] | None = None) -> pl.DataFrame | None:
    """The copy's columns (canonical names, sorted by image id) when the copy exists, belongs to
    ``source`` as it is now and passes the checks; otherwise None, after one log line saying why."""
    import pyarrow.parquet as pq

    def stale(why: str, level: int = 30) -> None:
        log.log(level, "not using the columnar copy %s of %s (%s): reading the JSONL", path, source, why)

    if path is None or not Path(path).exists():
        stale("it does not exist", 20)
        return None
    if not Path(source).exists():  # the JSONL read raises its "file not found"
        stale(f"{source} does not exist")
        return None
    try:
        meta = json.loads((pq.read_schema(path).metadata or {})[META_KEY])
        meta["source"]["bytes"], meta["source"]["xxh3_128"], dict(meta["disk_names"])  # the fields used below
    except Exception as exc:
        stale(f"not a columnar copy: {type(exc).__name__}: {exc}")
        return None
    if meta.get("format_version") != FORMAT_VERSION or meta.get("kind") != kind:
        stale(f"written as format {meta.get('format_version')} of kind {meta.get('kind')!r}")
        return None
    size = Path(source).stat().st_size
    if meta["source"]["bytes"] != size or file_digest(source) != meta["source"]:
        stale(f"made from a different {Path(source).name}: {meta['source']['bytes']} bytes, xxh3-128 "
              f"{meta['source']['xxh3_128']}; the file now has {size} bytes"
              + ("" if meta["source"]["bytes"] != size else " and another digest"))
        return None
    names = copy_columns(kind, facets)
    rename = _rename_map(columns, to_disk=True)
    want = {c: rename.get(c, c) for c in meta["disk_names"]}
    if meta["disk_names"] != want:
        stale(f"written for the column names {meta['disk_names']}, configured now {want}")
        return None
    try:
        df = pl.read_parquet(path)
    except Exception as exc:
        stale(f"unreadable: {type(exc).__name__}: {exc}")
        return None
    expect = {c: t for c, t in names.items() if c in df.columns or c not in COPIES[kind][1]}
    if dict(df.schema) != expect:
        stale(f"columns {dict(df.schema)}, expected {expect}")
        return None
    nullable = NULLABLE.get(kind, frozenset())
    ids = pl.col("image_id")
    checks = {f"nulls in '{c}'": pl.col(c).null_count() > 0 for c in df.columns if c not in nullable}
    checks["image ids not sorted and unique"] = (ids.slice(1) <= ids.slice(0, max(0, df.height - 1))).any()
    if kind == "annotations" and facets is not None:
        checks.update({f"facet '{n}' outside the taxonomy": (~pl.col(n).is_in(v)).any()
                       for n, v in facets.taxonomy.items()})
    bad = [k for k, v in df.select(**checks).row(0, named=True).items() if v] if df.height else []
    if bad:
        stale(", ".join(bad))
        return None
    return df

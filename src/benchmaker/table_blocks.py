"""Large JSONL tables read in blocks of whole lines, so a reader holds one block at a time, never the
whole file: every column validated (:func:`iter_table_blocks`), only the columns a reader needs
(:func:`iter_table_columns`), or only the rows it asks for (:func:`read_table_where`). Each block is
checked against its kind's contract in :mod:`benchmaker.formats`, with the same errors as ``read_table``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import polars as pl

from .formats import (
    Bool,
    FacetModel,
    FormatError,
    Str,
    StrList,
    _rename_map,
    empty_table,
    spec_for,
    to_canonical_names,
    validate_table,
)

__all__ = ["iter_table_blocks", "iter_table_columns", "read_table_where", "concat_blocks"]


def iter_table_blocks(
    kind: str,
    path: str | os.PathLike,
    *,
    columns: Mapping[str, str] | None = None,
    facets: FacetModel | None = None,
    block_bytes: int = 64 << 20,
    where=None,
):
    """The rows of a JSONL table as validated frames (canonical names) of about ``block_bytes`` of
    file each (whole lines), so a reader holds one block at a time, never the whole file. ``where``:
    a function of the block (disk names) returning the filter expression applied before validation.
    The first block is yielded even when ``where`` keeps none of its rows (it carries the schema)."""
    path = Path(path)
    if not path.exists():
        raise FormatError(f"{path}: file not found (expected a {kind} file)")
    first = True
    for offset, block in _line_blocks(path, block_bytes):
        df = _parse_block(block, kind, path, offset)
        if where is not None:
            df = df.filter(where(df))
        if df.height or first:
            yield validate_table(to_canonical_names(df, columns), kind, facets=facets, source=str(path))
        first = False


def _line_blocks(path: Path, block_bytes: int):
    """(byte offset, block) of a file read in blocks of about ``block_bytes`` of whole lines; blocks
    holding only whitespace are skipped. The file is memory-mapped: each block is one copy out of the
    page cache (no read-then-concatenate), and the pages of blocks already handed out are released
    from the process (``MADV_DONTNEED``), so the resident size stays about one block. Line numbers are
    counted only for an error message (``_lines_before``)."""
    import mmap

    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if not size:
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            start = 0
            while start < size:
                end = mm.find(b"\n", start + block_bytes) if start + block_bytes < size else -1
                end = size if end < 0 else end + 1  # block_bytes, then the rest of the line
                block = mm[start:end]
                if not block.isspace():  # stops at the first other byte
                    yield start, block
                del block
                if hasattr(mmap, "MADV_DONTNEED") and end >= mmap.PAGESIZE:
                    mm.madvise(mmap.MADV_DONTNEED, 0, end - end % mmap.PAGESIZE)
                start = end


def _lines_before(path: Path, offset: int) -> int:
    """The number of lines before byte ``offset`` of a file (for error messages)."""
    n, done = 0, 0
    with open(path, "rb") as fh:
        while done < offset:
            chunk = fh.read(min(64 << 20, offset - done))
            if not chunk:
                break
            n += chunk.count(b"\n")
            done += len(chunk)
    return n


def _parse_block(block: bytes, kind: str, path: Path, offset: int) -> pl.DataFrame:
    """One block of JSON lines (at byte ``offset``) as a frame (disk names, inferred types); a parse
    error names the file and the line the block starts after."""
    import io

    try:
        return pl.read_ndjson(io.BytesIO(block), infer_schema_length=None)
    except Exception as exc:
        raise FormatError(f"{path}: not valid JSON lines for a {kind} file (in the block after line "
                          f"{_lines_before(path, offset)}): {exc}") from None


def _as_categorical(dtype: Any) -> Any:
    """String -> Categorical, list of strings -> list of Categorical (``iter_table_columns(categorical=)``)."""
    return pl.List(pl.Categorical) if dtype == StrList else pl.Categorical


def _projected_block(block: bytes, kind: str, keep: list[str], optional: tuple[str, ...], rename: Mapping[str, str],
                     facets: FacetModel | None, categorical: tuple[str, ...] = ()) -> pl.DataFrame | None:
    """The ``keep`` (+ ``optional``) columns of one block parsed with their spec dtypes, or None when
    anything is unusual (a parse error, a required column absent from the block or null where it may
    not be, a string that looks like a JSON object or array, a repeated key, a facet value outside the
    taxonomy): the caller then reads the block the general way, which validates it and raises."""
    import io

    req, nullable, spec = spec_for(kind, facets)
    types = {**spec.optional, **req}
    want = [*keep, *optional]
    if any(types.get(c) not in (Str, StrList, Bool) for c in want):
        return None
    for c in keep:  # a column that never appears is a "missing column" error of the general path
        if b'"' + rename.get(c, c).encode() + b'"' not in block:
            return None
    try:
        df = pl.read_ndjson(io.BytesIO(block), schema={
            rename.get(c, c): _as_categorical(types[c]) if c in categorical else types[c] for c in want})
    except Exception:
        return None
    df = df.rename({rename.get(c, c): c for c in want if rename.get(c, c) != c})
    checks = [pl.col(c).null_count() > 0 for c in keep if c not in nullable]
    for c in want:  # a JSON object or array where a string belongs: parsed as its text (the general way refuses it)
        if types[c] in (Str, StrList):
            v = pl.col(c) if types[c] == Str else pl.col(c).explode()
            if c in categorical:  # the distinct values only (a tag vocabulary: a few hundred strings)
                v = v.unique().cast(pl.String)
            checks.append((v.str.starts_with("{") | v.str.starts_with("[")).any())
    checks += [pl.col(k).is_duplicated().any() for k in spec.key if k in want]
    if kind == "annotations" and facets is not None:
        checks += [(~pl.col(n).is_in(v)).any() for n, v in facets.taxonomy.items() if n in want]
    if checks and any(df.select(pl.any_horizontal(*checks).fill_null(True)).row(0)):
        return None
    if not df.height:
        return None
    return df


def iter_table_columns(
    kind: str,
    path: str | os.PathLike,
    keep: list[str],
    *,
    optional: tuple[str, ...] = (),
    columns: Mapping[str, str] | None = None,
    facets: FacetModel | None = None,
    block_bytes: int = 64 << 20,
    categorical: tuple[str, ...] = (),
):
    """The canonical columns ``keep`` (and those of ``optional`` the file has) of a JSONL table, as
    frames of about ``block_bytes`` of file each. Only these columns are parsed, with the dtypes of
    the table's spec, and checked (present, typed, non-null where required, keys unique, facet values
    in the taxonomy): about half the work of :func:`iter_table_blocks`, which parses and validates
    every column. A block where anything looks unusual is read by :func:`iter_table_blocks`' way
    instead, so a bad file raises the same error; the other columns are not validated here.
    ``categorical``: string (or list-of-string) columns of ``keep`` returned as Categorical (lists of
    Categorical): parsed straight into codes, 4 bytes a value instead of a 16-byte string view, for
    columns with few distinct values (the planner's tags)."""
    path = Path(path)
    if not path.exists():
        raise FormatError(f"{path}: file not found (expected a {kind} file)")
    rename = _rename_map(columns, to_disk=True)
    has_opt: tuple[str, ...] | None = None
    for offset, block in _line_blocks(path, block_bytes):
        if has_opt is None:  # optional columns: kept when the first block names them
            has_opt = tuple(c for c in optional if b'"' + rename.get(c, c).encode() + b'"' in block)
        df = _projected_block(block, kind, keep, has_opt, rename, facets, categorical)
        if df is None:  # the general way, for this block alone (validates every column)
            df = validate_table(to_canonical_names(_parse_block(block, kind, path, offset), columns), kind,
                                facets=facets, source=str(path))
            opt_types = spec_for(kind, facets)[2].optional
            df = df.select(keep + [pl.col(c) if c in df.columns else pl.lit(None, opt_types[c]).alias(c)
                                   for c in has_opt])
            if categorical:
                df = df.with_columns(pl.col(c).cast(_as_categorical(df.schema[c])) for c in categorical)
        yield df


def read_table_where(
    kind: str,
    path: str | os.PathLike,
    *,
    key: str,
    values: pl.Series | list,
    columns: Mapping[str, str] | None = None,
    facets: FacetModel | None = None,
    block_bytes: int = 64 << 20,
) -> pl.DataFrame:
    """The rows of a JSONL table whose canonical column ``key`` is in ``values``, read in blocks of
    ``block_bytes`` (whole lines) so memory holds one block plus the matching rows, never the whole
    file; validated like :func:`read_table` (the rows kept). File order is kept."""
    disk_key = _rename_map(columns, to_disk=True).get(key, key)
    want = pl.Series(values, dtype=pl.String).unique()

    def where(df: pl.DataFrame) -> pl.Expr:
        if disk_key not in df.columns:
            raise FormatError(f"{path}: missing column {disk_key!r} for a {kind} file (has {df.columns})")
        return pl.col(disk_key).cast(pl.String).is_in(want)

    frames = iter_table_blocks(kind, path, columns=columns, facets=facets, block_bytes=block_bytes, where=where)
    return concat_blocks(list(frames), kind, facets=facets, source=str(path))


def concat_blocks(frames: list[pl.DataFrame], kind: str, *, facets: FacetModel | None = None,
                  source: str = "<table>") -> pl.DataFrame:
    """One validated table from blocks of :func:`iter_table_blocks` (filtered or not); without rows,
    an empty table with the first block's schema (or the kind's)."""
    if not frames:
        return empty_table(kind, facets)
    kept = [f for f in frames if f.height]
    if not kept:
        return frames[0].head(0)
    return validate_table(pl.concat(kept, how="diagonal_relaxed"), kind, facets=facets, source=source)

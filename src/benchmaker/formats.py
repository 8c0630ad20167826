"""File formats: the contracts between stages (documented in docs/formats.md).

Every table the pipeline writes is one of the ``KINDS`` below. In memory the library always uses the
*canonical* column names; on disk, the columns listed in ``RENAMABLE`` carry the names chosen in the
config's ``columns`` section (upstream's ``column_*`` settings). ``read_table`` renames configured →
canonical and validates; ``write_table`` validates, renames canonical → configured and writes atomically.

Facet columns (taxonomy and boolean facets) are named by the user already and never renamed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import polars as pl

from .io import atomic_path
from .settings_schema import filled

__all__ = [
    "FormatError",
    "KINDS",
    "RENAMABLE",
    "FacetModel",
    "read_table",
    "read_table_where",
    "iter_table_blocks",
    "iter_table_columns",
    "concat_blocks",
    "iter_json_objects",
    "write_table",
    "empty_table",
    "validate_table",
    "to_disk_names",
    "to_canonical_names",
    "FORMAT_VERSION",
]

# column names the pipeline itself writes: metadata.jsonl may not reuse them (config validation, preprocess)
RESERVED_COLUMNS = {
    "image", "image_id", "image_url", "mime_type", "license", "doi", "original_dataset_name",
    "query_id", "query_text", "relevance_label", "tags", "summary", "confidence", "seed_image_ids",
    "candidate_image_ids", "clip_score", "clip_rank", "width", "height", "file_size", "sha256",
    "phash", "pool", "is_seed", "rationale", "annotator", "judge", "seed_not_relevant", "duplicate_group",
    "color_signature", "narrative",
}

FORMAT_VERSION = 1


class FormatError(ValueError):
    """A file does not follow its documented format; the message names file, column and row."""


# canonical column keys that the config may rename (config ``columns.<key>``)
RENAMABLE = (
    "image_id", "image_url", "mime_type", "license", "doi", "original_dataset_name", "query_id",
    "query_text", "relevance_label", "tags", "summary", "confidence", "seed_image_ids",
    "candidate_image_ids", "clip_score",
)

Str, Int, Float, Bool = pl.String, pl.Int64, pl.Float64, pl.Boolean
StrList = pl.List(pl.String)
CANDIDATE = pl.Struct({"image_id": Str, "pool": Str, "reason": Str})
SHORTFALL = pl.Struct({"pool": Str, "wanted": Int, "got": Int, "reason": Str})
# imported: candidates of a pools file whose position names no pool (benchmaker.plan.pools)
POOLS = ("seed", "positive", "neutral", "hard", "nearmiss", "easy", "imported")
# pairs that pool deepening added (docs/deepen.md): in deepen/qrels.jsonl only, never planned
DEEPEN_POOL = "deepen"


@dataclass(frozen=True)
class FacetModel:
    """The facet model from config ``facets``: taxonomy (name -> values), booleans, tag vocabulary."""

    taxonomy: dict[str, list[str]] = field(default_factory=dict)
    boolean: list[str] = field(default_factory=list)
    vocabulary: list[str] = field(default_factory=list)
    min_tags: int = 0
    max_tags: int = 1000

    @classmethod
    def from_config(cls, facets: Mapping[str, Any]) -> "FacetModel":
        tags = filled("facets.tags", facets.get("tags"))
        return cls(
            taxonomy={k: list(v) for k, v in (facets.get("taxonomy") or {}).items()},
            boolean=list(facets.get("boolean") or []),
            vocabulary=list(tags.get("vocabulary") or []),
            min_tags=int(tags["min"]),
            max_tags=int(tags["max"]),
        )

    @property
    def names(self) -> list[str]:
        return list(self.taxonomy) + list(self.boolean)

    def confidence_dtype(self) -> pl.Struct:
        return pl.Struct({k: Float for k in self.names})


@dataclass(frozen=True)
class Spec:
    required: dict[str, Any]  # canonical name -> polars dtype
    nullable: frozenset[str] = frozenset()
    key: tuple[str, ...] = ()
    optional: dict[str, Any] = field(default_factory=dict)  # validated when present
    doc: str = ""


KINDS: dict[str, Spec] = {
    "images": Spec(
        required={
            "image_id": Str, "image_url": Str, "mime_type": Str, "width": Int, "height": Int,
            "file_size": Int, "sha256": Str, "phash": Str, "license": Str, "doi": Str,
            "original_dataset_name": Str,
        },
        nullable=frozenset({"image_url", "license", "doi", "phash"}),
        key=("image_id",),
        # duplicate_group: images.jsonl (merge_images), not in the per-shard manifests; color_signature:
        # written by preprocess (benchmaker.preprocess.inspect.color_signature_of), absent in older files
        optional={"duplicate_group": Str, "color_signature": Str},
        doc="one row per accepted image; extra metadata.jsonl columns follow",
    ),
    "quarantine": Spec(
        required={"path": Str, "reason": Str, "detail": Str},
        nullable=frozenset({"detail"}),
        doc="files that were not accepted, with the reason",
    ),
    "annotations": Spec(
        required={"image_id": Str, "summary": Str, "tags": StrList, "confidence": None, "annotator": Str},
        key=("image_id",),
        doc="one row per annotated image; plus one column per facet",
    ),
    "losses": Spec(
        required={"stage": Str, "item_type": Str, "item_id": Str, "reason": Str, "detail": Str, "attempts": Int},
        nullable=frozenset({"detail"}),
        optional={"query_id": Str},
        doc="permanent losses of a stage (image, query or pair) with the reason",
    ),
    "query_plan": Spec(
        required={
            "query_id": Str, "seed_image_ids": StrList, "candidate_image_ids": StrList,
            "candidates": pl.List(CANDIDATE), "difficulty": None, "shortfall": pl.List(SHORTFALL),
        },
        key=("query_id",),
        optional={"profile": None},
        doc="one row per planned query; candidates are seeds first, then pools",
    ),
    "queries": Spec(
        required={"query_id": Str, "query_text": Str, "narrative": Str, "writer": Str},
        nullable=frozenset({"narrative"}),
        key=("query_id",),
        doc="one row per planned query with a query: its text and narrative, written from the seed alone "
            "(or imported with its labels: narrative null), and who wrote it",
    ),
    "qrels": Spec(
        required={
            "query_id": Str, "query_text": Str, "image_id": Str, "relevance_label": Int, "pool": Str,
            "is_seed": Bool, "seed_not_relevant": Bool, "judge": Str,
        },
        nullable=frozenset(),
        key=("query_id", "image_id"),
        optional={"rationale": Str, "narrative": Str},
        doc="one row per judged (query, image) pair",
    ),
    "qrels_with_score": Spec(
        required={
            "query_id": Str, "query_text": Str, "image_id": Str, "relevance_label": Int, "pool": Str,
            "is_seed": Bool, "seed_not_relevant": Bool, "judge": Str, "clip_score": Float, "clip_rank": Int,
        },
        nullable=frozenset({"clip_score", "clip_rank"}),
        key=("query_id", "image_id"),
        optional={"rationale": Str, "narrative": Str},
        doc="qrels plus the CLIP cosine similarity and its rank within the query",
    ),
    "deepen_labels": Spec(
        required={"query_id": Str, "image_id": Str, "relevance_label": Int, "judge": Str, "system": Str,
                  "depth": Int},
        key=("query_id", "image_id"),
        optional={"rationale": Str},
        doc="pool deepening: the labels of the new pairs one system brought in, at which depth (docs/deepen.md)",
    ),
    "deepened_qrels": Spec(
        required={
            "query_id": Str, "query_text": Str, "image_id": Str, "relevance_label": Int, "pool": Str,
            "is_seed": Bool, "seed_not_relevant": Bool, "judge": Str, "deepened": Bool, "deepen_system": Str,
            "deepen_depth": Int, "deepen_systems": StrList,
        },
        nullable=frozenset({"deepen_system", "deepen_depth"}),
        key=("query_id", "image_id"),
        optional={"rationale": Str, "narrative": Str},
        doc="qrels plus the pairs pool deepening added, with their provenance (docs/deepen.md)",
    ),
    "costs": Spec(
        required={
            "stage": Str, "item_id": Str, "model": Str, "mode": Str, "input_tokens": Int,
            "cached_input_tokens": Int, "output_tokens": Int, "reasoning_tokens": Int, "cost_usd": Float,
        },
        optional={"attempt": Int, "cached": Bool, "last_run": Bool, "reason": Str},
        doc="one row per paid API request (actual usage x price table); cached=true rows cost nothing now; "
            "every paid request to date across reruns, last_run=true for the rows of the latest run; reason: "
            "why a request the provider billed returned no answer (e.g. expired_unreturned), else absent",
    ),
    "audit_sample": Spec(
        required={
            "order": Int, "item_id": Str, "query_id": Str, "query_text": Str, "image_id": Str, "pool": Str,
            "is_seed": Bool, "judge_label": Int, "judge": Str, "difficulty": Str, "facets": None,
            "stratum": Str, "stratum_size": Int, "stratum_sample": Int, "weight": Float, "priority": Int,
        },
        key=("item_id",),
        doc="the judge audit's sample: one row per drawn (query, image) pair (docs/audit.md)",
    ),
}


def _rename_map(columns: Mapping[str, str] | None, *, to_disk: bool) -> dict[str, str]:
    if not columns:
        return {}
    m = {k: columns[k] for k in RENAMABLE if k in columns and columns[k] != k}
    return m if to_disk else {v: k for k, v in m.items()}


def to_disk_names(df: pl.DataFrame, columns: Mapping[str, str] | None) -> pl.DataFrame:
    m = {k: v for k, v in _rename_map(columns, to_disk=True).items() if k in df.columns}
    return df.rename(m) if m else df


def to_canonical_names(df: pl.DataFrame, columns: Mapping[str, str] | None) -> pl.DataFrame:
    m = {k: v for k, v in _rename_map(columns, to_disk=False).items() if k in df.columns}
    return df.rename(m) if m else df


def _spec_for(kind: str, facets: FacetModel | None) -> tuple[dict[str, Any], frozenset[str], Spec]:
    if kind not in KINDS:
        raise KeyError(f"unknown file kind {kind!r}; known: {', '.join(KINDS)}")
    spec = KINDS[kind]
    req = dict(spec.required)
    if kind == "annotations":
        fm = facets or FacetModel()
        req["confidence"] = fm.confidence_dtype() if fm.names else None
        for name in fm.taxonomy:
            req[name] = Str
        for name in fm.boolean:
            req[name] = Bool
    return req, spec.nullable, spec


def empty_table(kind: str, facets: FacetModel | None = None, extra: Mapping[str, Any] | None = None) -> pl.DataFrame:
    req, _, spec = _spec_for(kind, facets)
    schema = {k: (v if v is not None else pl.Struct({})) for k, v in req.items()}
    for k, v in (extra or {}).items():
        schema[k] = v
    return pl.DataFrame(schema=schema)


def validate_table(
    df: pl.DataFrame, kind: str, *, facets: FacetModel | None = None, source: str = "<table>"
) -> pl.DataFrame:
    """Check a canonical-named table against its spec; cast compatible dtypes; raise FormatError."""
    req, nullable, spec = _spec_for(kind, facets)
    missing = [c for c in req if c not in df.columns]
    if missing:
        raise FormatError(f"{source}: missing column(s) {missing} for a {kind} file (has {df.columns})")
    casts = []
    for col, dtype in {**req, **{k: v for k, v in spec.optional.items() if k in df.columns}}.items():
        if dtype is None or col not in df.columns:
            continue
        have = df.schema[col]
        if have == dtype:
            continue
        if have == pl.Null:
            casts.append(pl.col(col).cast(dtype))
            continue
        try:
            df.select(pl.col(col).cast(dtype, strict=True))
        except Exception:
            raise FormatError(f"{source}: column '{col}' has type {have}, expected {dtype} ({kind} file)") from None
        casts.append(pl.col(col).cast(dtype, strict=True))
    if casts:
        df = df.with_columns(casts)
    for col in req:
        if col in nullable:
            continue
        n_null = df[col].null_count()
        if n_null:
            idx = df.with_row_index("__row").filter(pl.col(col).is_null())["__row"][0]
            raise FormatError(f"{source}: column '{col}' is null in {n_null} row(s), first at row {idx + 1}")
    if spec.key and df.height:
        dup = df.group_by(list(spec.key)).len().filter(pl.col("len") > 1)
        if dup.height:
            example = dup.row(0, named=True)
            raise FormatError(f"{source}: duplicate key {list(spec.key)} = {example} in a {kind} file")
    if kind == "annotations" and facets is not None and df.height:
        for name, values in facets.taxonomy.items():
            bad = df.filter(~pl.col(name).is_in(values))
            if bad.height:
                raise FormatError(
                    f"{source}: facet '{name}' has value {bad[name][0]!r} (image {bad['image_id'][0]}) "
                    f"outside its allowed values {values}"
                )
    if kind == "queries" and df.height:
        bad = df.filter(pl.col("query_text").str.strip_chars() == "")
        if bad.height:
            raise FormatError(f"{source}: empty query_text for query {bad['query_id'][0]}")
    if kind in ("qrels", "qrels_with_score", "deepened_qrels") and df.height:
        bad = df.filter(pl.col("relevance_label") < 0)
        if bad.height:
            raise FormatError(f"{source}: negative relevance_label for query {bad['query_id'][0]}")
        known = (*POOLS, DEEPEN_POOL)   # deepened pairs: deepen/qrels.jsonl, read as qrels by evaluate
        bad = df.filter(~pl.col("pool").is_in(list(known)))
        if bad.height:
            raise FormatError(f"{source}: unknown pool {bad['pool'][0]!r} (known: {known})")
    return df


def read_table(
    kind: str,
    path: str | os.PathLike,
    *,
    columns: Mapping[str, str] | None = None,
    facets: FacetModel | None = None,
) -> pl.DataFrame:
    """Read and validate a JSONL file of the given kind; returns canonical column names."""
    path = Path(path)
    if not path.exists():
        raise FormatError(f"{path}: file not found (expected a {kind} file)")
    if path.stat().st_size == 0:
        return empty_table(kind, facets)
    try:
        df = pl.read_ndjson(path, infer_schema_length=None)
    except Exception as exc:  # polars raises ComputeError with line info
        raise FormatError(f"{path}: not valid JSON lines for a {kind} file: {exc}") from None
    df = to_canonical_names(df, columns)
    return validate_table(df, kind, facets=facets, source=str(path))


def iter_json_objects(path: str | os.PathLike, what: str = ""):
    """``(line number, object)`` per non-blank line of a JSONL input file that a user writes (seeds,
    pools, reused labels); a line that is not a JSON object raises FormatError naming the file, the
    config key (``what``) and the line."""
    import json

    where = f"{path} ({what})" if what else str(path)
    for ln, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FormatError(f"{where}: line {ln} is not JSON: {exc}") from None
        if not isinstance(row, dict):
            raise FormatError(f"{where}: line {ln} is not a JSON object")
        yield ln, row


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

    req, nullable, spec = _spec_for(kind, facets)
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
            opt_types = _spec_for(kind, facets)[2].optional
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


def write_table(
    df: pl.DataFrame,
    kind: str,
    path: str | os.PathLike,
    *,
    columns: Mapping[str, str] | None = None,
    facets: FacetModel | None = None,
    validate: bool = True,
) -> int:
    """Validate (canonical names), rename to configured names, write JSONL atomically; returns rows."""
    if validate:
        df = validate_table(df, kind, facets=facets, source=f"{kind} output {path}")
    out = to_disk_names(df, columns)
    with atomic_path(path) as tmp:
        if out.height == 0:
            tmp.write_text("")
        else:
            out.write_ndjson(tmp)
    return out.height

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
    "iter_json_objects",
    "write_table",
    "empty_table",
    "validate_table",
    "spec_for",
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


def spec_for(kind: str, facets: FacetModel | None) -> tuple[dict[str, Any], frozenset[str], Spec]:
    """A kind's contract: its required columns with their dtypes (an annotations file's facets and
    confidence from ``facets``), its nullable columns and its :class:`Spec` (read by ``table_blocks`` too)."""
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
    req, _, spec = spec_for(kind, facets)
    schema = {k: (v if v is not None else pl.Struct({})) for k, v in req.items()}
    for k, v in (extra or {}).items():
        schema[k] = v
    return pl.DataFrame(schema=schema)


def validate_table(
    df: pl.DataFrame, kind: str, *, facets: FacetModel | None = None, source: str = "<table>"
) -> pl.DataFrame:
    """Check a canonical-named table against its spec; cast compatible dtypes; raise FormatError."""
    req, nullable, spec = spec_for(kind, facets)
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

"""The exported rows: one per judged (query, image) pair, queries kept whole and contiguous (the seed
row first), with the image's metadata and its annotation; the checks the card reports and the losses
of the pairs left out (docs/export.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import polars as pl

from ..formats import FormatError, to_disk_names
from ..logs import get_logger
from ..losses import Losses
from ..summary.inputs import Inputs
from .scrub import hide_paths

__all__ = ["build_rows", "check_queries", "hide_paths_col"]

log = get_logger("export")
IMAGE_META = ("license", "doi", "original_dataset_name", "image_url", "mime_type", "width", "height", "sha256")
ANNOTATION_COLS = ("summary", "tags", "confidence")
# group names are image ids; phash and color_signature are the groups' internal signals
NOT_EXPORTED_IMAGE_COLS = {"file_size", "phash", "color_signature", "image_id", "duplicate_group"}


def check_queries(scored: pl.DataFrame) -> list[list[str]]:
    """query_text must be unique per query_id (error); returns groups of query_ids sharing one text."""
    multi = scored.group_by("query_id").agg(pl.col("query_text").n_unique().alias("n")).filter(pl.col("n") > 1)
    if multi.height:
        qid = multi["query_id"][0]
        texts = scored.filter(pl.col("query_id") == qid)["query_text"].unique().to_list()[:3]
        raise FormatError(f"query_text is not unique per query_id: {multi.height} queries have several texts, "
                          f"e.g. {qid}: {texts}")
    shared = (scored.select("query_id", "query_text").unique().group_by("query_text")
              .agg(pl.col("query_id").sort()).filter(pl.col("query_id").list.len() > 1))
    return shared["query_id"].to_list()


def build_rows(inp: Inputs, image_root: str | Path) -> tuple[pl.DataFrame, Losses, dict[str, Any]]:
    """The export table (canonical names, without image bytes), the export losses and checks.

    Queries are kept whole: a query with any pair whose image is unknown or missing on disk is
    dropped entirely (and each of its pairs recorded as a loss), because evaluators sum relevant
    images per query from the rows. Rows of a query are contiguous, queries in first-appearance
    order, the seed row(s) first, then the file order.
    """
    fm, scored = inp.facets, inp.scored
    losses = Losses("export")
    checks: dict[str, Any] = {"duplicate_query_texts": check_queries(scored)}
    if checks["duplicate_query_texts"]:
        log.warning("export: %d query texts are shared by several query_ids (evaluators deduplicate by text): %s",
                    len(checks["duplicate_query_texts"]), checks["duplicate_query_texts"][:5])
    known = set(inp.images["image_id"].to_list())
    root = Path(image_root)
    unique = scored["image_id"].unique().to_list()
    missing = {i: ("image_not_in_images_jsonl" if i not in known else "image_file_missing")
               for i in unique if i not in known or not (root / i).is_file()}
    if missing:
        bad = scored.filter(pl.col("image_id").is_in(list(missing)))
        bad_q = bad["query_id"].unique().sort().to_list()
        for qid, iid in scored.filter(pl.col("query_id").is_in(bad_q)).select("query_id", "image_id").iter_rows():
            reason = missing.get(iid, "query_dropped_with_missing_image")
            losses.add("pair", iid, reason, f"not exported: image {iid!r}" if iid in missing
                       else "another image of this query is missing", query_id=qid)
        for qid in bad_q:
            losses.add("query", qid, "image_missing", "a pool image is missing; the whole query is left out")
        log.warning("export: %d images missing (%s); %d queries left out whole", len(missing),
                    ", ".join(list(missing)[:5]), len(bad_q))
        scored = scored.filter(~pl.col("query_id").is_in(bad_q))
    order = scored.with_row_index("_row").with_columns(
        pl.col("_row").min().over("query_id").alias("_qfirst"))
    rows = order.sort(["_qfirst", "is_seed", "_row"], descending=[False, True, False]).drop("_row", "_qfirst")
    ann_cols = [c for c in (*ANNOTATION_COLS, *fm.names) if c in inp.annotations.columns]
    rows = rows.join(inp.annotations.select("image_id", *ann_cols), on="image_id", how="left", maintain_order="left")
    img_extra = [c for c in inp.images.columns
                 if c not in IMAGE_META and c not in NOT_EXPORTED_IMAGE_COLS and c not in rows.columns]
    rows = rows.join(inp.images.select("image_id", *IMAGE_META, *img_extra), on="image_id", how="left",
                     maintain_order="left")
    rows = rows.with_columns(pl.col(c).cast(pl.String) for c, t in rows.schema.items() if t == pl.Null)
    # verify the promises: contiguous queries, seed first
    runs = rows.select((pl.col("query_id") != pl.col("query_id").shift()).fill_null(True).sum()).item()
    if runs != rows["query_id"].n_unique():
        raise AssertionError("export: rows of a query are not contiguous")
    firsts = rows.group_by("query_id", maintain_order=True).agg(pl.col("is_seed").first().alias("first"),
                                                                pl.col("is_seed").any().alias("any"))
    bad_seed = firsts.filter(pl.col("any") & ~pl.col("first"))
    if bad_seed.height:
        raise AssertionError(f"export: seed row not first for {bad_seed['query_id'].to_list()[:5]}")
    checks["queries_without_seed_row"] = firsts.filter(~pl.col("any"))["query_id"].to_list()
    checks["queries_dropped_missing_images"] = int(losses.to_frame().filter(pl.col("item_type") == "query").height)
    checks["missing_images"] = sorted(missing)
    first_cols = ["query_id", "query_text", "image_id", "relevance_label", "clip_score"]
    rows = rows.select(first_cols + [c for c in rows.columns if c not in first_cols])
    return rows, losses, checks


def hide_paths_col(rows: pl.DataFrame, col: str, local: Mapping[str, str]) -> pl.Expr:
    """A string column with local paths in their public form (scrub.hide_paths), untouched when none occurs."""
    if not any(rows[col].str.contains(path, literal=True).any() for path in local):
        return pl.col(col)
    return pl.col(col).map_elements(lambda v: hide_paths(v, local), return_dtype=pl.String)


def _export_rows(inp: Inputs, image_root: str, *, scored: str, columns: Mapping[str, str],
                 image_col: str) -> tuple[pl.DataFrame, Losses, dict[str, Any]]:
    """The rows to export (:func:`build_rows`), the export's losses and checks; an error when no pair is
    left or when the image column's name is taken."""
    rows, export_losses, checks = build_rows(inp, image_root)
    if rows.height == 0:
        # a dataset without rows cannot even be loaded (`datasets` rejects an empty parquet row group)
        lost = {s: int(c) for s, c in pl.concat([inp.losses, export_losses.to_frame()], how="vertical_relaxed")
                .group_by("stage").len().sort("stage").iter_rows()}
        raise ValueError(
            f"export: no (query, image) pair to export: {scored} has {inp.scored.height} pair(s), "
            f"{checks['queries_dropped_missing_images']} query(s) left out for missing image files; "
            f"losses by stage: {lost or 'none'} (see the losses/ files and the summary)")
    disk_names = to_disk_names(rows.head(0), columns).columns
    if image_col in disk_names:
        raise FormatError(f"columns.image = {image_col!r} collides with another exported column")
    return rows, export_losses, checks

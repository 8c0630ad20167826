"""Images as model input text: the facet model as a vocabulary, one annotation as a table row.

Shared by every stage that shows annotations to a model (the query writer, :mod:`benchmaker.queries`,
and the judge, :mod:`benchmaker.judge`): the columns are defined once, in the system prompt
(:func:`table_columns`, :func:`facet_definitions`), and each image is one row (:func:`row_line`),
fewer tokens per image than JSON. Lives outside both stage packages so that neither stage's version
holds the other's code.
"""

from __future__ import annotations

from typing import Any, Mapping

import polars as pl

from .formats import FacetModel

__all__ = ["facet_definitions", "describe", "cell", "row_line", "tag_sep", "table_columns", "profile_facets"]


def facet_definitions(fm: FacetModel | None) -> list[str]:
    """The facet model as context: every facet with its allowed values, the tag vocabulary."""
    if fm is None:
        return []
    out = ["", "How the images are described (the annotation vocabulary):",
           "- summary: one factual sentence about the main content."]
    for name, values in fm.taxonomy.items():
        out.append(f"- {name}: one of {', '.join(values)}.")
    for name in fm.boolean:
        out.append(f"- {name}: yes or no ({name.replace('_', ' ')}).")
    if fm.vocabulary:
        out.append(f"- tags: {fm.min_tags} to {fm.max_tags} from this vocabulary: {', '.join(fm.vocabulary)}.")
    else:
        out.append(f"- tags: {fm.min_tags} to {fm.max_tags} short lowercase phrases, most salient first.")
    return out


def describe(row: Mapping[str, Any], fm: FacetModel) -> dict:
    d: dict[str, Any] = {"summary": row.get("summary")}
    for name in fm.taxonomy:
        d[name] = row.get(name)
    for name in fm.boolean:
        d[name] = row.get(name)
    d["tags"] = list(row.get("tags") or [])
    return d


def cell(v: Any) -> str:
    """A value as one table cell: whitespace collapsed, no column separator."""
    return " ".join(str(v if v is not None else "").split()).replace("|", "/")


def row_line(key: str, row: Mapping[str, Any], fm: FacetModel) -> str:
    """One image as a table row: ``key | summary | <facet values> | <true flags> | tags`` (the columns
    are defined once, in the system prompt: fewer tokens per image than JSON)."""
    cells = [key, cell(row.get("summary"))]
    cells += [cell(row.get(n)) or "unknown" for n in fm.taxonomy]
    if fm.boolean:
        cells.append(", ".join(n for n in fm.boolean if row.get(n)) or "-")
    cells.append(tag_sep(fm).join(cell(t) for t in (row.get("tags") or [])))
    return " | ".join(cells)


def tag_sep(fm: FacetModel | None) -> str:
    """Tags are separated by a space when the vocabulary has no tag with a space in it (``smoke_present
    rising_plume``: one token fewer per tag than after a comma, whose own token a space does not
    need), else by a comma."""
    if fm is not None and fm.vocabulary and not any(any(c.isspace() for c in t) for t in fm.vocabulary):
        return " "
    return ", "


def table_columns(fm: FacetModel | None) -> str:
    cols = ["key", "summary", *(fm.taxonomy if fm else ())]
    if fm is not None and fm.boolean:
        cols.append("flags (the yes/no facets that are yes, '-' for none)")
    cols.append("tags (separated by spaces)" if tag_sep(fm) == " " else "tags")
    return " | ".join(cols)


def profile_facets(plan: pl.DataFrame, fm: FacetModel) -> list[str]:
    """The core facets of a query plan: the fields of its ``profile`` that are facets (none without one)."""
    if "profile" not in plan.columns or not isinstance(plan.schema["profile"], pl.Struct):
        return []
    names = set(fm.names)
    return [f.name for f in plan.schema["profile"].fields if f.name in names]


def annotated_seeds(plan: pl.DataFrame, annotations: pl.DataFrame, fm: FacetModel,
                    losses: Any) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(each image's tags and facets, once; each query's seeds that have an annotation, with theirs). A
    query none of whose seeds is annotated is a loss (``seed_not_annotated``): the offline rules writer
    and the rules judge both start from these rows."""
    ann = annotations.select(
        "image_id", pl.col("tags").list.drop_nulls().list.unique().alias("tags"), *fm.names
    ).unique("image_id", keep="first")
    seeds = (
        plan.select("query_id", "seed_image_ids").explode("seed_image_ids")
        .rename({"seed_image_ids": "image_id"}).drop_nulls("image_id")
        .join(ann, on="image_id", how="inner")
    )
    have = set(seeds["query_id"].unique().to_list())
    for qid in plan["query_id"].to_list():
        if qid not in have:
            losses.add("query", qid, "seed_not_annotated", "no seed of this query has an annotation")
    return ann, seeds

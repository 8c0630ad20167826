"""Reading the pipeline's outputs once, for the summary and the export (canonical column names).

Every file goes through the readers of :mod:`benchmaker.formats` (``read_table``, and block by block
``iter_table_blocks`` / ``read_table_where`` for the images and annotations tables), so the configured
column names are mapped back to canonical names and every row is validated against its documented kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import polars as pl

from ..formats import FacetModel, empty_table, read_table
from ..io import as_paths
from ..losses import Losses, read_losses
from ..table_blocks import read_table_where

__all__ = ["Corpus", "Inputs", "corpus_profile", "facet_counts", "load_inputs", "as_paths", "read_costs", "scan_corpus",
           "tag_counts"]


@dataclass
class Inputs:
    images: pl.DataFrame
    quarantine: pl.DataFrame
    annotations: pl.DataFrame
    plan: pl.DataFrame
    scored: pl.DataFrame
    losses: pl.DataFrame
    costs: pl.DataFrame | None
    facets: FacetModel
    corpus: Corpus | None = None  # counts over the whole corpus (load_inputs(corpus=True))
    # the stages of `losses` that are not the benchmark's own losses (the rules' outside_stages: a system
    # under evaluation, the audit's second judge; stats.outside_note)
    outside_stages: tuple[str, ...] = ()
    # every stage whose cost files the totals count, in declared order, the ones without a row too (the
    # rules' cost_stages; stats.cost_coverage); empty when the caller did not name them
    cost_stages: tuple[str, ...] = ()


@dataclass
class Corpus:
    """What the summary reports about the whole corpus, aggregated block by block (:func:`corpus_profile`):
    the summary's memory holds one block of the files plus these counts, never every image's row."""
    images: int
    annotations: int
    facet_counts: dict[str, pl.DataFrame]  # facet -> value (String; booleans "true"/"false"), images
    tag_counts: pl.DataFrame               # Tag, Images
    duplicate_groups: int = 0              # duplicate groups with more than one image (images.jsonl)
    duplicate_copies: int = 0              # images beyond the first of their group

    def unique_values(self, name: str) -> int:
        """Distinct values of a facet over the annotations (null counts as one, like polars n_unique)."""
        return self.facet_counts[name].height


def facet_counts(annotations: pl.DataFrame, fm: FacetModel) -> dict[str, pl.DataFrame]:
    """Images per value of every facet of ``annotations`` (booleans as strings)."""
    out = {}
    for name in fm.names:
        value = pl.col(name).cast(pl.String) if name in fm.boolean else pl.col(name)
        out[name] = annotations.group_by(value.alias("value")).len("images").with_columns(
            pl.col("images").cast(pl.Int64))
    return out


def tag_counts(annotations: pl.DataFrame) -> pl.DataFrame:
    return (annotations.select(pl.col("tags").alias("Tag")).explode("Tag").drop_nulls()
            .group_by("Tag").len("Images").with_columns(pl.col("Images").cast(pl.Int64)))


def _add(a: pl.DataFrame | None, b: pl.DataFrame, key: str, count: str) -> pl.DataFrame:
    if a is None:
        return b
    return pl.concat([a, b], how="vertical_relaxed").group_by(key).agg(pl.col(count).sum())


def corpus_profile(*, images: str, annotations: str, facets: FacetModel, columns: Mapping[str, str] | None,
                   block_bytes: int = 64 << 20) -> Corpus:
    """Count images, annotations, facet values and tags of the whole corpus, one block at a time."""
    return scan_corpus(images=images, annotations=annotations, facets=facets, columns=columns,
                       block_bytes=block_bytes)[0]


def scan_corpus(*, images: str, annotations: str, facets: FacetModel, columns: Mapping[str, str] | None,
                keep: pl.Series | None = None,
                block_bytes: int = 64 << 20) -> tuple[Corpus, pl.DataFrame, pl.DataFrame]:
    """One pass over each of the two files, block by block: the corpus counts, and the images and
    annotations rows of the ``keep`` image ids (empty frames without ``keep``)."""
    from ..table_blocks import concat_blocks, iter_table_blocks

    want = keep.cast(pl.String).unique() if keep is not None else pl.Series([], dtype=pl.String)
    n_images, img_rows, dup_groups, n_copies = 0, [], set(), 0
    for blk in iter_table_blocks("images", images, columns=columns, block_bytes=block_bytes):
        n_images += blk.height
        img_rows.append(blk.filter(pl.col("image_id").is_in(want)))
        if "duplicate_group" in blk.columns:  # a group is named by its first member: the others are copies
            copies = blk.filter(pl.col("duplicate_group") != pl.col("image_id"))["duplicate_group"]
            n_copies += copies.len()
            dup_groups.update(copies.unique().to_list())
    n_ann, ann_rows = 0, []
    fc: dict[str, pl.DataFrame | None] = {name: None for name in facets.names}
    tc: pl.DataFrame | None = None
    for blk in iter_table_blocks("annotations", annotations, columns=columns, facets=facets,
                                 block_bytes=block_bytes):
        n_ann += blk.height
        ann_rows.append(blk.filter(pl.col("image_id").is_in(want)))
        for name, counts in facet_counts(blk, facets).items():
            fc[name] = _add(fc[name], counts, "value", "images")
        tc = _add(tc, tag_counts(blk), "Tag", "Images")
    empty_fc = pl.DataFrame(schema={"value": pl.String, "images": pl.Int64})
    corpus = Corpus(images=n_images, annotations=n_ann,
                    facet_counts={k: (v if v is not None else empty_fc) for k, v in fc.items()},
                    tag_counts=tc if tc is not None else pl.DataFrame(schema={"Tag": pl.String, "Images": pl.Int64}),
                    duplicate_groups=len(dup_groups), duplicate_copies=n_copies)
    return (corpus, concat_blocks(img_rows, "images", source=images),
            concat_blocks(ann_rows, "annotations", facets=facets, source=annotations))


def read_costs(paths: Sequence[str], stages: Sequence[str | None] | None = None) -> pl.DataFrame | None:
    """All cost files concatenated (``cached`` filled with false, ``attempt`` dropped); None if none given.
    ``stages`` (one per file; the rule's ``cost_stages``, :func:`benchmaker.stages.counted_stages`): the
    stage a file's rows are counted under (``evaluate: <system>``: a reranker's rows say ``evaluate``),
    None for the rows' own."""
    if not paths:
        return None
    stages = _per_file(paths, stages, "cost")
    frames = []
    for p, stage in zip(paths, stages):
        df = read_table("costs", p)
        if "cached" not in df.columns:
            df = df.with_columns(pl.lit(False).alias("cached"))
        if "last_run" not in df.columns:    # cost files without the ledger describe one run
            df = df.with_columns(pl.lit(True).alias("last_run"))
        if stage is not None:
            df = df.with_columns(pl.lit(stage, pl.String).alias("stage"))
        frames.append(df.select(
            "stage", "item_id", "model", "mode", "input_tokens", "cached_input_tokens", "output_tokens",
            "reasoning_tokens", "cost_usd", pl.col("cached").fill_null(False).cast(pl.Boolean),
            pl.col("last_run").fill_null(True).cast(pl.Boolean)))
    return pl.concat(frames, how="vertical_relaxed")


def _per_file(paths: Sequence[str], stages: Sequence[str | None] | None, kind: str) -> Sequence[str | None]:
    """``stages``, one per file of ``paths`` (None: [None] * len(paths)), or the error naming the param."""
    if stages is None:
        return [None] * len(paths)
    if len(stages) != len(paths):
        files = "losses" if kind == "loss" else "costs"
        raise ValueError(f"{len(paths)} {files} file(s) but {len(stages)} {kind} stage(s): the rule's params "
                         f"{kind}_stages must name one per file of its input {files} (rules/common.smk "
                         f"{kind}_stages())")
    return stages


def read_all_losses(paths: Sequence[str], stages: Sequence[str | None] | None = None) -> pl.DataFrame:
    """Every losses file's rows; ``stages`` (one per file; the rule's ``loss_stages``,
    :func:`benchmaker.stages.counted_stages`): the stage a file's rows are counted under, None
    for the rows' own (``evaluate: <system>`` for a system under evaluation, whose rows say ``evaluate``)."""
    stages = _per_file(paths, stages, "loss")
    frames = [read_losses(p) if s is None else read_losses(p).with_columns(pl.lit(s, pl.String).alias("stage"))
              for p, s in zip(paths, stages)]
    frames = [f for f in frames if f.height]
    return pl.concat(frames, how="vertical_relaxed") if frames else Losses("none").to_frame()


def load_inputs(
    *,
    images: str,
    quarantine: str | None,
    annotations: str,
    plan: str | None,
    scored: str,
    losses: str | Sequence[str] | None,
    costs: str | Sequence[str] | None,
    columns: Mapping[str, str] | None,
    facets: Mapping[str, Any],
    corpus: bool = False,
    loss_stages: Sequence[str | None] | None = None,
    cost_stages: Sequence[str | None] | None = None,
    outside_stages: Sequence[str] | None = None,
) -> Inputs:
    """The stage inputs, validated. The images and annotations tables hold only the images of the
    scored pairs, read block by block, so memory is bounded by the pairs, not by the corpus
    (docs/performance.md). ``corpus``: the same single pass over each file also counts the whole
    corpus (``Inputs.corpus``, :class:`Corpus`)."""
    fm = FacetModel.from_config(facets)
    scored_df = read_table("qrels_with_score", scored, columns=columns)
    used = scored_df["image_id"].unique()
    counts = None
    if corpus:
        counts, imgs, ann = scan_corpus(images=images, annotations=annotations, facets=fm, columns=columns,
                                        keep=used)
    else:
        imgs = read_table_where("images", images, key="image_id", values=used, columns=columns)
        ann = read_table_where("annotations", annotations, key="image_id", values=used, columns=columns,
                               facets=fm)
    return Inputs(
        images=imgs,
        quarantine=read_table("quarantine", quarantine) if quarantine else empty_table("quarantine"),
        annotations=ann,
        plan=read_table("query_plan", plan, columns=columns) if plan else empty_table("query_plan"),
        scored=scored_df,
        losses=read_all_losses(as_paths(losses), loss_stages),
        costs=read_costs(as_paths(costs), cost_stages),
        facets=fm,
        corpus=counts,
        outside_stages=tuple(outside_stages or ()),
        cost_stages=tuple(dict.fromkeys(s for s in cost_stages or () if s)),
    )

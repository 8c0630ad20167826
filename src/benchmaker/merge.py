"""Merging per-shard outputs into the single files named in the contract."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import polars as pl

from .formats import FacetModel, read_table, write_table
from .logs import get_logger
from .losses import merge_losses

__all__ = ["merge_annotations"]

log = get_logger("merge")


def merge_annotations(*, parts: Sequence[str], loss_parts: Sequence[str], annotations: str, losses: str,
                      facets: Mapping[str, Any], columns: Mapping[str, str]) -> None:
    fm = FacetModel.from_config(facets)
    frames = [read_table("annotations", p, columns=columns, facets=fm) for p in parts]
    frames = [f for f in frames if f.height]
    df = pl.concat(frames, how="vertical_relaxed").sort("image_id") if frames else read_table(
        "annotations", parts[0], columns=columns, facets=fm)
    n = write_table(df, "annotations", annotations, columns=columns, facets=fm)
    n_loss = merge_losses(loss_parts, losses)
    log.info("merged %d shards: %d annotations, %d losses", len(parts), n, n_loss)

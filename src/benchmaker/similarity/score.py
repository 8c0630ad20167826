"""The ``score`` stage: qrels + query and image embeddings → qrels_with_score.jsonl. No torch.

``clip_score`` is the cosine similarity of the L2-normalised query-text and image embeddings of the same
CLIP model, in [-1, 1] (computed in float64 from the stored float32 vectors, chunk by chunk). It is null when the image
(or the query) has no embedding; such pairs go to the losses file with the image's reason from the
``embed_images`` losses. ``clip_rank`` (config ``similarity.rank_column``) is the 1-based rank of the
pair by ``clip_score`` descending within its query (ties by image_id), null when the score is null.
With ``similarity.logit_column`` set, ``logit_scale * clip_score`` is written too (what upstream's
``clip_score`` was: CLIP's logit, e.g. 100 x cosine for OpenAI-style checkpoints).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import polars as pl

from ..formats import FormatError, _rename_map, read_table, to_disk_names, validate_table
from ..io import as_paths, atomic_path
from ..logs import get_logger
from ..losses import Losses, read_losses
from ..settings_schema import default
from .embed import read_embeddings

__all__ = ["run", "score_pairs", "cosine_rows", "gather_image_embeddings", "image_loss_reasons"]

log = get_logger("similarity.score")
_CHUNK = 16384


def _matrix(df: pl.DataFrame, source: str) -> np.ndarray:
    """The embedding column as a float32 [n, d] matrix (rows normalised later, chunk by chunk)."""
    if df.height == 0:
        return np.zeros((0, 0), dtype=np.float32)
    m = np.asarray(df["embedding"].to_numpy(), dtype=np.float32)
    if m.ndim != 2:
        raise FormatError(f"{source}: 'embedding' is not a fixed-size vector column")
    return m


def _unit64(m: np.ndarray) -> np.ndarray:
    m = m.astype(np.float64)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return m / norms


def cosine_rows(q: np.ndarray, im: np.ndarray, qi: np.ndarray, ii: np.ndarray) -> np.ndarray:
    """cos(q[qi[k]], im[ii[k]]) for every k, in chunks of float64 (rows normalised per chunk, so
    the matrices may stay float32: memory is one chunk of float64, not the whole matrix)."""
    out = np.empty(len(qi), dtype=np.float64)
    for s in range(0, len(qi), _CHUNK):
        a, b = _unit64(q[qi[s:s + _CHUNK]]), _unit64(im[ii[s:s + _CHUNK]])
        out[s:s + _CHUNK] = np.einsum("ij,ij->i", a, b)
    return np.clip(out, -1.0, 1.0)


def gather_image_embeddings(paths: Sequence[str], image_ids: pl.Series, *, model_id: str | None,
                            columns: Mapping[str, str] | None = None) -> pl.DataFrame:
    """``image_id, embedding`` (float32) of only these images, read shard by shard with a filtered
    parquet scan: memory is bounded by the images the pairs use, not by the images embedded."""
    import pyarrow.parquet as pq

    disk = _rename_map(columns, to_disk=True)
    id_col, emb_col = (disk.get(c, c) for c in ("image_id", "embedding"))   # renamed on disk, else canonical
    wanted = image_ids.unique().implode()
    frames = []
    for p in paths:
        if not Path(p).exists():
            raise FormatError(f"{p}: embeddings file not found")
        try:
            raw = pq.read_metadata(p).metadata or {}
            df = (pl.scan_parquet(p).select(id_col, emb_col).filter(pl.col(id_col).is_in(wanted))
                  .collect().rename({id_col: "image_id", emb_col: "embedding"}))
        except Exception as exc:
            raise FormatError(f"{p}: not a readable parquet embeddings file with columns {id_col!r}, "
                              f"{emb_col!r}: {exc}") from None
        have = raw.get(b"benchmaker.model_id", b"").decode()
        if model_id and have and have != model_id and df.height:
            raise FormatError(f"{p}: image embeddings of model {have!r} but query embeddings of "
                              f"{model_id!r}; rerun the embed rules with one similarity.model")
        if df.height:
            frames.append(df)
    if not frames:
        return pl.DataFrame(schema={"image_id": pl.String, "embedding": pl.List(pl.Float32)})
    return pl.concat(frames)


def score_pairs(qrels: pl.DataFrame, queries: pl.DataFrame, images: pl.DataFrame) -> pl.DataFrame:
    """Add ``clip_score`` and ``clip_rank`` to a qrels table (canonical names).

    ``queries``: query_id, embedding; ``images``: image_id, embedding (any order; duplicates: first wins).
    """
    queries = queries.select("query_id", "embedding").unique("query_id", keep="first", maintain_order=True)
    images = images.select("image_id", "embedding").unique("image_id", keep="first", maintain_order=True)
    qm, im = _matrix(queries, "query embeddings"), _matrix(images, "image embeddings")
    if qm.size and im.size and qm.shape[1] != im.shape[1]:
        raise FormatError(f"query embeddings are {qm.shape[1]}-d but image embeddings {im.shape[1]}-d: "
                          "they come from different models; rerun embed_queries and embed_images")
    idx = (
        qrels.select("query_id", "image_id")
        .join(queries.select("query_id").with_row_index("__qi"), on="query_id", how="left", maintain_order="left")
        .join(images.select("image_id").with_row_index("__ii"), on="image_id", how="left", maintain_order="left")
    )
    qi, ii = idx["__qi"], idx["__ii"]
    ok = (qi.is_not_null() & ii.is_not_null()).to_numpy()
    scores = np.full(qrels.height, np.nan, dtype=np.float64)
    if ok.any():
        scores[ok] = cosine_rows(qm, im, qi.to_numpy()[ok].astype(np.int64), ii.to_numpy()[ok].astype(np.int64))
    out = qrels.with_columns(pl.Series("clip_score", scores, dtype=pl.Float64).fill_nan(None))
    ranked = (
        out.select("query_id", "image_id", "clip_score").with_row_index("__row")
        .sort(["query_id", "clip_score", "image_id"], descending=[False, True, False], nulls_last=True)
        .with_columns(pl.when(pl.col("clip_score").is_not_null())
                      .then(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("query_id"))
                      .otherwise(None).alias("clip_rank"))
        .sort("__row")
    )
    return out.with_columns(ranked["clip_rank"])


def image_loss_reasons(paths: list[str]) -> pl.DataFrame:
    """``image_id, reason, detail`` of the images that embed_images lost (its losses files; first wins)."""
    frames = [read_losses(p) for p in paths]
    frames = [f.filter(pl.col("item_type") == "image") for f in frames if f.height]
    if not frames:
        return pl.DataFrame(schema={"image_id": pl.String, "reason": pl.String, "detail": pl.String})
    return (pl.concat(frames).select(pl.col("item_id").alias("image_id"), "reason", "detail")
            .unique("image_id", keep="first", maintain_order=True))


def run(*, qrels: str, query_embeddings: str, image_embeddings: str | Sequence[str],
        embed_losses: str | Sequence[str] | None = None, scored: str, losses: str,
        logit_column: str | None = None, rank_column: str | None = default("similarity.rank_column"),
        columns: Mapping[str, str] | None = None, version: str | None = None, threads: int = 1) -> int:
    """Stage ``score``: write qrels_with_score.jsonl and the pair losses (see module doc)."""
    rank_column = rank_column or "clip_rank"
    q = read_table("qrels", qrels, columns=columns)
    qe, qmeta = read_embeddings(query_embeddings, columns=columns, kind="query")
    model_id = qmeta.get("model_id")
    images = gather_image_embeddings(as_paths(image_embeddings), q["image_id"], model_id=model_id,
                                     columns=columns)
    log.info("score: gathered %d image embeddings used by %d pairs", images.height, q.height)
    out = score_pairs(q, qe, images)

    disk_names = set(to_disk_names(out, columns).columns)
    if logit_column:
        if logit_column in disk_names or logit_column == rank_column:
            raise FormatError(f"similarity.logit_column {logit_column!r} collides with an existing column")
        scale = float(qmeta.get("logit_scale", "nan"))
        if not np.isfinite(scale):
            raise FormatError(f"{query_embeddings}: no logit_scale in its metadata; rerun embed_queries")
        out = out.with_columns((pl.col("clip_score") * scale).alias(logit_column))
    if rank_column != "clip_rank" and rank_column in disk_names:
        raise FormatError(f"similarity.rank_column {rank_column!r} collides with an existing column")

    out = validate_table(out, "qrels_with_score", source=f"qrels_with_score output {scored}")
    disk = to_disk_names(out, columns)
    if rank_column != "clip_rank":
        disk = disk.rename({"clip_rank": rank_column})
    with atomic_path(scored) as tmp:
        if disk.height:
            disk.write_ndjson(tmp)
        else:
            tmp.write_text("")

    # losses: every pair without a score, with the image's reason when embed_images recorded one
    loss = Losses("similarity")
    missing = out.filter(pl.col("clip_score").is_null()).select("query_id", "image_id")
    if missing.height:
        reasons = image_loss_reasons(as_paths(embed_losses))
        have_q = set(qe["query_id"].to_list())
        missing = missing.join(reasons, on="image_id", how="left", maintain_order="left")
        for query_id, image_id, reason, detail in missing.iter_rows():
            if reason is None:
                reason = "query_not_embedded" if query_id not in have_q else "image_not_embedded"
            loss.add("pair", image_id, reason, detail, query_id=query_id)
    loss.write(losses)
    n_scored = out.height - missing.height
    log.info("score: %d pairs, %d scored, %d without a score -> %s", out.height, n_scored, missing.height, scored)
    return out.height

"""The ``sage`` view: each run scored the way the Sage team's evaluator reports it (docs/evaluate.md).

The Sage evaluator (``imsearch_eval``, ``framework/evaluator.py``) indexes **one object per row of the
flat table** (one per judged (query, image) pair, carrying that row's ``query_id`` and label), runs
every distinct query *text* against that whole collection, keeps the top ``limit`` objects and scores
them by their stored properties. This module emulates that collection from one of our runs and
computes the columns of its ``query_eval_metrics.csv``, with the same names and definitions:

* the collection is the flat table (``qrels.jsonl``): an image in two pools is two objects with the
  same score; an image the run ranks that is in no pool is not in the collection;
* queries are deduplicated by text (the first query id in file order keeps it, as ``drop_duplicates``);
* objects are ordered by the system's score, descending; ties (always: the objects of one image) by
  the queried query's own row first, then the object's query id, then the image id; cut at ``limit``;
* over the returned list R: ``total_images`` = |R|, ``correctly_returned`` = rows of R that belong to
  the query, ``relevant_images`` = the sum of their labels, ``accuracy``/``precision`` = those over |R|,
  ``recall`` over the query's labels in the flat table, ``hit``, ``diversity`` (1 − mean pairwise cosine
  similarity of R's vectors), ``<score>_NDCG`` (``sklearn.metrics.ndcg_score`` over *all* rows of R,
  other queries' rows with their own labels, 0 below two rows) and ``<score>_reciprocal_rank`` (first
  row of R with a label > 0, any query's).

Everything is computed for all queries at once (polars, numpy); NDCG by scikit-learn itself (the
per-row function ``ndcg_score`` averages, on the lists of one length at a time: :func:`ndcg_per_list`),
so it is the evaluator's definition by construction.

``complete`` (ours, not the evaluator's) says whether the run holds the whole top ``limit`` of the
collection for the query: a run lists the corpus top ``depth`` (plus, for clip and bm25, the
collection's top ``depth``: ``collection_depth`` in the run's metadata), so objects scored below that
cut may be missing; a query whose list reaches below it is scored on what the run has and marked
``complete = false``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_SCORE_COLUMN",
    "METRIC_COLUMNS",
    "ndcg_per_list",
    "returned_objects",
    "sage_columns",
    "sage_queries",
    "sage_view",
]

DEFAULT_LIMIT = 25  # imsearch_eval's BenchmarkEvaluator(limit=25); the NRP/INQUIRE jobs used 50
DEFAULT_SCORE_COLUMN = "score"  # the name the system's score has as a vector-DB result column
COUNT_COLUMNS = ("total_images", "correctly_returned", "incorrectly_returned", "relevant_images",
                 "non_relevant_images")
METRIC_COLUMNS = (*COUNT_COLUMNS, "accuracy", "precision", "recall", "hit", "diversity")


def sage_columns(score_column: str = DEFAULT_SCORE_COLUMN, query_id_column: str = "query_id") -> list[str]:
    """The columns of imsearch_eval's query_eval_metrics.csv for one score column, in its order."""
    return [query_id_column, "query", *METRIC_COLUMNS, f"{score_column}_NDCG", f"{score_column}_reciprocal_rank"]


def sage_queries(qrels: pl.DataFrame) -> pl.DataFrame:
    """``query_id, query_text`` of the queries the evaluator runs: one per distinct text, the first
    query id in file order (``drop_duplicates(subset=[query], keep="first")``), in that order."""
    return qrels.select("query_id", "query_text").unique("query_text", keep="first", maintain_order=True)


def _trust(run: pl.DataFrame, depth: int, collection_depth: int | None, in_collection: pl.Expr) -> pl.DataFrame:
    """Per query, the score down to which the run is known to hold every collection image (−inf when it
    holds them all): the corpus cut (the ``depth``-th entry) and, with ``collection_depth``, the
    collection cut (its ``collection_depth``-th collection image); the lower of the two."""
    ranked = run.sort(["query_id", "score", "image_id"], descending=[False, True, False])
    cut = ranked.group_by("query_id", maintain_order=True).agg(
        pl.when(pl.len() >= depth).then(pl.col("score").get(depth - 1, null_on_oob=True))
        .otherwise(float("-inf")).alias("_cut"))
    if collection_depth:
        coll = ranked.filter(in_collection).group_by("query_id", maintain_order=True).agg(
            pl.when(pl.len() >= collection_depth).then(pl.col("score").get(collection_depth - 1, null_on_oob=True))
            .otherwise(float("-inf")).alias("_ccut"))
        cut = cut.join(coll, on="query_id", how="left").with_columns(
            pl.min_horizontal("_cut", pl.col("_ccut").fill_null(float("-inf"))).alias("_cut")).drop("_ccut")
    return cut


def returned_objects(run: pl.DataFrame, qrels: pl.DataFrame, limit: int, *, depth: int | None = None,
                     collection_depth: int | None = None, queries: Sequence[str] | None = None
                     ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The emulated search result of every query: (R, completeness).

    R: ``query_id, pos, image_id, score, object_query_id, relevance_label, own`` (pos 1..|R| per query,
    in the order above); completeness: ``query_id, complete`` for every query of ``queries`` (default
    every query of the run)."""
    flat = qrels.select("query_id", "image_id", pl.col("relevance_label").cast(pl.Int64))
    images = flat.select("image_id").unique()
    run = run.select("query_id", "image_id", pl.col("score").cast(pl.Float64))
    if queries is not None:
        run = run.filter(pl.col("query_id").is_in(list(queries)))
    in_coll = pl.col("image_id").is_in(images["image_id"].implode())
    # only the first `limit` collection images can contribute (each is at least one object), and the
    # images tied with the limit-th (their objects may come first under the tie-break)
    top_img = run.filter(in_coll).filter(pl.col("score").rank("min", descending=True).over("query_id") <= limit)
    objs = (top_img.join(flat.rename({"query_id": "object_query_id"}), on="image_id", how="inner")
            .with_columns((pl.col("object_query_id") == pl.col("query_id")).alias("own"))
            .sort(["query_id", "score", "own", "object_query_id", "image_id"],
                  descending=[False, True, True, False, False]))
    r = (objs.group_by("query_id", maintain_order=True).head(limit)
         .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("query_id").alias("pos"))
         .select("query_id", "pos", "image_id", "score", "object_query_id", "relevance_label", "own"))
    qs = pl.DataFrame({"query_id": list(queries) if queries is not None else run["query_id"].unique().sort()},
                      schema={"query_id": pl.String})
    if depth:
        trust = _trust(run, int(depth), collection_depth, in_coll)
        n_trusted = (objs.join(trust, on="query_id", how="left")
                     .filter(pl.col("score") >= pl.col("_cut").fill_null(float("-inf")))
                     .group_by("query_id").len("_n"))
        comp = (qs.join(trust, on="query_id", how="left").join(n_trusted, on="query_id", how="left")
                .select("query_id", ((pl.col("_cut").fill_null(float("-inf")) == float("-inf"))
                                     | (pl.col("_n").fill_null(0) >= limit)).alias("complete")))
    else:
        comp = qs.with_columns(pl.lit(True).alias("complete"))
    return r, comp


def ndcg_per_list(labels: Sequence[Sequence[float]], scores: Sequence[Sequence[float]]) -> np.ndarray:
    """``sklearn.metrics.ndcg_score`` of each returned list (labels and scores of its rows); 0.0 below two
    rows, as the evaluator.

    ``ndcg_score`` averages its rows, so lists of one length go, as one matrix, through the function it
    averages (``sklearn.metrics._ranking._ndcg_sample_scores``: the same code, one value per row); where a
    scikit-learn release lacks it, ``ndcg_score`` is called list by list."""
    from sklearn.metrics import ndcg_score

    try:
        from sklearn.metrics._ranking import _ndcg_sample_scores
    except ImportError:  # pragma: no cover - a scikit-learn without the private helper
        _ndcg_sample_scores = None
    out = np.zeros(len(labels), dtype=np.float64)
    lengths = np.fromiter((len(x) for x in labels), dtype=np.int64, count=len(labels))
    for n in np.unique(lengths[lengths >= 2]):
        rows = np.flatnonzero(lengths == n)
        y = np.asarray([labels[i] for i in rows], dtype=np.float64)
        sc = np.asarray([scores[i] for i in rows], dtype=np.float64)
        if _ndcg_sample_scores is not None:
            out[rows] = _ndcg_sample_scores(y, sc, k=None, ignore_ties=False)
        else:  # pragma: no cover
            out[rows] = [ndcg_score(y[j:j + 1], sc[j:j + 1]) for j in range(len(rows))]
    return out


def _diversity(r: pl.DataFrame, emb_index: Mapping[str, int] | None, emb: np.ndarray | None,
               block_rows: int = 8192) -> dict[str, float]:
    """Per query with |R| ≥ 2 and a vector for every row: 1 − mean upper-triangle cosine similarity.

    The mean over pairs is (‖Σv‖² − Σ‖v‖²) / (n(n−1)) for L2-normalised rows v (sklearn's
    ``cosine_similarity`` normalises, a zero vector stays zero), computed in float64 for blocks of
    whole queries (bounded memory)."""
    if not emb_index or emb is None or not r.height:
        return {}
    idx = np.fromiter((emb_index.get(i, -1) for i in r["image_id"].to_list()), dtype=np.int64, count=r.height)
    qid = r["query_id"].to_numpy()
    starts = np.flatnonzero(np.r_[True, qid[1:] != qid[:-1]])
    counts = np.diff(np.r_[starts, len(qid)])
    missing = np.add.reduceat((idx < 0).astype(np.int64), starts) > 0
    pair_sum = np.empty(len(starts), dtype=np.float64)
    per_block = max(1, block_rows // max(1, int(counts.max())))
    for b in range(0, len(starts), per_block):
        lo, hi = starts[b], (starts[b + per_block] if b + per_block < len(starts) else len(qid))
        v = emb[np.maximum(idx[lo:hi], 0)].astype(np.float64)
        norm = np.linalg.norm(v, axis=1, keepdims=True)
        v = np.divide(v, norm, out=np.zeros_like(v), where=norm > 0)
        local = starts[b:b + per_block] - lo
        total = np.add.reduceat(v, local, axis=0)
        sq = np.add.reduceat(np.einsum("ij,ij->i", v, v), local)
        pair_sum[b:b + per_block] = (np.einsum("ij,ij->i", total, total) - sq) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        ils = pair_sum / (counts * (counts - 1) / 2.0)
    ok = (counts >= 2) & ~missing
    return {q: float(1.0 - s) for q, s, good in zip(qid[starts], ils, ok) if good}


def sage_view(run: pl.DataFrame, qrels: pl.DataFrame, *, limit: int = DEFAULT_LIMIT, depth: int | None = None,
              collection_depth: int | None = None, emb_index: Mapping[str, int] | None = None,
              emb: np.ndarray | None = None, score_column: str = DEFAULT_SCORE_COLUMN,
              query_id_column: str = "query_id") -> pl.DataFrame:
    """One row per evaluated query (deduplicated by text, in flat-table order): the columns of
    imsearch_eval's query_eval_metrics.csv (:func:`sage_columns`), then ``complete``.

    ``run``: ``query_id, image_id, score``; ``qrels``: the flat table's ``query_id, query_text,
    image_id, relevance_label`` rows in file order; ``depth`` / ``collection_depth``: how far the run
    is known complete (module docstring; None = the run is the system's whole answer); ``emb_index`` /
    ``emb``: the image vectors for ``diversity`` (null when an image of R has none)."""
    limit = int(limit)
    if limit < 1:
        raise ValueError(f"evaluate.sage.limit must be at least 1, got {limit}")
    queries = sage_queries(qrels)
    qids = queries["query_id"].to_list()
    r, comp = returned_objects(run, qrels, limit, depth=depth, collection_depth=collection_depth, queries=qids)
    denom = qrels.group_by("query_id").agg(pl.col("relevance_label").cast(pl.Int64).sum().alias("_in_dataset"))
    rel_own = pl.when(pl.col("own")).then(pl.col("relevance_label")).otherwise(0)
    agg = r.group_by("query_id", maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("total_images"),
        pl.col("own").sum().cast(pl.Int64).alias("correctly_returned"),
        rel_own.sum().cast(pl.Int64).alias("relevant_images"),
        pl.col("pos").filter(pl.col("relevance_label") > 0).min().alias("_first"),
        pl.col("relevance_label").alias("_labels"),
        pl.col("score").alias("_scores"),
    )
    ndcg = dict(zip(agg["query_id"].to_list(), ndcg_per_list(agg["_labels"].to_list(), agg["_scores"].to_list())))
    div = _diversity(r, emb_index, emb)
    nd, rr = f"{score_column}_NDCG", f"{score_column}_reciprocal_rank"
    n = pl.col("total_images")
    out = (queries.join(agg.drop("_labels", "_scores"), on="query_id", how="left", maintain_order="left")
           .join(denom, on="query_id", how="left", maintain_order="left")
           .join(comp, on="query_id", how="left", maintain_order="left")
           .with_columns(pl.col(c).fill_null(0) for c in ("total_images", "correctly_returned", "relevant_images"))
           .with_columns(
               (n - pl.col("correctly_returned")).alias("incorrectly_returned"),
               (n - pl.col("relevant_images")).alias("non_relevant_images"),
               pl.when(n > 0).then(pl.col("correctly_returned") / n).otherwise(0.0).alias("accuracy"),
               pl.when(n > 0).then(pl.col("relevant_images") / n).otherwise(0.0).alias("precision"),
               pl.when(pl.col("_in_dataset").fill_null(0) != 0)
               .then(pl.col("relevant_images") / pl.col("_in_dataset")).otherwise(0.0).alias("recall"),
               (pl.col("relevant_images") > 0).cast(pl.Int64).alias("hit"),
               # empty result: the evaluator's fixed dict has diversity 0 and no NDCG / RR keys (NaN)
               pl.when(n == 0).then(0.0).otherwise(
                   pl.col("query_id").replace_strict(div, default=None, return_dtype=pl.Float64)).alias("diversity"),
               pl.when(n == 0).then(None).otherwise(
                   pl.col("query_id").replace_strict(ndcg, default=None, return_dtype=pl.Float64)).alias(nd),
               pl.when(n == 0).then(None).when(pl.col("_first").is_null()).then(0.0)
               .otherwise(1.0 / pl.col("_first")).alias(rr),
               pl.col("complete").fill_null(True),
           ))
    return out.rename({"query_text": "query"}).select(
        pl.col("query_id").alias(query_id_column), "query", *METRIC_COLUMNS, nd, rr, "complete")

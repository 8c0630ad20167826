"""What every evaluate job reads: the queries, their judged pools and the benchmark corpus.

The corpus is every accepted image (``images.jsonl``), the same set the annotator saw; the judged
pools come from ``qrels.jsonl``. Canonical column names throughout (files are read with
:func:`benchmaker.formats.read_table`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from ..formats import read_table

__all__ = ["Bench", "load_bench"]


@dataclass
class Bench:
    qrels: pl.DataFrame          # query_id, query_text, image_id, relevance_label, pool, is_seed
    queries: pl.DataFrame        # query_id, query_text (sorted by query_id)
    images: pl.DataFrame         # the images table (canonical names)

    @property
    def query_ids(self) -> list[str]:
        return self.queries["query_id"].to_list()

    def pools(self, doc_ids: list[str]) -> list[np.ndarray]:
        """Per query (in ``queries`` order), the indices into ``doc_ids`` of its judged pool."""
        pos = pl.DataFrame({"image_id": doc_ids, "_d": np.arange(len(doc_ids), dtype=np.int64)},
                           schema={"image_id": pl.String, "_d": pl.Int64})
        g = (self.qrels.select("query_id", "image_id").join(pos, on="image_id", how="inner")
             .group_by("query_id").agg("_d"))
        by_q = dict(g.iter_rows())
        return [np.asarray(by_q.get(q, []), dtype=np.int64) for q in self.query_ids]

    def collection(self, doc_ids: list[str]) -> np.ndarray:
        """The indices into ``doc_ids`` of every image of any judged pool (the collection the Sage
        evaluator searches: the flat table's images), ascending."""
        pos = pl.DataFrame({"image_id": doc_ids, "_d": np.arange(len(doc_ids), dtype=np.int64)},
                           schema={"image_id": pl.String, "_d": pl.Int64})
        return np.sort(pos.join(self.qrels.select("image_id").unique(), on="image_id", how="semi")["_d"].to_numpy())


def load_bench(qrels: str, images: str, columns: Mapping[str, str] | None = None) -> Bench:
    q = read_table("qrels", qrels, columns=columns)
    imgs = read_table("images", images, columns=columns)
    queries = q.select("query_id", "query_text").unique("query_id", keep="first").sort("query_id")
    return Bench(qrels=q, queries=queries, images=imgs)

"""Corpus-level views of the exported judgments for evaluators other than imsearch_eval (docs/export.md).

* ``mteb/{corpus,queries,qrels}/<split>-00000-of-00001.parquet``: the three configs mteb's retrieval
  tasks (``Any2AnyRetrieval``, text→image) load — ``corpus`` (``id``, ``image`` as a ``datasets.Image``
  with the bytes embedded), ``queries`` (``id``, ``text``), ``qrels`` (``query-id``, ``corpus-id``,
  ``score`` int). They are declared in the card's YAML ``configs`` beside the flat table, which stays
  the ``default`` config (what the Sage evaluator reads).
* ``beir/``: ``corpus.jsonl`` (``_id``, ``title`` = "", ``text`` = the annotator's summary, ``image`` =
  the image's path inside the flat table and the mteb corpus, i.e. its ``image_id``), ``queries.jsonl``
  (``_id``, ``text``), ``qrels/<split>.tsv`` (``query-id``, ``corpus-id``, ``score``).
* ``trec/qrels.txt``: ``qid 0 docid rel``.

Every query and image id in these files is written with :func:`benchmaker.ids.trec_id` (whitespace-free,
reversible with ``from_trec_id``), so all views and evaluate's run files share one id space. Images appear
once in each corpus however many pools hold them.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from ..ids import trec_id

__all__ = ["MTEB_CONFIGS", "MtebCorpusWriter", "mteb_configs", "write_ir_views"]

MTEB_CONFIGS = ("corpus", "queries", "qrels")


def _ids(col: str) -> pl.Expr:
    return pl.col(col).map_elements(trec_id, return_dtype=pl.String)


def mteb_configs(split: str) -> list[dict]:
    """The card's YAML ``configs`` entries of the mteb layout: ``corpus``, ``queries``, ``qrels`` and the
    same files again as ``mteb-corpus``, ``mteb-queries``, ``mteb-qrels``. mteb's loader reads the qrels
    of an unprefixed task from the ``default`` config (here the flat table), so the task definition in
    docs/evaluate.md names the subset ``mteb`` and mteb then reads ``mteb-<config>``."""
    return [{"config_name": f"{prefix}{c}", "data_files": [{"split": split, "path": f"mteb/{c}/{split}-*.parquet"}]}
            for prefix in ("", "mteb-") for c in MTEB_CONFIGS]


class MtebCorpusWriter:
    """``mteb/corpus/<split>-00000-of-00001.parquet`` written image by image as the export reads each
    image (``add``), so every image file is read and converted once for the flat table and this view
    (images in first-appearance order of the flat table, each once)."""

    def __init__(self, out: Path, split: str):
        import pyarrow.parquet as pq
        from datasets import Features, Image, Value

        (out / "mteb" / "corpus").mkdir(parents=True, exist_ok=True)
        self.schema = Features({"id": Value("string"), "image": Image()}).arrow_schema
        self.writer = pq.ParquetWriter(out / "mteb" / "corpus" / f"{split}-00000-of-00001.parquet", self.schema,
                                       compression="zstd")
        self.ids: list[str] = []
        self.images: list[dict] = []
        self.seen: set[str] = set()
        self.count = 0

    def add(self, image_id: str, data: bytes | None) -> None:
        if image_id in self.seen:
            return
        self.seen.add(image_id)
        self.ids.append(trec_id(image_id))
        self.images.append({"bytes": data, "path": image_id})
        if len(self.ids) >= 100:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self.ids:
            self.writer.write_table(pa.table({"id": self.ids, "image": self.images}, schema=self.schema))
            self.count += len(self.ids)
            self.ids, self.images = [], []

    def close(self) -> int:
        self._flush()
        self.writer.close()
        return self.count


def _write_mteb(q: pl.DataFrame, qrels: pl.DataFrame, out: Path, split: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Features, Value

    base = out / "mteb"
    for c in MTEB_CONFIGS:
        (base / c).mkdir(parents=True, exist_ok=True)
    name = f"{split}-00000-of-00001.parquet"
    qf = Features({"id": Value("string"), "text": Value("string")})
    pq.write_table(pa.table({"id": q["_id"].to_list(), "text": q["text"].to_list()}, schema=qf.arrow_schema),
                   base / "queries" / name, compression="zstd")
    rf = Features({"query-id": Value("string"), "corpus-id": Value("string"), "score": Value("int64")})
    pq.write_table(pa.table({"query-id": qrels["query-id"].to_list(), "corpus-id": qrels["corpus-id"].to_list(),
                             "score": qrels["score"].cast(pl.Int64).to_list()}, schema=rf.arrow_schema),
                   base / "qrels" / name, compression="zstd")


def write_ir_views(rows: pl.DataFrame, out: Path, split: str, image_root: str | Path | None = None) -> dict[str, int]:
    """Write the mteb, BEIR and TREC views of the exported rows (canonical names); returns counts.

    The export writes the mteb corpus (the image bytes) with :class:`MtebCorpusWriter` while it writes
    the flat table and passes no ``image_root``; given an ``image_root``, the corpus is written here
    from the image files (standalone use)."""
    narrative = ["narrative"] if "narrative" in rows.columns else []
    q = rows.select(_ids("query_id").alias("_id"), pl.col("query_text").alias("text"), *narrative).unique(
        "_id", keep="first", maintain_order=True)
    # BEIR's queries carry the narrative (what a relevant image must show) under metadata
    beir_q = q.with_columns(pl.struct("narrative").alias("metadata")).drop("narrative") if narrative else q
    q = q.drop(narrative)
    text = pl.col("summary").fill_null("") if "summary" in rows.columns else pl.lit("")
    c = (rows.select(pl.col("image_id"), text.alias("text")).unique("image_id", keep="first").sort("image_id")
         .select(_ids("image_id").alias("_id"), pl.lit("").alias("title"), "text", pl.col("image_id").alias("image")))
    qrels = rows.select(_ids("query_id").alias("query-id"), _ids("image_id").alias("corpus-id"),
                        pl.col("relevance_label").cast(pl.Int64).alias("score"))
    (out / "beir" / "qrels").mkdir(parents=True, exist_ok=True)
    (out / "trec").mkdir(parents=True, exist_ok=True)
    beir_q.write_ndjson(out / "beir" / "queries.jsonl")
    c.write_ndjson(out / "beir" / "corpus.jsonl")
    qrels.write_csv(out / "beir" / "qrels" / f"{split}.tsv", separator="\t")
    trec = qrels.select(pl.format("{} 0 {} {}", "query-id", "corpus-id", "score").alias("line"))
    (out / "trec" / "qrels.txt").write_text("\n".join(trec["line"].to_list()) + "\n", encoding="utf-8")
    _write_mteb(q, qrels, out, split)
    if image_root is not None:
        from ..imaging import export_bytes

        corpus = MtebCorpusWriter(out, split)
        for i in rows["image_id"].unique(maintain_order=True).to_list():
            corpus.add(i, export_bytes((Path(image_root) / i).read_bytes()))
        corpus.close()
    return {"queries": q.height, "corpus": c.height, "qrels": qrels.height}

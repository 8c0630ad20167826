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

__all__ = ["MTEB_CONFIGS", "mteb_configs", "write_ir_views"]

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


def _write_mteb(corpus_ids: list[str], image_root: Path | None, q: pl.DataFrame, qrels: pl.DataFrame,
                out: Path, split: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Features, Image, Value

    from ..imaging import export_bytes

    base = out / "mteb"
    for c in MTEB_CONFIGS:
        (base / c).mkdir(parents=True, exist_ok=True)
    name = f"{split}-00000-of-00001.parquet"
    feats = Features({"id": Value("string"), "image": Image()})
    schema = feats.arrow_schema
    with pq.ParquetWriter(base / "corpus" / name, schema, compression="zstd") as w:
        for start in range(0, len(corpus_ids), 100):
            chunk = corpus_ids[start:start + 100]
            # the bytes the flat table ships: the one decoder's output where consumers would see other pixels
            imgs = [{"bytes": export_bytes((image_root / i).read_bytes()) if image_root else None, "path": i}
                    for i in chunk]
            w.write_table(pa.table({"id": [trec_id(i) for i in chunk], "image": imgs}, schema=schema))
    qf = Features({"id": Value("string"), "text": Value("string")})
    pq.write_table(pa.table({"id": q["_id"].to_list(), "text": q["text"].to_list()}, schema=qf.arrow_schema),
                   base / "queries" / name, compression="zstd")
    rf = Features({"query-id": Value("string"), "corpus-id": Value("string"), "score": Value("int64")})
    pq.write_table(pa.table({"query-id": qrels["query-id"].to_list(), "corpus-id": qrels["corpus-id"].to_list(),
                             "score": qrels["score"].cast(pl.Int64).to_list()}, schema=rf.arrow_schema),
                   base / "qrels" / name, compression="zstd")


def write_ir_views(rows: pl.DataFrame, out: Path, split: str, image_root: str | Path | None = None) -> dict[str, int]:
    """Write the mteb, BEIR and TREC views of the exported rows (canonical names); returns counts."""
    q = rows.select(_ids("query_id").alias("_id"), pl.col("query_text").alias("text")).unique(
        "_id", keep="first", maintain_order=True)
    text = pl.col("summary").fill_null("") if "summary" in rows.columns else pl.lit("")
    c = (rows.select(pl.col("image_id"), text.alias("text")).unique("image_id", keep="first").sort("image_id")
         .select(_ids("image_id").alias("_id"), pl.lit("").alias("title"), "text", pl.col("image_id").alias("image")))
    qrels = rows.select(_ids("query_id").alias("query-id"), _ids("image_id").alias("corpus-id"),
                        pl.col("relevance_label").cast(pl.Int64).alias("score"))
    (out / "beir" / "qrels").mkdir(parents=True, exist_ok=True)
    (out / "trec").mkdir(parents=True, exist_ok=True)
    q.write_ndjson(out / "beir" / "queries.jsonl")
    c.write_ndjson(out / "beir" / "corpus.jsonl")
    qrels.write_csv(out / "beir" / "qrels" / f"{split}.tsv", separator="\t")
    trec = qrels.select(pl.format("{} 0 {} {}", "query-id", "corpus-id", "score").alias("line"))
    (out / "trec" / "qrels.txt").write_text("\n".join(trec["line"].to_list()) + "\n", encoding="utf-8")
    _write_mteb(c["image"].to_list(), Path(image_root) if image_root is not None else None, q, qrels, out, split)
    return {"queries": q.height, "corpus": c.height, "qrels": qrels.height}

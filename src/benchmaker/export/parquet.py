"""The dataset's parquet files: ``data/<split>-*.parquet`` with each pair's image bytes embedded as a
``datasets.Image`` feature, written row group by row group with memory bounded by one row group of
images; with ``image_storage: corpus`` the rows without bytes and each image once in
``corpus/images-*.parquet`` (docs/export.md)."""

from __future__ import annotations

import hashlib
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping

import polars as pl

from ..formats import to_disk_names
from ..imaging import export_bytes
from ..io import file_sha256
from ..logs import get_logger, progress
from ..settings_schema import default
from .hf_features import arrow_schema

__all__ = ["write_parquet", "ROW_GROUP"]

log = get_logger("export")
ROW_GROUP = 100  # rows per parquet row group (what `datasets` uses for image data)


def _plain_type(t):
    import pyarrow as pa

    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_large_list(t) or pa.types.is_list_view(t) or pa.types.is_list(t):
        return pa.list_(_plain_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain_type(f.type)) for f in t])
    return t


def _schema(sample_disk: pl.DataFrame, image_col: str, image_pos: int):
    """The parquet schema: plain arrow types + the `datasets` features metadata (image = Image())."""
    import pyarrow as pa
    from datasets import Features, Image

    arrow = sample_disk.to_arrow()
    fields = [pa.field(f.name, _plain_type(f.type)) for f in arrow.schema]
    fields.insert(image_pos, pa.field(image_col, pa.struct([("bytes", pa.binary()), ("path", pa.string())])))
    features = Features.from_arrow_schema(pa.schema(fields))
    features[image_col] = Image()
    ordered = Features({f.name: features[f.name] for f in fields})
    return arrow_schema(ordered), ordered


class _ImageReader:
    def __init__(self, root: Path, sha: dict[str, str]):
        self.root, self.sha = root, sha

    def __call__(self, image_id: str) -> tuple[str, bytes]:
        data = (self.root / image_id).read_bytes()
        want = self.sha.get(image_id)
        if want and hashlib.sha256(data).hexdigest() != want:
            raise RuntimeError(f"export: {self.root / image_id} changed since preprocess (sha256 differs from "
                               "images.jsonl); rerun the pipeline from preprocess")
        return image_id, export_bytes(data)   # the pixels every stage saw (docs/export.md, imaging.py)


def write_parquet(rows: pl.DataFrame, *, out_dir: Path, split: str, rows_per_file: int, image_root: str | Path,
                  columns: Mapping[str, str], image_col: str, threads: int = 1,
                  image_storage: str = default("export.image_storage"), corpus: Any = None) -> tuple[list[dict], Any]:
    """Write the rows as parquet files with embedded image bytes; returns (file records, features).

    Each file is written row group by row group; an image's bytes are read once per file and kept
    only until the last row group of that file that uses it, so memory stays bounded (one row group
    of images plus the images of the current file still to be used again).
    ``image_storage="corpus"``: the rows carry no image column; each image's bytes are written once,
    to ``corpus/images-*.parquet`` (:func:`write_corpus`). ``corpus`` (an ``ir_views.MtebCorpusWriter``)
    receives each image's bytes when they are first read, so no image file is read twice for the views.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if image_storage == "corpus":
        return _write_split_storage(rows, out_dir=out_dir, split=split, rows_per_file=rows_per_file,
                                    image_root=image_root, columns=columns, image_col=image_col, threads=threads,
                                    corpus=corpus)
    n_files = max(1, math.ceil(rows.height / rows_per_file))
    disk_first = to_disk_names(rows.head(1), columns)
    # the image column goes right after query_id, query_text, image_id, relevance_label
    schema, features = _schema(disk_first, image_col, min(4, disk_first.width))
    image_type = schema.field(image_col).type
    image_pos = schema.get_field_index(image_col)
    plain = pa.schema([f for f in schema if f.name != image_col])
    reader = _ImageReader(Path(image_root), dict(rows.select("image_id", "sha256").unique("image_id").iter_rows()))
    records = []
    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    bar = progress(total=rows.height, desc="export rows", unit="row", logger=log)
    with ThreadPoolExecutor(max_workers=max(1, threads) * 2) as pool:
        for f in range(n_files):
            name = f"data/{split}-{f:05d}-of-{n_files:05d}.parquet"
            chunk = rows.slice(f * rows_per_file, rows_per_file)
            last_use = dict(chunk.with_row_index("_i").group_by("image_id").agg(
                (pl.col("_i").max() // ROW_GROUP).alias("g")).iter_rows())
            cache: dict[str, bytes] = {}
            reads = 0
            # the file's rows as arrow once (plain types), sliced per row group below
            chunk_tbl = to_disk_names(chunk, columns).to_arrow().select(plain.names).cast(plain)
            chunk_ids = chunk["image_id"].to_list()
            with pq.ParquetWriter(out_dir / name, schema, compression="zstd") as writer:
                for g in range(math.ceil(chunk.height / ROW_GROUP)):
                    ids = chunk_ids[g * ROW_GROUP:(g + 1) * ROW_GROUP]
                    need = [i for i in dict.fromkeys(ids) if i not in cache]
                    for iid, data in pool.map(reader, need):
                        cache[iid] = data
                        if corpus is not None:
                            corpus.add(iid, data)
                    reads += len(need)
                    img = pa.array([{"bytes": cache[i], "path": i} for i in ids], type=image_type)
                    tbl = chunk_tbl.slice(g * ROW_GROUP, len(ids)).add_column(image_pos, image_col, img)
                    writer.write_table(tbl.cast(schema))
                    for i in set(ids):
                        if last_use[i] == g:
                            del cache[i]
                    bar.update(len(ids))
            records.append({"path": name, "rows": chunk.height, "images_read": reads,
                            "bytes": (out_dir / name).stat().st_size, "sha256": file_sha256(out_dir / name)})
            log.info("export: wrote %s (%d rows, %d image reads)", name, chunk.height, reads)
    bar.close()
    return records, features


def _write_split_storage(rows: pl.DataFrame, *, out_dir: Path, split: str, rows_per_file: int,
                         image_root: str | Path, columns: Mapping[str, str], image_col: str,
                         threads: int = 1, corpus: Any = None) -> tuple[list[dict], Any]:
    """``image_storage: corpus``: ``data/<split>-*.parquet`` without image bytes (the rows name their
    image by ``image_id``) and ``corpus/images-*.parquet`` with ``image_id, <image column>`` holding
    each exported image once (first-appearance order), both written row group by row group."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Features, Image

    records: list[dict] = []
    (out_dir / "data").mkdir(parents=True, exist_ok=True)
    (out_dir / "corpus").mkdir(parents=True, exist_ok=True)
    disk_first = to_disk_names(rows.head(1), columns)
    arrow = disk_first.to_arrow()
    schema = pa.schema([pa.field(f.name, _plain_type(f.type)) for f in arrow.schema])
    features = Features.from_arrow_schema(schema)
    schema = arrow_schema(features)
    n_files = max(1, math.ceil(rows.height / rows_per_file))
    for f in range(n_files):
        name = f"data/{split}-{f:05d}-of-{n_files:05d}.parquet"
        chunk = rows.slice(f * rows_per_file, rows_per_file)
        with pq.ParquetWriter(out_dir / name, schema, compression="zstd") as writer:
            for g in range(0, chunk.height, ROW_GROUP * 50):  # no bytes: larger row groups
                tbl = to_disk_names(chunk.slice(g, ROW_GROUP * 50), columns).to_arrow()
                writer.write_table(tbl.select(schema.names).cast(schema))
        records.append({"path": name, "rows": chunk.height, "images_read": 0,
                        "bytes": (out_dir / name).stat().st_size, "sha256": file_sha256(out_dir / name)})
    images = rows.select("image_id", "sha256").unique("image_id", keep="first", maintain_order=True)
    from ..settings_schema import filled

    id_col = filled("columns", columns)["image_id"]
    cfeatures = Features({id_col: features[id_col], image_col: Image()})
    cschema = arrow_schema(cfeatures)
    image_type = cschema.field(image_col).type
    reader = _ImageReader(Path(image_root), dict(images.iter_rows()))
    n_corpus = max(1, math.ceil(images.height / rows_per_file))
    bar = progress(total=images.height, desc="export images", unit="img", logger=log)
    with ThreadPoolExecutor(max_workers=max(1, threads) * 2) as pool:
        for f in range(n_corpus):
            name = f"corpus/images-{f:05d}-of-{n_corpus:05d}.parquet"
            ids_all = images["image_id"].slice(f * rows_per_file, rows_per_file).to_list()
            with pq.ParquetWriter(out_dir / name, cschema, compression="zstd") as writer:
                for g in range(0, len(ids_all), ROW_GROUP):
                    ids = ids_all[g:g + ROW_GROUP]
                    data = dict(pool.map(reader, ids))
                    if corpus is not None:
                        for i in ids:
                            corpus.add(i, data[i])
                    tbl = pa.table({id_col: pa.array(ids, pa.string()),
                                    image_col: pa.array([{"bytes": data[i], "path": i} for i in ids],
                                                        type=image_type)})
                    writer.write_table(tbl.cast(cschema))
                    bar.update(len(ids))
            records.append({"path": name, "rows": len(ids_all), "images_read": len(ids_all),
                            "bytes": (out_dir / name).stat().st_size, "sha256": file_sha256(out_dir / name)})
            log.info("export: wrote %s (%d images, each once)", name, len(ids_all))
    bar.close()
    return records, features

"""Export stage: the Hugging Face dataset folder (parquet with embedded images + dataset card).

``hf_dataset/`` holds ``data/<split>-0000i-of-0000N.parquet`` (one row per judged (query, image)
pair, the image bytes embedded as a ``datasets.Image`` feature), ``README.md`` (the dataset card,
generated from the written schema and the real counts), ``summary/`` (+ ``config_values.csv``),
``annotations.jsonl``, ``losses.jsonl``, ``config.yaml`` (public, scrubbed) and
``dataset_metadata.json``. See docs/export.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl
import yaml

from .. import __version__
from ..formats import FORMAT_VERSION, RENAMABLE, FormatError, to_disk_names, write_table
from ..imaging import export_bytes
from ..io import atomic_write_text
from ..logs import get_logger, progress
from ..losses import Losses
from ..pages.outdir import staged_dir
from ..settings_schema import default
from ..summary.inputs import Inputs, load_inputs
from .card import render_card
from .hf_features import arrow_schema
from .ir_views import MtebCorpusWriter, mteb_configs, write_ir_views
from .scrub import (
    find_local_paths,
    find_secrets,
    hide_paths,
    hide_paths_in_folder,
    local_paths,
    scrub_config,
    secret_values,
)

__all__ = ["run", "build_rows", "card_tables", "counts", "EXPORT_META", "RUN_FACTS", "run_facts"]

log = get_logger("export")
EXPORT_META = "dataset_metadata.json"
# the one published file that differs between two builds of the same benchmark (docs/export.md)
RUN_FACTS = "run_facts.json"
ROW_GROUP = 100  # rows per parquet row group (what `datasets` uses for image data)
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
                            "bytes": (out_dir / name).stat().st_size, "sha256": _sha256(out_dir / name)})
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
                        "bytes": (out_dir / name).stat().st_size, "sha256": _sha256(out_dir / name)})
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
                            "bytes": (out_dir / name).stat().st_size, "sha256": _sha256(out_dir / name)})
            log.info("export: wrote %s (%d images, each once)", name, len(ids_all))
    bar.close()
    return records, features


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def flatten_config(cfg: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str, str]]:
    """Upstream's config_values.csv rows: (dotted key, value, type); lists as JSON."""
    out = []
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out += flatten_config(v, key + ".")
        else:
            val = json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else ("" if v is None else str(v))
            out.append((key, val, type(v).__name__))
    return out


def counts(rows: pl.DataFrame) -> dict[str, Any]:
    """Counts of the exported table (the card's numbers come from here)."""
    pos = rows.group_by("query_id").agg((pl.col("relevance_label") > 0).sum().alias("p"))["p"]
    rel = {str(k): int(v) for k, v in rows.group_by("relevance_label").len().sort("relevance_label").iter_rows()}
    return {
        "rows": rows.height, "queries": rows["query_id"].n_unique(), "images": rows["image_id"].n_unique(),
        "positive_pairs": int((rows["relevance_label"] > 0).sum()),
        "positives_per_query": {"mean": round(float(pos.mean()), 4) if pos.len() else 0.0,
                                "min": int(pos.min()) if pos.len() else 0, "max": int(pos.max()) if pos.len() else 0},
        "queries_without_positives": int((pos == 0).sum()),
        "relevance_distribution": rel,
        "seed_not_relevant_queries": int(rows.filter(pl.col("seed_not_relevant"))["query_id"].n_unique()),
        "pairs_without_clip_score": int(rows["clip_score"].null_count()),
    }


def card_tables(rows: pl.DataFrame, n_examples: int = 5) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(image sources by collection and license, the first queries with pool size and positives) of the
    exported rows, for the dataset card."""
    sources = (rows.unique("image_id").group_by(pl.col("original_dataset_name").alias("source"), "license")
               .len("images").with_columns(pl.col("images").cast(pl.Int64))
               .sort(["images", "source", "license"], descending=[True, False, False], nulls_last=True))
    examples = (rows.group_by("query_id", maintain_order=True)
                .agg(pl.col("query_text").first(), pl.len().alias("pairs"),
                     (pl.col("relevance_label") > 0).sum().alias("positives"))
                .head(n_examples))
    return sources, examples


def created_utc() -> str:
    """The export's creation time (UTC, ISO 8601), a run fact: it lives only in run_facts.json
    (``created_utc``). ``SOURCE_DATE_EPOCH`` (seconds since 1970, reproducible-builds.org) fixes it."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if epoch:
        try:
            when = datetime.fromtimestamp(int(epoch), timezone.utc)
        except (ValueError, OverflowError, OSError):
            raise ValueError(f"SOURCE_DATE_EPOCH={epoch!r} is not a whole number of seconds since 1970") from None
    else:
        when = datetime.now(timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def run_facts(*, seconds: float, evaluation: str | None = None, deepen: str | None = None) -> dict[str, Any]:
    """What differs between two builds of the same benchmark: when, how long, on what kind of machine
    (no host or user name). Written as run_facts.json, linked from the card."""
    import platform

    facts: dict[str, Any] = {
        "created_utc": created_utc(), "export_seconds": round(seconds, 3),
        "machine": {"system": platform.system(), "release": platform.release(), "machine": platform.machine(),
                    "processor": platform.processor(), "cpu_count": os.cpu_count(),
                    "python": platform.python_version()},
    }
    if evaluation:
        from ..evaluate.report import run_facts as evaluate_facts

        facts["evaluate"] = evaluate_facts(evaluation)
    if deepen:  # the evaluation on the deepened qrels (deepen/evaluate/, docs/deepen.md)
        from ..deepen.report import run_facts as deepen_facts

        facts["deepen_evaluate"] = deepen_facts(deepen)
    return facts


def _published_summary(summary_dir: Path) -> None:
    """The summary copy without its run facts: the quality-vs-compute chart (timings) and its image
    lines in report.html / report.md (the chart stays in the results folder's summary)."""
    import re

    from ..evaluate.report import CHARTS

    chart = f"evaluate/{CHARTS[1]}"
    (summary_dir / chart).unlink(missing_ok=True)
    for name, pattern in (("report.html", rf'<img src="{re.escape(chart)}"[^>]*>'),
                          ("report.md", rf"!\[[^\]]*\]\({re.escape(chart)}\)\n?")):
        p = summary_dir / name
        if p.is_file():
            p.write_text(re.sub(pattern, "", p.read_text(encoding="utf-8")), encoding="utf-8")


def _evaluation_files(out: Path, *, evaluation: str | None, leakage: str | None, deepen: str | None) -> str:
    """Copy the evaluate, seed leakage and deepening result files into the dataset folder ``out``; the
    card's sections for them (markdown; "" when none was run)."""
    md = ""
    if evaluation:  # the evaluate target's leaderboard and result files (docs/evaluate.md)
        from ..evaluate.report import card_markdown, copy_results

        copy_results(evaluation, out / "evaluate")
        md = card_markdown(evaluation)
    if leakage:  # seed leakage, from the evaluate aggregate (docs/evaluate.md)
        from ..evaluate.leakage_view import card_markdown as leakage_card

        md += leakage_card(leakage, out / "evaluate")
    if deepen:  # pool deepening: its report and the deepened qrels, deepened pairs marked (docs/deepen.md)
        from ..deepen.report import card_markdown as deepen_card
        from ..deepen.report import copy_results as deepen_copy

        deepen_copy(deepen, out / "deepen")
        md += deepen_card(deepen)
    return md


def _trust_block(trust: str | None, audit: str | None, deepen: str | None, out: Path) -> str:
    """The card's opening "How far to trust this benchmark" block (docs/trust.md); trust.json published
    beside the leaderboard."""
    from ..summary.trust import card_markdown, copy_trust

    copy_trust(trust, out / "evaluate")
    return card_markdown(trust, audit, deepen)


def _metadata(*, meta: Mapping[str, Any], split: str, image_col: str, columns: Mapping[str, str], n: dict,
              checks: dict, all_losses: pl.DataFrame, quarantine: pl.DataFrame, files: list, config_text: str,
              annotations: str, scored: str, images: str, similarity: Mapping[str, Any] | None,
              version: str | None) -> dict[str, Any]:
    """dataset_metadata.json's document."""
    import datasets
    import pyarrow

    return {
        "benchmark": meta.get("name"), "title": meta.get("title"), "version": meta.get("version"),
        "smoke_test": bool(meta.get("smoke_test")), "smoke_reason": meta.get("smoke_reason"),
        "split": split, "image_column": image_col, "columns": {k: columns.get(k, k) for k in
                                                                (*RENAMABLE, "image")},
        "counts": n, "checks": checks,
        "losses": {s: {r: int(c) for r, c in g.group_by("reason").len().sort("reason").iter_rows()}
                   for (s,), g in all_losses.group_by("stage", maintain_order=True)},
        "quarantine": {r: int(c) for r, c in quarantine.group_by("reason").len().sort("reason").iter_rows()},
        "files": files,
        "digests": {"config": hashlib.sha256(config_text.encode()).hexdigest(),
                    "annotations": _sha256(Path(annotations)), "qrels_with_score": _sha256(Path(scored)),
                    "images": _sha256(Path(images))},
        "similarity": dict(similarity or {}),
        "versions": {"benchmaker": __version__, "export_stage": version, "format": FORMAT_VERSION,
                     "datasets": datasets.__version__, "pyarrow": pyarrow.__version__,
                     "polars": pl.__version__},
        "run_facts": RUN_FACTS,
    }


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


def _copy_summary(summary: str | None, out: Path, cfg_public: Mapping[str, Any]) -> None:
    """The summary folder as published (:func:`_published_summary`), with the public config's values."""
    if summary and Path(summary).is_dir():
        shutil.copytree(summary, out / "summary")
        _published_summary(out / "summary")
    (out / "summary").mkdir(exist_ok=True)
    cv = pl.DataFrame(flatten_config(cfg_public), schema=["Config Variable", "Value", "Type"], orient="row")
    cv.write_csv(out / "summary" / "config_values.csv")


def _refuse_leaks(out: Path, secrets: Sequence[str], local: Mapping[str, str]) -> None:
    """An error when a secret of the environment or a local path of this machine is in a file of ``out``."""
    leaked = find_secrets(out, secrets)
    if leaked:
        raise RuntimeError(f"export: a secret from the environment appears in {leaked}; nothing was published")
    named = find_local_paths(out, local)
    if named:
        raise RuntimeError(f"export: a local path of this machine appears in {named}; nothing was published")


def run(
    *,
    images: str,
    annotations: str,
    scored: str,
    dataset: str,
    quarantine: str | None = None,
    plan: str | None = None,
    summary: str | None = None,
    losses: str | Sequence[str] | None = None,
    loss_stages: Sequence[str | None] | None = None,
    costs: str | Sequence[str] | None = None,
    cost_stages: Sequence[str | None] | None = None,
    outside_stages: Sequence[str] | None = None,
    settings: Mapping[str, Any] | None = None,
    benchmark_meta: Mapping[str, Any] | None = None,
    facets: Mapping[str, Any],
    columns: Mapping[str, str] | None = None,
    image_root: str = ".",
    similarity: Mapping[str, Any] | None = None,
    public_config: Mapping[str, Any] | None = None,
    version: str | None = None,
    threads: int = 1,
    audit: str | None = None,
    evaluation: str | None = None,
    deepen: str | None = None,
    trust: str | None = None,
    leakage: str | None = None,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    from ..settings_schema import filled

    settings = filled("export", settings)
    columns = filled("columns", columns)
    meta = dict(benchmark_meta or {})
    split = str(settings["split"])
    rows_per_file = int(settings["rows_per_file"])
    image_col = columns["image"]
    # only the images of the scored pairs: memory bounded by the pairs, not by the corpus
    inp = load_inputs(images=images, quarantine=quarantine, annotations=annotations, plan=plan, scored=scored,
                      losses=losses, costs=costs, columns=columns, facets=facets,
                      loss_stages=loss_stages, cost_stages=cost_stages, outside_stages=outside_stages)
    rows, export_losses, checks = _export_rows(inp, image_root, scored=scored, columns=columns, image_col=image_col)
    secrets = secret_values(public_config, [settings["token_env"]])
    # local folders (the config's paths, the working and home folders) in a public form (docs/export.md)
    local = local_paths(public_config, [image_root, Path(dataset).parent])
    cfg_public = hide_paths(scrub_config(dict(public_config or {}), secrets), local)
    similarity = hide_paths(dict(similarity or {}), local)
    rows = rows.with_columns(hide_paths_col(rows, c, local) for c, t in rows.schema.items() if t == pl.String)
    summary_numbers: dict[str, Any] = {}
    if summary and (Path(summary) / "summary.json").is_file():
        summary_numbers = json.loads((Path(summary) / "summary.json").read_text())
    all_losses = pl.concat([inp.losses, export_losses.to_frame()], how="vertical_relaxed")
    with staged_dir(dataset, EXPORT_META) as out:
        image_storage = str(settings["image_storage"])
        mteb_corpus = MtebCorpusWriter(out, split)  # fed as the flat table reads each image
        files, features = write_parquet(rows, out_dir=out, split=split, rows_per_file=rows_per_file,
                                        image_root=image_root, columns=columns, image_col=image_col,
                                        threads=threads, image_storage=image_storage, corpus=mteb_corpus)
        mteb_corpus.close()
        written = sum(f["rows"] for f in files if f["path"].startswith("data/"))
        if written != rows.height:
            raise AssertionError(f"export: wrote {written} rows, expected {rows.height}")
        _copy_summary(summary, out, cfg_public)
        shutil.copyfile(annotations, out / "annotations.jsonl")
        ir_views = write_ir_views(rows, out, split)
        evaluation_md = _evaluation_files(out, evaluation=evaluation, leakage=leakage, deepen=deepen)
        checks = {**checks, "ir_views": ir_views}
        write_table(all_losses, "losses", out / "losses.jsonl")
        config_text = yaml.safe_dump(cfg_public, sort_keys=False, allow_unicode=True)
        atomic_write_text(out / "config.yaml", config_text)
        n = counts(rows)
        sources, examples = card_tables(rows)
        from ..summary.stats import cost_summary

        cost_table = cost_summary(inp.costs) if inp.costs is not None else None
        metadata = _metadata(meta=meta, split=split, image_col=image_col, columns=columns, n=n, checks=checks,
                             all_losses=all_losses, quarantine=inp.quarantine, files=files, config_text=config_text,
                             annotations=annotations, scored=scored, images=images, similarity=similarity,
                             version=version)
        atomic_write_text(out / EXPORT_META, json.dumps(metadata, indent=2, ensure_ascii=False) + "\n")
        card = render_card(meta=meta, features=features, files=files, split=split, counts=n, checks=checks,
                           losses=all_losses, quarantine=inp.quarantine, costs=cost_table, config=cfg_public,
                           similarity=dict(similarity or {}), summary=summary_numbers, columns=columns,
                           image_col=image_col, facets=inp.facets, repo_id=settings.get("repo_id"),
                           config_digest=metadata["digests"]["config"], version=version,
                           sources=sources, examples=examples, audit=audit,
                           extra_configs=mteb_configs(split), evaluation_md=evaluation_md,
                           outside_stages=inp.outside_stages, cost_stages=inp.cost_stages,
                           trust_md=_trust_block(trust, audit, deepen, out))
        from ..audit.render import export_files

        export_files(audit, out)  # the judge audit's numbers and human labels as audit/ (docs/audit.md)
        atomic_write_text(out / "README.md", card)
        hide_paths_in_folder(out, local)   # the copied summary, audit and evaluate files
        facts = run_facts(seconds=time.perf_counter() - t0, evaluation=evaluation, deepen=deepen)
        atomic_write_text(out / RUN_FACTS, json.dumps(facts, indent=2) + "\n")
        _refuse_leaks(out, secrets, local)
    log.info("export: %d rows, %d queries, %d images in %d file(s) -> %s (%.1f s)", n["rows"], n["queries"],
             n["images"], len(files), dataset, time.perf_counter() - t0)
    return metadata


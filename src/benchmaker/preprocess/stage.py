"""The preprocess stage: image folder -> images.jsonl, quarantine.jsonl and per-shard image manifests.

Steps: scan (read-only, sorted) -> inspect every candidate in a thread pool (bounded queue of chunks;
PIL, hashlib and the resize in imagehash release the GIL) -> one polars frame of accepted images ->
rights map (vectorised) -> image_url -> metadata merge -> sort by image_id -> write.
``run`` does it for a whole folder; the workflow uses ``run_shard`` (the same steps on the files of one
shard listing, see ``listing``) and ``merge`` (shard manifests -> images.jsonl, quarantine.jsonl).
See docs/preprocess.md.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import quote

import polars as pl

from ..columnar import copy_columns, write_copy
from ..formats import KINDS, read_table, write_table
from ..logs import get_logger, progress
from ..settings_schema import filled
from ..sharding import shard_of
from .duplicates import DEFAULT_THRESHOLD, duplicate_groups, group_counts
from .inspect import (
    REASONS,
    Accepted,
    InspectSettings,
    Rejected,
    inspect_file,
    pil_limits,
)
from .listing import read_listing
from .metadata import load_metadata, merge_metadata
from .rights import load_rights_map
from .scan import Candidate, ScanStats, scan

__all__ = ["run", "run_shard", "merge", "inspect_corpus", "DEFAULTS"]

log = get_logger("preprocess")

DEFAULTS: dict[str, Any] = filled("preprocess", {})   # the schema's (config/schema.yaml), for library callers

_ACCEPTED_SCHEMA = {
    "image_id": pl.String, "mime_type": pl.String, "width": pl.Int64, "height": pl.Int64,
    "file_size": pl.Int64, "sha256": pl.String, "phash": pl.String,
}
_BATCH_ROWS = 50_000  # accepted rows are moved from Python lists into a columnar frame this often
_IMAGE_COLUMNS = list(KINDS["images"].required)


def _inspect_chunk(root: str, ids: Sequence[str], settings: InspectSettings) -> list[Accepted | Rejected]:
    return [inspect_file(os.path.join(root, i), i, settings) for i in ids]


class _Collector:
    """Accepted rows in columnar batches (memory ~ a few hundred bytes per image), rejects as rows."""

    def __init__(self) -> None:
        self.frames: list[pl.DataFrame] = []
        self.cols: dict[str, list] = {k: [] for k in _ACCEPTED_SCHEMA}
        self.rejected: list[dict[str, str | None]] = []
        self.mismatch: list[str] = []
        self.decode_errors: list[str] = []
        self.phash_errors: list[str] = []

    def add(self, result: Accepted | Rejected) -> None:
        if isinstance(result, Rejected):
            self.rejected.append({"path": result.path, "reason": result.reason, "detail": result.detail})
            return
        for k in _ACCEPTED_SCHEMA:
            self.cols[k].append(getattr(result, k))
        if result.format_mismatch:
            self.mismatch.append(result.image_id)
        if result.decode_error:
            self.decode_errors.append(result.image_id)
        if result.phash_error:
            self.phash_errors.append(result.image_id)
        if len(self.cols["image_id"]) >= _BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self.cols["image_id"]:
            self.frames.append(pl.DataFrame(self.cols, schema=_ACCEPTED_SCHEMA))
            self.cols = {k: [] for k in _ACCEPTED_SCHEMA}

    def accepted(self) -> pl.DataFrame:
        self._flush()
        if not self.frames:
            return pl.DataFrame(schema=_ACCEPTED_SCHEMA)
        return pl.concat(self.frames, rechunk=True)


def _inspect_settings(s: Mapping[str, Any]) -> InspectSettings:
    return InspectSettings(
        max_bytes=int(s["max_bytes"]), max_pixels=int(s["max_pixels"]), verify_decode=bool(s["verify_decode"])
    )


def _inspect_into(col: "_Collector", root: str, ids: list[str], isettings: InspectSettings, workers: int) -> None:
    """Inspect the files ``ids`` (relative to ``root``) in a bounded thread pool; results go to ``col``."""
    workers = max(1, int(workers))
    chunk = max(1, min(64, len(ids) // (workers * 8) or 1))
    t1 = time.perf_counter()
    with pil_limits(isettings.max_pixels), progress(total=len(ids), desc="preprocess", unit="img", logger=log) as bar:
        if workers == 1 or len(ids) <= chunk:
            for start in range(0, len(ids), chunk):
                for r in _inspect_chunk(root, ids[start:start + chunk], isettings):
                    col.add(r)
                bar.update(min(chunk, len(ids) - start))
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="preprocess") as pool:
                pending: set[Future] = set()
                starts = iter(range(0, len(ids), chunk))
                window = workers * 4
                while True:
                    for start in starts:
                        pending.add(pool.submit(_inspect_chunk, root, ids[start:start + chunk], isettings))
                        if len(pending) >= window:
                            break
                    if not pending:
                        break
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in done:
                        results = fut.result()
                        for r in results:
                            col.add(r)
                        bar.update(len(results))
    elapsed = time.perf_counter() - t1
    if ids:
        log.info("inspected %d file(s) in %.1f s (%.0f/s) with %d worker thread(s)", len(ids), elapsed,
                 len(ids) / max(elapsed, 1e-9), workers)


def inspect_corpus(
    image_root: str | os.PathLike,
    settings: Mapping[str, Any],
    *,
    workers: int = 1,
    exclude_dirs: Iterable[str | os.PathLike] = (),
) -> tuple[pl.DataFrame, pl.DataFrame, ScanStats, dict[str, list[str]]]:
    """Scan and inspect; returns (accepted frame, quarantine frame, scan stats, notes)."""
    s = filled("preprocess", settings)
    stats = ScanStats()
    col = _Collector()
    ids: list[str] = []
    t0 = time.perf_counter()
    for item in scan(
        image_root, extensions=s["extensions"], follow_symlinks=s["follow_symlinks"],
        skip_hidden=s["skip_hidden"], exclude_dirs=exclude_dirs, stats=stats,
    ):
        if isinstance(item, Candidate):
            ids.append(item.image_id)
        else:
            col.add(item)
    log.info(
        "scanned %s in %.1f s: %d candidate image(s), %d file(s) with other extensions %s, %d hidden entr%s skipped",
        image_root, time.perf_counter() - t0, len(ids), stats.skipped_extension,
        dict(sorted(stats.extensions_skipped.items(), key=lambda kv: -kv[1])[:8]), stats.skipped_hidden,
        "y" if stats.skipped_hidden == 1 else "ies",
    )
    isettings = _inspect_settings(s)
    _inspect_into(col, str(image_root), ids, isettings, workers)
    del ids
    accepted = col.accepted()
    quarantine = pl.DataFrame(col.rejected, schema={"path": pl.String, "reason": pl.String, "detail": pl.String})
    quarantine = quarantine.sort(["path", "reason"])
    notes = {"format_mismatch": col.mismatch, "decode_errors": col.decode_errors, "phash_errors": col.phash_errors}
    return accepted, quarantine, stats, notes


def _image_url(base: str | None) -> pl.Expr:
    if not base:
        return pl.lit(None, dtype=pl.String).alias("image_url")
    prefix = base.rstrip("/") + "/"
    return pl.col("image_id").map_elements(lambda i: prefix + quote(i, safe="/"), return_dtype=pl.String).alias(
        "image_url"
    )


def _examples(values: Sequence[str], n: int = 5) -> list[str]:
    return sorted(values)[:n]


def run(
    *,
    images: str,
    quarantine: str,
    shards: Sequence[str] | str,
    image_root: str,
    settings: Mapping[str, Any] | None = None,
    n_shards: int,
    columns: Mapping[str, str] | None = None,
    version: str | None = None,
    threads: int = 1,
    rights_map: str | None = None,
    metadata: str | None = None,
) -> dict[str, Any]:
    """Build images.jsonl, quarantine.jsonl and the shard manifests. Returns a small summary dict."""
    s = filled("preprocess", settings)
    shard_paths = [shards] if isinstance(shards, (str, os.PathLike)) else list(shards)
    if len(shard_paths) != int(n_shards):
        raise ValueError(f"preprocess: got {len(shard_paths)} shard output path(s) for n_shards={n_shards}")
    root = Path(image_root)
    if not root.is_dir():
        raise FileNotFoundError(f"paths.image_root {image_root!r} is not a directory")
    root_name = root.resolve().name or "images"
    workers = max(1, min(int(threads or 1), int(s["workers"])))
    log.info("preprocess%s: image_root=%s, %d shard(s), %d worker(s)",
             f" (stage version {version})" if version else "", image_root, n_shards, workers)

    rights = load_rights_map(rights_map)  # validate before the (long) scan
    meta = load_metadata(metadata, columns) if metadata else None

    out_dirs = {Path(p).resolve().parent for p in [images, quarantine, *shard_paths]}
    accepted, quar, _stats, notes = inspect_corpus(root, s, workers=workers, exclude_dirs=out_dirs)

    accepted = accepted.sort("image_id")
    df = rights.apply(accepted, root_name).with_columns(_image_url(s["image_base_url"]))
    df = df.select(_IMAGE_COLUMNS)
    report = None
    if meta is not None:
        df, report = merge_metadata(df, meta, columns)
        report.log(log, str(metadata))

    n_written = write_table(_with_groups(df, s["near_duplicate_threshold"]), "images", images, columns=columns)
    write_table(quar, "quarantine", quarantine)
    shard_idx = pl.Series("__shard", [shard_of(i, int(n_shards)) for i in df["image_id"]], dtype=pl.Int64)
    parts = df.with_columns(shard_idx).partition_by("__shard", as_dict=True, include_key=False, maintain_order=True)
    shard_sizes = []
    for i, path in enumerate(shard_paths):
        part = parts.get((i,))
        if part is None:
            part = df.clear()
        write_table(part, "images", path, columns=columns)
        shard_sizes.append(part.height)

    by_reason = _log_quarantine(quar, n_written)
    _log_notes(notes)
    unmatched_rights = rights.unmatched_files(df["image_id"])
    if unmatched_rights:
        log.warning("rights map: %d 'files' entr%s no accepted image, e.g. %s", len(unmatched_rights),
                    "y matches" if len(unmatched_rights) == 1 else "ies match", unmatched_rights[:5])
    log.info("shard sizes: %s",
             shard_sizes if len(shard_sizes) <= 16 else f"min {min(shard_sizes)}, max {max(shard_sizes)}")
    if n_written == 0:
        raise ValueError(
            f"preprocess: no usable image under {image_root} ({quar.height} quarantined, see {quarantine}; "
            f"extensions {s['extensions']})"
        )
    return {
        "accepted": n_written,
        "quarantined": quar.height,
        "quarantine_by_reason": by_reason,
        "shard_sizes": shard_sizes,
        "metadata": None if report is None else {
            "rows": report.rows, "matched": report.matched, "unmatched": report.unmatched,
            "ignored_columns": report.ignored_columns,
        },
    }


def _log_quarantine(quar: pl.DataFrame, n_accepted: int) -> dict[str, int]:
    by_reason = dict(sorted(quar.group_by("reason").len().iter_rows(), key=lambda kv: (-kv[1], kv[0])))
    log.info("accepted %d image(s); quarantined %d: %s", n_accepted, quar.height, by_reason or "none")
    for reason, n in by_reason.items():
        ex = quar.filter(pl.col("reason") == reason)["path"].head(3).to_list()
        log.warning("quarantine %-18s %5d  (%s) e.g. %s", reason, n, REASONS.get(reason, ""), ex)
    return by_reason


def _with_groups(df: pl.DataFrame, threshold: int | None) -> pl.DataFrame:
    """``df`` with ``duplicate_group`` (duplicates.py) after ``phash``; logs the groups found."""
    groups = duplicate_groups(df, threshold)
    out = df.with_columns(groups)
    cols = [c for c in df.columns if c != "duplicate_group"]
    cols.insert(cols.index("phash") + 1, "duplicate_group")
    out = out.select(cols)
    n = group_counts(groups)
    byte = df.group_by("sha256").len().filter(pl.col("len") > 1).height
    if n["groups"]:
        ex = (out.filter(pl.col("duplicate_group").is_duplicated()).group_by("duplicate_group")
              .agg(pl.col("image_id").sort()).sort("duplicate_group")["image_id"].head(3).to_list())
        log.info("%d duplicate group(s) holding %d images (%d group(s) of byte-identical files; near-duplicates: "
                 "pHash distance <= %s), e.g. %s", n["groups"], n["images_in_groups"], byte, threshold, ex)
    return out


def _log_notes(notes: Mapping[str, list[str]]) -> None:
    if notes["format_mismatch"]:
        log.warning("%d image(s) have a file extension that does not match their content (accepted), e.g. %s",
                    len(notes["format_mismatch"]), _examples(notes["format_mismatch"]))
    if notes["decode_errors"]:
        log.warning("%d image(s) could not be fully decoded; accepted without phash because verify_decode is "
                    "false, e.g. %s", len(notes["decode_errors"]), _examples(notes["decode_errors"]))
    if notes["phash_errors"]:
        log.warning("%d image(s) decoded but got no phash (unusual pixel mode), e.g. %s",
                    len(notes["phash_errors"]), _examples(notes["phash_errors"]))


# -- the sharded workflow path: one job per shard listing, then one merge ------------------------------
def run_shard(
    *,
    listing: str,
    images: str,
    quarantine: str,
    image_root: str,
    settings: Mapping[str, Any] | None = None,
    shard: str | int,
    n_shards: int,
    columns: Mapping[str, str] | None = None,
    version: str | None = None,
    threads: int = 1,
    rights_map: str | None = None,
    metadata: str | None = None,
) -> dict[str, Any]:
    """Inspect the files of one shard listing (preprocess.listing) -> its images manifest and quarantine.

    The listing's candidates are inspected exactly like ``run`` does; its scan rejects become quarantine
    rows. Metadata rows and rights-map ``files`` entries are matched against this shard's images only
    (those whose ids hash to this shard), so per-shard warnings add up to the corpus-wide ones.
    An empty shard writes empty files; ``merge`` fails when no shard accepted anything.
    """
    s = filled("preprocess", settings)
    index, n = int(shard), int(n_shards)
    root = Path(image_root)
    if not root.is_dir():
        raise FileNotFoundError(f"paths.image_root {image_root!r} is not a directory")
    root_name = root.resolve().name or "images"
    workers = max(1, min(int(threads or 1), int(s["workers"])))
    rights = load_rights_map(rights_map)  # validate before the (long) inspection
    meta = load_metadata(metadata, columns) if metadata else None
    entries = read_listing(listing)
    col = _Collector()
    ids: list[str] = []
    for e in entries:
        if e.reason is not None:
            col.add(Rejected(e.image_id, e.reason, e.detail))
        else:
            ids.append(e.image_id)
    log.info("preprocess shard %s of %d%s: %d listed file(s), %d scan reject(s), %d worker(s)", shard, n,
             f" (stage version {version})" if version else "", len(ids), len(entries) - len(ids), workers)
    _inspect_into(col, str(root), ids, _inspect_settings(s), workers)
    accepted = col.accepted().sort("image_id")
    quar = pl.DataFrame(col.rejected, schema={"path": pl.String, "reason": pl.String, "detail": pl.String})
    quar = quar.sort(["path", "reason"])
    notes = {"format_mismatch": col.mismatch, "decode_errors": col.decode_errors, "phash_errors": col.phash_errors}

    df = rights.apply(accepted, root_name).with_columns(_image_url(s["image_base_url"])).select(_IMAGE_COLUMNS)
    report = None
    if meta is not None:
        mine = pl.Series([shard_of(i, n) == index for i in meta["image_id"].to_list()], dtype=pl.Boolean)
        df, report = merge_metadata(df, meta.filter(mine) if mine.len() else meta, columns)
        report.log(log, f"{metadata} (rows of shard {shard})")
    n_written = write_table(df, "images", images, columns=columns)
    write_table(quar, "quarantine", quarantine)
    by_reason = _log_quarantine(quar, n_written)
    _log_notes(notes)
    mine_files = [k for k in rights.files if shard_of(k, n) == index]
    if mine_files:
        ids_here = set(df["image_id"].to_list())
        unmatched = sorted(k for k in mine_files if k not in ids_here)
        if unmatched:
            log.warning("rights map: %d 'files' entr%s of this shard match no accepted image, e.g. %s",
                        len(unmatched), "y" if len(unmatched) == 1 else "ies", unmatched[:5])
    return {"accepted": n_written, "quarantined": quar.height, "quarantine_by_reason": by_reason}


def merge(
    *,
    parts: Sequence[str] | str,
    quarantine_parts: Sequence[str] | str,
    images: str,
    quarantine: str,
    columns: Mapping[str, str] | None = None,
    image_root: str | None = None,
    version: str | None = None,
    threads: int = 1,
    near_duplicate_threshold: int | None = DEFAULT_THRESHOLD,
    images_columns: str | None = None,
) -> dict[str, Any]:
    """Shard manifests and quarantines -> images.jsonl (sorted by image_id, with ``duplicate_group``,
    decided here over the whole corpus: a group can span shards) and quarantine.jsonl; with
    ``images_columns``, also the planner's columnar copy of images.jsonl there (``benchmaker.columnar``).

    Fails when no image at all was accepted (naming the quarantine file to look at).
    """
    parts = [parts] if isinstance(parts, (str, os.PathLike)) else list(parts)
    qparts = [quarantine_parts] if isinstance(quarantine_parts, (str, os.PathLike)) else list(quarantine_parts)
    frames = [read_table("images", p, columns=columns) for p in parts]
    df = pl.concat(frames, how="diagonal_relaxed").sort("image_id") if frames else pl.DataFrame()
    quar = pl.concat([read_table("quarantine", p) for p in qparts], how="diagonal_relaxed")
    quar = quar.select("path", "reason", "detail").sort(["path", "reason"])
    if df.height == 0:
        # quarantine.jsonl is still written: it is where the user finds out why
        write_table(quar, "quarantine", quarantine)
        raise ValueError(
            f"preprocess: no usable image under {image_root or 'paths.image_root'} ({quar.height} quarantined, "
            f"see {quarantine}; check paths.image_root and preprocess.extensions)"
        )
    df = _with_groups(df, near_duplicate_threshold)
    n_written = write_table(df, "images", images, columns=columns)
    if images_columns:  # the planner's columnar copy of images.jsonl (benchmaker.columnar)
        names = {c: t for c, t in copy_columns("images").items() if c in df.columns}
        write_copy(df, images_columns, kind="images", source=images, names=names, columns=columns)
    write_table(quar, "quarantine", quarantine)
    by_reason = _log_quarantine(quar, n_written)
    sizes = [f.height for f in frames]
    log.info("merged %d shard(s): sizes %s", len(sizes),
             sizes if len(sizes) <= 16 else f"min {min(sizes)}, max {max(sizes)}")
    return {"accepted": n_written, "quarantined": quar.height, "quarantine_by_reason": by_reason,
            "shard_sizes": sizes}

"""Change detection for the image folder: one listing file per shard, rewritten only when it changes.

The workflow calls ``write_listings`` while Snakemake parses the Snakefile (rules/common.smk), before
the DAG is built. It walks ``image_root`` with the same rules as preprocess (``scan``:
extensions, hidden files, symlinks, excluded folders), records ``(image_id, size, mtime_ns)`` per
candidate file and the scan's own rejects (symlink problems, undecodable names, unreadable folders),
groups them by ``shard_of(image_id, n_shards)`` and writes ``<listing_dir>/<shard>.tsv`` sorted by
image_id. A file is replaced (atomically) only when its content differs, so a shard listing's mtime
moves exactly when a file of that shard was added, removed or changed, and Snakemake reruns
preprocess for that shard only, then whatever depends on it (docs/architecture.md, "Change
detection"). No image is opened: one ``stat`` per file.

Listing format (docs/formats.md): UTF-8 text, one line per entry, 5 tab-separated fields
``image_id  size  mtime_ns  reason  detail``. A candidate has empty ``reason`` and ``detail``; a scan
reject has empty ``size`` and ``mtime_ns``. Backslash, tab, newline and carriage return inside a field
are written as ``\\\\``, ``\\t``, ``\\n``, ``\\r``. The first line is the header ``#listing v1 ...``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from ..io import atomic_path
from ..sharding import shard_names
from .inspect import Rejected
from .scan import Candidate, ScanStats, scan

__all__ = ["ListingEntry", "ListingResult", "HEADER", "write_listings", "read_listing", "listing_lines"]

HEADER = "#listing v1\timage_id\tsize\tmtime_ns\treason\tdetail"
SUFFIX = ".tsv"

_ESC = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_UNESC = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


@dataclass(frozen=True)
class ListingEntry:
    """One line of a listing: a candidate image (size, mtime_ns) or a scan reject (reason, detail)."""

    image_id: str
    size: int | None = None
    mtime_ns: int | None = None
    reason: str | None = None
    detail: str | None = None


@dataclass
class ListingResult:
    files: int = 0  # candidate image files
    rejected: int = 0  # scan rejects (they become quarantine rows)
    changed: list[str] = field(default_factory=list)  # shard names whose listing was (re)written
    removed: list[str] = field(default_factory=list)  # stale listing files deleted (shard no longer exists)
    stats: ScanStats = field(default_factory=ScanStats)


def _esc(text: str) -> str:
    return text.translate(_ESC) if ("\\" in text or "\t" in text or "\n" in text or "\r" in text) else text


def _unesc(text: str) -> str:
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in _UNESC:
            out.append(_UNESC[text[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _shard(image_id: str, n_shards: int) -> int:
    # the same function as sharding.shard_of, inlined: it runs once per file at parse time
    return int.from_bytes(hashlib.blake2b(image_id.encode("utf-8"), digest_size=8).digest(), "big") % n_shards


def listing_lines(
    image_root: str | os.PathLike,
    settings: Mapping[str, Any],
    n_shards: int,
    *,
    exclude_dirs: Iterable[str | os.PathLike] = (),
    stats: ScanStats | None = None,
) -> list[list[tuple[str, str]]]:
    """Scan ``image_root``; return per shard a list of (image_id, line) pairs (unsorted)."""
    shards: list[list[tuple[str, str]]] = [[] for _ in range(n_shards)]
    items: Iterator[Candidate | Rejected] = scan(
        image_root,
        extensions=settings["extensions"],
        follow_symlinks=settings["follow_symlinks"],
        skip_hidden=settings["skip_hidden"],
        exclude_dirs=exclude_dirs,
        stats=stats,
        with_stat=True,
    )
    for item in items:
        if type(item) is Candidate:
            iid = item.image_id
            shards[_shard(iid, n_shards)].append((iid, f"{_esc(iid)}\t{item.size}\t{item.mtime_ns}\t\t"))
        else:
            path = item.path
            shards[_shard(path, n_shards)].append(
                (path, f"{_esc(path)}\t\t\t{_esc(item.reason)}\t{_esc(item.detail or '')}")
            )
            if stats is not None:
                stats.rejected += 1
    return shards


def write_listings(
    image_root: str | os.PathLike,
    listing_dir: str | os.PathLike,
    settings: Mapping[str, Any],
    n_shards: int,
    *,
    exclude_dirs: Iterable[str | os.PathLike] = (),
) -> ListingResult:
    """Scan ``image_root`` and write ``<listing_dir>/<shard>.tsv`` for every shard whose content changed.

    Raises FileNotFoundError (naming ``paths.image_root``) when the folder does not exist.
    """
    root = Path(image_root)
    if not root.is_dir():
        raise FileNotFoundError(
            f"paths.image_root: {str(image_root)!r} is not a directory "
            f"({'it does not exist' if not root.exists() else 'it is a file'}); set paths.image_root to the "
            "folder that holds your images"
        )
    res = ListingResult()
    per_shard = listing_lines(root, settings, n_shards, exclude_dirs=exclude_dirs, stats=res.stats)
    res.rejected = res.stats.rejected
    res.files = sum(len(rows) for rows in per_shard) - res.rejected
    out = Path(listing_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = shard_names(n_shards)
    for name, rows in zip(names, per_shard):
        rows.sort()
        data = "\n".join([HEADER, *(line for _, line in rows)]).encode("utf-8") + b"\n"
        path = out / f"{name}{SUFFIX}"
        if _same(path, data):
            continue
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)
        res.changed.append(name)
    wanted = {f"{n}{SUFFIX}" for n in names}
    for stale in sorted(out.glob(f"*{SUFFIX}")):
        if stale.name not in wanted and stale.stem.isdigit():
            stale.unlink()
            res.removed.append(stale.stem)
    return res


def _same(path: Path, data: bytes) -> bool:
    try:
        if path.stat().st_size != len(data):
            return False
        return path.read_bytes() == data
    except FileNotFoundError:
        return False


def read_listing(path: str | os.PathLike) -> list[ListingEntry]:
    """Parse a listing file (see module docstring); raises ValueError naming the file and line."""
    p = Path(path)
    entries: list[ListingEntry] = []
    with open(p, encoding="utf-8", newline="\n") as fh:
        header = fh.readline().rstrip("\n")
        if header != HEADER:
            raise ValueError(f"{p}: not a benchmaker listing (first line {header[:60]!r}, expected {HEADER!r})")
        for lineno, line in enumerate(fh, start=2):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 5:
                raise ValueError(f"{p}:{lineno}: expected 5 tab-separated fields, got {len(parts)}")
            iid, size, mtime, reason, detail = parts
            try:
                if reason:
                    entries.append(ListingEntry(_unesc(iid), reason=_unesc(reason), detail=_unesc(detail) or None))
                else:
                    entries.append(ListingEntry(_unesc(iid), int(size), int(mtime)))
            except ValueError:
                raise ValueError(f"{p}:{lineno}: size and mtime_ns must be integers, got {size!r}, {mtime!r}") from None
    return entries

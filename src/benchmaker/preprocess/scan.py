"""Recursive, read-only scan of the image folder.

Yields ``Candidate`` (a file to inspect, by image_id) and ``Rejected`` (symlink problems, undecodable
file names) in a deterministic order (names sorted at every level). Nothing is ever created, changed
or deleted under the root; hidden files are skipped, not removed.

Symlinks: with ``follow_symlinks`` a link (to a file or a directory) is used only when its target
resolves inside ``image_root``; its image_id is the link's own path. A directory reached twice (two
links, or a link loop) is scanned once. Without ``follow_symlinks`` every link is quarantined as
``symlink``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from ..settings_schema import default
from .inspect import Rejected

__all__ = ["Candidate", "ScanStats", "scan", "is_hidden"]

_MAC_JUNK = {".DS_Store", "__MACOSX", "Thumbs.db", "desktop.ini"}


@dataclass(frozen=True, slots=True)
class Candidate:
    image_id: str
    size: int | None = None  # with ``scan(..., with_stat=True)``: st_size and st_mtime_ns of the file
    mtime_ns: int | None = None  # (of the link's target for a followed symlink)


@dataclass
class ScanStats:
    files_seen: int = 0
    skipped_extension: int = 0
    skipped_hidden: int = 0
    skipped_excluded_dirs: int = 0
    rejected: int = 0  # counted by callers that want it (preprocess.listing)
    extensions_skipped: dict[str, int] = field(default_factory=dict)


def is_hidden(name: str) -> bool:
    """Dot files and folders (this includes macOS ``._*`` and ``.DS_Store``) and OS junk folders."""
    return name.startswith(".") or name in _MAC_JUNK


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _safe_id(rel: str) -> str | None:
    """The POSIX image_id of a relative path, or None when the name is not valid UTF-8."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return rel.replace(os.sep, "/") if os.sep != "/" else rel


def _printable(rel: str) -> str:
    return rel.encode("utf-8", "backslashreplace").decode("utf-8").replace(os.sep, "/")


def _ext(name: str) -> str:
    """``os.path.splitext(name)[1].lower()`` for a bare file name, without its per-call overhead."""
    i = name.rfind(".")
    if i <= 0 or not name[:i].strip("."):
        return ""
    return name[i:].lower()


def _candidate(image_id: str, entry: os.DirEntry, follow: bool) -> Candidate | Rejected:
    try:
        st = entry.stat(follow_symlinks=follow)
    except OSError as exc:
        return Rejected(image_id, "unreadable", f"cannot stat: {exc.strerror}")
    return Candidate(image_id, st.st_size, st.st_mtime_ns)


def _link(entry: os.DirEntry, rel: str, *, exts: set[str], follow: bool, real_root: str, excluded: set[str],
          stats: ScanStats) -> Rejected | str | None:
    """What :func:`scan` does with a symbolic link: ``"file"`` (an image file to yield), ``"folder"`` (a
    folder to enter), a :class:`Rejected` (links not followed, broken, or leading outside the root), or
    None (ignored: a link to a non-image file name or to an excluded folder, counted in ``stats``)."""
    target_is_dir = entry.is_dir(follow_symlinks=True) if os.path.exists(entry.path) else False
    ext = os.path.splitext(entry.name)[1].lower()
    if not target_is_dir and ext not in exts:
        stats.files_seen += 1
        stats.skipped_extension += 1
        return None  # a link to a non-image file name: ignored like any other such file
    printable = _printable(rel)
    if not follow:
        kind = "directory" if target_is_dir else "file"
        return Rejected(printable, "symlink", f"symbolic link to a {kind}; preprocess.follow_symlinks is false")
    if not os.path.exists(entry.path):
        return Rejected(printable, "broken_symlink", f"target {os.readlink(entry.path)!r} does not exist")
    real = os.path.realpath(entry.path)
    if not _is_within(real, real_root):
        return Rejected(printable, "symlink_escape", "resolves outside image_root")
    if target_is_dir:
        if real in excluded:
            stats.skipped_excluded_dirs += 1
            return None
        return "folder"
    return "file"


def scan(
    root: str | os.PathLike,
    *,
    extensions: Iterable[str],
    follow_symlinks: bool = default("preprocess.follow_symlinks"),
    skip_hidden: bool = default("preprocess.skip_hidden"),
    exclude_dirs: Iterable[str | os.PathLike] = (),
    stats: ScanStats | None = None,
    with_stat: bool = False,
) -> Iterator[Candidate | Rejected]:
    """Walk ``root`` and yield what to inspect and what to quarantine.

    ``with_stat``: fill ``Candidate.size`` / ``mtime_ns`` (one ``stat`` per file; used by the change
    detection listing, preprocess.listing). A file that cannot be stat'ed is yielded as ``unreadable``.
    """
    root_path = Path(root)
    if not root_path.is_dir():
        raise FileNotFoundError(f"image_root {root} is not a directory")
    stats = stats if stats is not None else ScanStats()
    exts = {e.lower() for e in extensions}
    real_root = os.path.realpath(root_path)
    excluded = {os.path.realpath(p) for p in exclude_dirs}
    visited: set[str] = set()

    # depth first, names sorted at every level; an explicit stack instead of recursive generators
    # (a `yield from` chain costs every file one generator frame per folder level)
    stack: list[tuple[Iterator[os.DirEntry], str]] = []

    def enter(dir_path: str, rel_dir: str) -> Rejected | None:
        real_dir = os.path.realpath(dir_path)
        if real_dir in visited:
            return None
        visited.add(real_dir)
        try:
            with os.scandir(dir_path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            return Rejected(_printable(rel_dir) or ".", "unreadable", f"cannot list directory: {exc.strerror}")
        stack.append((iter(entries), rel_dir))
        return None

    def walk(dir_path: str, rel_dir: str) -> Iterator[Candidate | Rejected]:
        problem = enter(dir_path, rel_dir)
        if problem is not None:
            yield problem
        while stack:
            entries, rel_dir = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                continue
            name = entry.name
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if skip_hidden and is_hidden(name):
                stats.skipped_hidden += 1
                continue
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError as exc:
                yield Rejected(_printable(rel), "unreadable", exc.strerror)
                continue
            if not is_link and is_dir:
                if os.path.realpath(entry.path) in excluded:
                    stats.skipped_excluded_dirs += 1
                    continue
                problem = enter(entry.path, rel)
                if problem is not None:
                    yield problem
                continue
            if not is_link:
                if not entry.is_file(follow_symlinks=False):
                    continue  # sockets, fifos, devices: never images, never opened
                stats.files_seen += 1
                ext = _ext(name)
                if ext not in exts:
                    stats.skipped_extension += 1
                    stats.extensions_skipped[ext or "<none>"] = stats.extensions_skipped.get(ext or "<none>", 0) + 1
                    continue
                image_id = _safe_id(rel)
                if image_id is None:
                    yield Rejected(_printable(rel), "invalid_filename", "file name is not valid UTF-8")
                    continue
                yield _candidate(image_id, entry, False) if with_stat else Candidate(image_id)
                continue
            # a symbolic link
            link = _link(entry, rel, exts=exts, follow=follow_symlinks, real_root=real_root, excluded=excluded,
                         stats=stats)
            if isinstance(link, Rejected):
                yield link
            elif link == "folder":
                problem = enter(entry.path, rel)
                if problem is not None:
                    yield problem
            elif link == "file":
                stats.files_seen += 1
                image_id = _safe_id(rel)
                if image_id is None:
                    yield Rejected(_printable(rel), "invalid_filename", "file name is not valid UTF-8")
                    continue
                yield _candidate(image_id, entry, True) if with_stat else Candidate(image_id)

    yield from walk(str(root_path), "")

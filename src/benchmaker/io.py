"""Atomic file writing and streaming JSONL helpers (no heavy imports)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

__all__ = ["atomic_path", "publish_mode", "atomic_write_text", "write_jsonl", "iter_jsonl", "ensure_parent",
           "JsonlAppender", "remove_stale_temporaries", "temporary_prefix", "as_paths", "file_sha256"]


def as_paths(value: str | os.PathLike | Iterable[str | os.PathLike] | None) -> list[str]:
    """None -> [], one path -> [path], a list stays a list (a Snakemake input or output is either)."""
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [os.fspath(value)]
    return [os.fspath(v) for v in value]


def ensure_parent(path: str | os.PathLike) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes (hex), read in blocks (hashlib.file_digest)."""
    import hashlib

    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def publish_mode(path: str | os.PathLike, directory: bool = False) -> None:
    """Give a temporary file/folder the mode a plain open()/mkdir() would (mkstemp/mkdtemp make 0600/0700):
    outputs on a shared cluster file system stay readable by the group, as the user's umask allows."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it over ``path`` only if the block succeeds."""
    target = ensure_parent(path)
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(target), suffix=suffix or ".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.exists():
            publish_mode(tmp_path, directory=tmp_path.is_dir())
        os.replace(tmp_path, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


# What a stage writes next to an output before it is complete is named after the output,
# ".<name>.<kind>" (temporary_prefix) + what tempfile or the writer adds, by kind: atomic_path's file
# (tempfile's 8 random [a-z0-9_], then its suffix), the merge's spill folder (parts.), the folder
# pages.outdir moves aside (old.<pid>). remove_stale_temporaries matches exactly these.
_TEMPORARY_KINDS = {"": r"[a-z0-9_]{8}(?:\.[a-z]+)*", "parts.": r"[a-z0-9_]{8}", "old.": r"\d+"}


def temporary_prefix(path: str | os.PathLike, kind: str = "") -> str:
    """The name prefix of a temporary written next to ``path`` (``kind``: one of ``_TEMPORARY_KINDS``)."""
    if kind not in _TEMPORARY_KINDS:
        raise ValueError(f"temporary kind {kind!r}: not one of {sorted(_TEMPORARY_KINDS)}")
    return f".{Path(path).name}.{kind}"


def remove_stale_temporaries(path: str | os.PathLike) -> list[str]:
    """Remove what an interrupted earlier attempt at writing ``path`` left next to it (a SIGKILL skips
    every cleanup), so that a resumed run leaves the same files as an uninterrupted one. Only for a
    path that one job owns (a Snakemake output): a concurrent writer's temporary would go too.
    Returns the names removed."""
    target = Path(path)
    pattern = re.compile("|".join(re.escape(temporary_prefix(target, k)) + rest
                                  for k, rest in _TEMPORARY_KINDS.items()))
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return []
    removed = []
    for e in entries:
        if pattern.fullmatch(e.name):
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(e.path)
            removed.append(e.name)
    return sorted(removed)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _default(o: Any):
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=_default)


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> int:
    """Atomically write rows as JSON lines; returns the number of rows."""
    n = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(dumps(row))
            fh.write("\n")
            n += 1
    return n


def iter_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    """Stream rows of a JSONL file; blank lines are skipped; a bad line raises with its number."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None


class JsonlAppender:
    """Append-only JSONL journal, flushed and fsynced per write: survives interrupts (used by caches/state)."""

    def __init__(self, path: str | os.PathLike):
        self.path = ensure_parent(path)
        self._fh = open(self.path, "a", encoding="utf-8")

    def write(self, row: dict) -> None:
        self._fh.write(dumps(row) + "\n")
        self._fh.flush()

    def sync(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
            self.sync()
            self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

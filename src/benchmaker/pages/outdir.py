"""Directory outputs written whole: build in a sibling temporary folder, then move into place."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from ..io import publish_mode, temporary_prefix

__all__ = ["staged_dir"]


@contextlib.contextmanager
def staged_dir(target: str | os.PathLike, marker: str) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``target``; on success it replaces ``target``.

    An existing ``target`` is replaced only if it is empty or holds ``marker`` (a file this stage
    writes), so a folder that is not ours is never deleted.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / marker).exists())):
        raise FileExistsError(f"{target} exists and was not written by this stage (no {marker}); "
                              "move it away or choose another results folder")
    tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(target), dir=target.parent))
    try:
        yield tmp
        publish_mode(tmp, directory=True)
        if target.exists():
            old = target.with_name(f"{temporary_prefix(target, 'old.')}{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

"""numba's on-disk cache for this package's compiled functions, keyed by content instead of path.

numba files a ``cache=True`` function under ``$NUMBA_CACHE_DIR/<folder>_<sha1 of the source file's
absolute folder>`` (``numba.core.caching.UserProvidedCacheLocator``). The container image compiles
the planner's search at build time (``python -m benchmaker.plan.warm``, Dockerfile), but a
Kubernetes pod imports the workflow's own ``src/`` that Snakemake ships with each job, at another
path, so every plan job there compiled it again (~11 s on 2 cores, about what the compiled search
saves at 1M images x 10k queries).

:class:`ContentCacheLocator` files the functions of a module of this package under
``$NUMBA_CACHE_DIR/benchmaker-<module path>-<sha256 of the file, 16 hex>`` instead: the same
source finds the same entries from any path (the image's installed copy, a pod's shipped copy,
another checkout), and an edited file gets a folder of its own (numba's own check, a content hash
of the file since numba 0.68, still guards every entry). It applies only with ``$NUMBA_CACHE_DIR``
set (otherwise numba keeps its cache beside the module, ``__pycache__``, as before) and only to
files inside this package; every other function (ranx's) goes to numba's own locators.

:func:`install` puts it first in ``numba.config.CACHE_LOCATOR_CLASSES`` (numba >= 0.68; with an older
numba, or when the user set ``NUMBA_CACHE_LOCATOR_CLASSES``, it does nothing). It must run before the
module's ``@njit(cache=True)`` decorators, which choose the locator (``plan/compiled.py`` calls it
first).

:func:`lock_cache_files` makes numba's reads and writes of one cache folder whole operations across
processes (a lock file in the folder). numba's ``IndexDataCacheFile.save`` reads the folder's index,
picks the first data file number the index does not use, writes the index, then the data file; two
jobs saving two signatures of one function at once (the evaluate, deepen and audit jobs of one run
compiling ranx into one fresh per-user cache, as the pods of a cluster run do) both take number 1,
and a job that loads between their writes gets the other signature's machine code for its own: ranx
then scored every pool as unjudged (tests/test_nrp_dryrun.py, the shipped controller Job against a
local run of the same config). numba's own issue: numba/numba#10128.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["install", "cache_folder", "lock_cache_files"]  # and ContentCacheLocator (__getattr__: needs numba)

_PACKAGE = Path(__file__).resolve().parent
# numba's own locators, in numba's order (numba.core.caching._CacheImpl._locator_classes)
_NUMBA_LOCATORS = ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator",
                   "IPythonCacheLocator", "ZipCacheLocator")


def cache_folder(py_file: str | os.PathLike, cache_dir: str | os.PathLike) -> Path | None:
    """Where :class:`ContentCacheLocator` files the functions of ``py_file`` (None: not a module of
    this package, or no such file)."""
    path = Path(py_file).resolve()
    try:
        rel = path.relative_to(_PACKAGE)
    except ValueError:
        # a copy of the package elsewhere (a pod's shipped src/): found by its own package folder
        parts = path.parts
        if "benchmaker" not in parts[:-1]:
            return None
        i = len(parts) - 1 - parts[::-1].index("benchmaker")
        rel = Path(*parts[i + 1:])
    if not path.is_file():
        return None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    name = "-".join(["benchmaker", *rel.with_suffix("").parts, digest])
    return Path(cache_dir) / name


def _locator_class():
    from numba.core import config
    from numba.core.caching import UserProvidedCacheLocator

    class ContentCacheLocator(UserProvidedCacheLocator):
        """``$NUMBA_CACHE_DIR/benchmaker-<module>-<content hash>`` for this package's modules."""

        def __init__(self, py_func, py_file):
            super().__init__(py_func, py_file)
            self._cache_path = str(cache_folder(py_file, config.CACHE_DIR))

        @classmethod
        def from_function(cls, py_func, py_file):
            if not config.CACHE_DIR or cache_folder(py_file, config.CACHE_DIR) is None:
                return None
            return super().from_function(py_func, py_file)

    ContentCacheLocator.__module__ = __name__
    return ContentCacheLocator


def __getattr__(name: str):
    # the class needs numba: defined on first use, so importing this module never imports numba
    if name == "ContentCacheLocator":
        cls = _locator_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


def install() -> bool:
    """Make numba choose :class:`ContentCacheLocator` first; True when it is in use. Installs
    :func:`lock_cache_files` too."""
    from numba.core import config

    lock_cache_files()

    if not hasattr(config, "CACHE_LOCATOR_CLASSES") or os.environ.get("NUMBA_CACHE_LOCATOR_CLASSES"):
        return False
    ours = f"{__name__}.ContentCacheLocator"
    current = config.CACHE_LOCATOR_CLASSES or ",".join(_NUMBA_LOCATORS)
    if ours not in current.split(","):
        config.CACHE_LOCATOR_CLASSES = ",".join([ours, current])
    return True


LOCK_NAME = ".benchmaker-cache.lock"  # in each cache folder numba writes to


def lock_cache_files() -> bool:
    """Make numba's cache index and data file operations atomic across processes (module docstring):
    ``save`` under an exclusive lock of the folder's :data:`LOCK_NAME`, ``load`` under a shared one.
    Idempotent; True when it installed the locks now. Must run before the first cached function
    loads or saves (:func:`install` and ``evaluate.runs.set_numba_cache`` call it)."""
    import fcntl

    from numba.core.caching import IndexDataCacheFile

    if getattr(IndexDataCacheFile, "_benchmaker_locked", False):
        return False

    def locked(fn, mode):
        def wrapper(self, *args):
            try:
                fh = open(os.path.join(self._cache_path, LOCK_NAME), "a+b")
            except OSError:  # a folder numba can read but not write (an image's read-only cache)
                return fn(self, *args)
            with fh:
                fcntl.flock(fh, mode)
                return fn(self, *args)  # closing the file releases the lock

        wrapper.__wrapped__ = fn
        return wrapper

    IndexDataCacheFile.save = locked(IndexDataCacheFile.save, fcntl.LOCK_EX)
    IndexDataCacheFile.load = locked(IndexDataCacheFile.load, fcntl.LOCK_SH)
    IndexDataCacheFile._benchmaker_locked = True
    return True

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
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["install", "cache_folder"]  # and ContentCacheLocator (module __getattr__: it needs numba)

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
    """Make numba choose :class:`ContentCacheLocator` first; True when it is in use."""
    from numba.core import config

    if not hasattr(config, "CACHE_LOCATOR_CLASSES") or os.environ.get("NUMBA_CACHE_LOCATOR_CLASSES"):
        return False
    ours = f"{__name__}.ContentCacheLocator"
    current = config.CACHE_LOCATOR_CLASSES or ",".join(_NUMBA_LOCATORS)
    if ours not in current.split(","):
        config.CACHE_LOCATOR_CLASSES = ",".join([ours, current])
    return True

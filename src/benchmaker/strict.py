"""Strict mode: a job sees only the files it declares, as a pod does (docs/architecture.md).

On a cluster (``--profile nrp``) a job's pod holds only the inputs its rule declares, staged from the
bucket; a stage that reads a file beside a declared one (``Path(input).parent / "other.csv"``) works
locally and fails, or silently does less, in a pod. Strict mode gives every local job the pod's view:
with ``BENCHMAKER_STRICT=1`` in the environment (the test suite sets it for every workflow run,
tests/support.py), :func:`sandbox_inputs` links each declared input into a fresh folder of its own and
the stage reads them from there, so a read of anything beside them fails with FileNotFoundError naming
the file, in the run that introduced it.

What it does not cover: paths that a stage gets through its params rather than its inputs (the image
folder, model folders, the caches and the crash-safe state under ``<results>/.cache``, ``.batches``,
``.ledger``, which are shared by design and never published) are read where they are; outputs, logs
and the run-facts file are written where the rule says. A stage that resolves a symlink
(``Path.resolve``) sees the real folder again. An error about an input names its link in the sandbox
(``/tmp/benchmaker-strict-<rule>-*/root/<the path as declared>``; relative paths without ``root/``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from typing import Any, Iterator

__all__ = ["ENV", "strict_on", "sandbox_inputs"]

ENV = "BENCHMAKER_STRICT"


def strict_on(environ: Any = None) -> bool:
    """Whether strict mode is on: ``BENCHMAKER_STRICT`` is set to 1 / true / yes / on."""
    value = (os.environ if environ is None else environ).get(ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def _place(sandbox: str, path: str) -> str:
    """Where ``path`` (relative to the job's folder, or absolute) appears in the sandbox: the same
    relative path, so that declared siblings stay siblings."""
    if os.path.isabs(path):
        return os.path.join(sandbox, "root", os.path.normpath(path).lstrip(os.sep))
    norm = os.path.normpath(path)
    if norm.startswith(os.pardir):
        return os.path.join(sandbox, "up", os.path.abspath(path).lstrip(os.sep))
    return os.path.join(sandbox, norm)


def _link(sandbox: str, value: Any) -> Any:
    """``value`` (a path or a list of paths) with each path replaced by its link in the sandbox."""
    if isinstance(value, (list, tuple)):
        return [_link(sandbox, v) for v in value]
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        return value
    path = os.fspath(value)
    place = _place(sandbox, path)
    if not os.path.lexists(place):
        os.makedirs(os.path.dirname(place), exist_ok=True)
        os.symlink(os.path.abspath(path), place)
    return place


@contextmanager
def sandbox_inputs(kwargs: dict[str, Any], kinds: dict[str, str], *, rule: str | None = None,
                   on: bool = True, environ: Any = None) -> Iterator[dict[str, Any]]:
    """``kwargs`` with every input (``kinds[name] == "input"``) read from a folder holding only the
    declared inputs, while strict mode is on (and ``on``: the runner's job is a Snakemake job);
    unchanged otherwise. The folder is removed afterwards."""
    if not (on and strict_on(environ)):
        yield kwargs
        return
    sandbox = tempfile.mkdtemp(prefix=f"benchmaker-strict-{rule or 'job'}-")
    try:
        yield {k: (_link(sandbox, v) if kinds.get(k) == "input" else v) for k, v in kwargs.items()}
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)

"""Where a job finds the files the controller staged (``--profile nrp``): the names of staged copies
and the mapping of a job's params onto them. Dependency-free, because every rule script's runner
(benchmaker.runner) uses it; the rest of staging is benchmaker.staging.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["LOCAL_DIR", "job_paths", "stage_key"]

LOCAL_DIR = "local-dir:"


def stage_key(path_as_written: str) -> str:
    """12 hex digits naming the staged copy of ``path_as_written`` (stable across hosts)."""
    return hashlib.sha256(str(path_as_written).encode()).hexdigest()[:12]


#: where a staged input lies, as any job sees it: <RESULTS>/inputs/<file|dir>/<key>/<name>
_STAGED = re.compile(r"(?:^|/)inputs/(file|dir)/([0-9a-f]{12})/[^/]+$")


def job_paths(value: Any, inputs: Iterable[Any]) -> Any:
    """``value`` (a param: a config section, a list, a string) with every path the controller staged
    replaced by where this job finds the staged copy among its ``inputs``.

    A string names a staged input when its :func:`stage_key` (``local-dir:`` prefix aside) is the key
    of one of the job's inputs ``.../inputs/<file|dir>/<key>/<name>``; so a pod reads exactly the copy
    of what the config names, whatever the key (trec_run files, human label files, model folders).
    Without staging (local runs, SLURM) no input has that form and ``value`` comes back unchanged.
    """
    found: dict[str, str] = {}
    stack = list(inputs)
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, (str, os.PathLike)):
            m = _STAGED.search(str(item))
            if m:
                found[m.group(2)] = str(item)
    if not found:
        return value

    def swap(v: Any) -> Any:
        if isinstance(v, str) and v:
            if v.startswith(LOCAL_DIR) and stage_key(v[len(LOCAL_DIR):]) in found:
                return LOCAL_DIR + found[stage_key(v[len(LOCAL_DIR):])]
            return found.get(stage_key(v), v)
        if isinstance(v, Mapping):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [swap(x) for x in v]
        return v

    return swap(value)




def staged_paths(value: Any, inputs: Iterable[Any]) -> dict[str, str]:
    """``{path as written: this job's copy}`` for every string in ``value`` (``local-dir:`` prefix
    aside) whose staged copy is among ``inputs`` (empty without staging)."""
    out: dict[str, str] = {}
    mapped = job_paths(value, inputs)

    def pair(v: Any, m: Any) -> None:
        if isinstance(v, str) and isinstance(m, str) and v != m:
            if v.startswith(LOCAL_DIR):
                v, m = v[len(LOCAL_DIR):], m[len(LOCAL_DIR):]
            out[v] = m
        elif isinstance(v, Mapping) and isinstance(m, Mapping):
            for k in v:
                pair(v[k], m.get(k))
        elif isinstance(v, (list, tuple)) and isinstance(m, (list, tuple)):
            for a, b in zip(v, m):
                pair(a, b)

    pair(value, mapped)
    return out


def link_staged(value: Any, inputs: Iterable[Any]) -> bool:
    """Make every staged path in ``value`` readable **at the path as written**: a symbolic link from
    there to this job's copy (a pod has no such file; its folders are created). The job then runs
    with its params unchanged, so what it records in its outputs (a leaderboard's system settings, a
    card's config) is what the user wrote, never a pod's storage path. Returns False when a link
    cannot be made (a read-only or foreign path): the caller then maps the param instead
    (:func:`job_paths`). Existing paths are left alone."""
    ok = True
    for written, copy in staged_paths(value, inputs).items():
        target = os.path.expanduser(written)
        if os.path.lexists(target):
            if os.path.realpath(target) != os.path.realpath(copy):
                ok = False
            continue
        try:
            os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
            os.symlink(os.path.abspath(copy), target)
        except OSError:
            ok = False
    return ok

"""The controller's own calls to SLURM (``--profile slurm``), before anything is submitted.

:func:`previous_jobs` finds the jobs of an earlier controller of the same build that are still
queued or running (a controller killed with ``kill -9``, a lost SSH session, a crashed login node):
their Snakemake keeps running on the compute nodes, where ``pgrep`` cannot see it. The slurm
executor submits every job with ``-D <working directory>``, ``--comment rule_<rule>[_wildcards_…]``
and ``--job-name [<prefix>_]<run uuid>`` (a new uuid per controller), so a job belongs to this build
when it is the user's, its working directory is the build's (one ``.snakemake`` per folder: the
folder is the build's id, as the storage prefix is on Kubernetes) and its name and comment are the
executor's. The workflow cancels them before submitting anything (:func:`cancel_jobs`) and waits
until SLURM reports them gone, so that two jobs never write the same output; their outputs are
remade, because the dead controller left them marked incomplete (``rerun-incomplete`` in the
profile; benchmaker.snakemake_compat keeps a cluster job's own Snakemake from removing that mark).

Waiting for them instead would gain nothing: what they finish unwatched is remade anyway, since no
controller recorded how it was made.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass

__all__ = ["PreviousJob", "SlurmError", "cancel_jobs", "parse_squeue", "previous_jobs"]

# what `squeue` lists by default: PENDING, RUNNING, SUSPENDED, COMPLETING, CONFIGURING, ...
_FORMAT = "%i|%j|%T|%Z|%k"
_RUN_NAME = re.compile(r"(^|_)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_COMMENT = re.compile(r"^rule_(\w+?)(_wildcards_.*)?$")


class SlurmError(RuntimeError):
    """SLURM cannot be asked or told what the recovery needs (the message says what to do)."""


@dataclass(frozen=True)
class PreviousJob:
    job_id: str
    rule: str
    state: str


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def parse_squeue(text: str, workdir: str) -> list[PreviousJob]:
    """The executor's jobs with working directory ``workdir`` in ``squeue -o '%i|%j|%T|%Z|%k'`` output."""
    out = []
    for line in text.splitlines():
        parts = line.strip().split("|", 4)
        if len(parts) != 5:
            continue
        job_id, name, state, wd, comment = parts
        m = _COMMENT.match(comment.strip())
        if m and _RUN_NAME.search(name.strip()) and _same_dir(wd.strip(), workdir):
            out.append(PreviousJob(job_id.strip(), m.group(1), state.strip()))
    return sorted(out, key=lambda j: (j.rule, j.job_id))


def _squeue(args: list[str], timeout: float) -> str:
    try:
        res = subprocess.run(["squeue", "--noheader", "-o", _FORMAT, *args], capture_output=True,
                             text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"cannot list this user's SLURM jobs (squeue): {exc}") from None
    if res.returncode != 0:
        raise SlurmError(f"cannot list this user's SLURM jobs: squeue exited {res.returncode}: "
                         f"{res.stderr.strip()[:300]}")
    return res.stdout


def _mine() -> list[str]:
    import pwd

    return ["--user", pwd.getpwuid(os.getuid()).pw_name]


def previous_jobs(workdir: str, *, timeout: float = 60) -> list[PreviousJob]:
    """This user's queued or running jobs that a Snakemake controller submitted from ``workdir``."""
    return parse_squeue(_squeue(_mine(), timeout), workdir)


def cancel_jobs(jobs: list[PreviousJob], *, timeout: float = 300) -> None:
    """``scancel`` ``jobs`` and wait until squeue lists none of them any more (their processes on
    the compute nodes are gone once a job leaves COMPLETING)."""
    if not jobs:
        return
    ids = [j.job_id for j in jobs]
    fix = f"cancel them yourself (scancel {' '.join(ids)}) and run again"
    try:
        res = subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"cannot cancel the previous controller's SLURM jobs: {exc}; {fix}") from None
    if res.returncode != 0 and "already completing or completed" not in res.stderr:
        raise SlurmError(f"scancel exited {res.returncode}: {res.stderr.strip()[:300]}; {fix}")
    deadline = time.monotonic() + timeout
    while True:
        alive = {line.split("|", 1)[0].strip() for line in _squeue(_mine(), 60).splitlines()} & set(ids)
        if not alive:
            return
        if time.monotonic() > deadline:
            raise SlurmError(f"SLURM jobs of a previous controller still listed {timeout:.0f} s after "
                             f"scancel: {', '.join(sorted(alive))}; {fix}")
        time.sleep(1)

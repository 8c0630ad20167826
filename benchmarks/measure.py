"""Measure a command: wall time and peak resident memory of its whole process tree.

``/usr/bin/time``-style ``ru_maxrss`` counts one process (the largest waited-for child), and
Snakemake's benchmark TSVs sample every 30 s by default (sub-second jobs report nothing, forked
DataLoader workers are added with their shared pages). Here a thread samples the tree with psutil
every ``interval`` seconds and sums the **USS** (unique set size: pages only that process holds, so
copy-on-write pages shared with a forked parent count once) of every process in it, and the peak
``ru_maxrss`` of the root process is taken too; the report is the larger of the two, so a job shorter
than the sampling interval still reports its real peak.
"""

from __future__ import annotations

import resource
import subprocess
import threading
import time
from dataclasses import dataclass, field

import psutil


def _uss(p: psutil.Process) -> int:
    try:
        return p.memory_full_info().uss
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return 0
    except Exception:
        try:
            return p.memory_info().rss
        except Exception:
            return 0


def tree_uss(root: psutil.Process) -> int:
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    return sum(_uss(p) for p in procs)


@dataclass
class Measured:
    returncode: int
    wall_s: float
    peak_mb: float
    stdout: str = ""
    stderr: str = ""
    extra: dict = field(default_factory=dict)


def run_measured(cmd: list[str], *, env: dict | None = None, cwd: str | None = None,
                 interval: float = 0.1, capture: bool = True) -> Measured:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, text=True,
                            stdout=subprocess.PIPE if capture else None,
                            stderr=subprocess.PIPE if capture else None)
    ps = psutil.Process(proc.pid)
    peak = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], tree_uss(ps))
            stop.wait(interval)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    stop.set()
    th.join()
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest child so far
    return Measured(proc.returncode, wall, max(peak[0], 0) / 1e6, out or "", err or "",
                    {"children_maxrss_mb": ru / 1e6})


class TreeSampler:
    """Per-job peak memory of a running Snakemake: every direct child of ``root`` is one job (its
    script process); its peak is the max over samples of the USS summed over its subtree."""

    def __init__(self, root_pid: int, interval: float = 0.2):
        self.root = psutil.Process(root_pid)
        self.interval = interval
        self.jobs: dict[int, dict] = {}
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)

    def start(self) -> TreeSampler:
        self._th.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._th.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                kids = self.root.children(recursive=False)
            except psutil.NoSuchProcess:
                return
            now = time.time()
            for k in kids:
                try:
                    cmd = " ".join(k.cmdline())
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                j = self.jobs.setdefault(k.pid, {"cmd": cmd, "peak_mb": 0.0, "start": now, "end": now})
                j["peak_mb"] = max(j["peak_mb"], tree_uss(k) / 1e6)
                j["end"] = now
            self._stop.wait(self.interval)

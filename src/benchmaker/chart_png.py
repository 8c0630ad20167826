"""Vega-Lite specs to PNG files with vl-convert, in a helper process beside the stage that draws them.

vl-convert renders in the calling thread with Python's GIL held, and starting its JavaScript engine
costs ~0.5-0.7 s of CPU in every process: in the summary stage, 20 charts rendered one after the other
were ~2 of its ~4.5 s, on the workflow's critical path. :class:`PngProcess` starts
``python -m benchmaker.chart_png`` as the stage starts, so that the engine starts on another core while
the stage reads its inputs and builds its charts, and each chart renders there while the stage builds
the next one (and draws the contact sheet). The bytes are those of altair's ``Chart.save(format="png")``:
the same ``vl_convert.vegalite_to_png`` call with the same arguments (:func:`render`;
``tests/test_summary.py`` compares the two). This module imports neither altair nor polars.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from .io import atomic_path

__all__ = ["PPI", "PngProcess", "render", "write"]

PPI = 72  # altair's PNG default (altair.utils.mimebundle: ppi 72, no format or time-format locale)
_WARM = {"data": {"values": [{"a": 0}]}, "mark": "point", "encoding": {"x": {"field": "a", "type": "quantitative"}}}


def render(spec: dict[str, Any], vl_version: str, scale: float) -> bytes:
    """The PNG of a Vega-Lite spec, as altair's ``Chart.save`` renders it."""
    import vl_convert as vlc

    return vlc.vegalite_to_png(spec, vl_version=vl_version, scale=scale, ppi=PPI, format_locale=None,
                               time_format_locale=None)


def write(spec: dict[str, Any], vl_version: str, scale: float, path: str | os.PathLike) -> None:
    png = render(spec, vl_version, scale)
    with atomic_path(path, suffix=".png") as tmp:
        tmp.write_bytes(png)


class PngProcess:
    """Renders specs to PNG files in a helper process (``python -m benchmaker.chart_png``), in the
    order given. :meth:`submit` returns at once; :meth:`close` waits for every file and raises
    ``RuntimeError`` naming the charts that failed. Use as a context manager: on an error in the
    block the helper is stopped and no file it had not finished is left behind."""

    def __init__(self) -> None:
        self._paths: list[str] = []
        self._err = tempfile.TemporaryFile("w+")
        src = str(Path(__file__).resolve().parents[1])  # this benchmaker, as the stage imported it
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
        self._proc = subprocess.Popen([sys.executable, "-m", "benchmaker.chart_png"], env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True)

    def submit(self, spec: dict[str, Any], vl_version: str, scale: float, path: str | os.PathLike) -> None:
        """Render like :func:`write`, in the helper process."""
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps({"spec": spec, "vl_version": vl_version, "scale": scale,
                                               "path": str(path)}) + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            self._failed(f"it exited before rendering {Path(path).name}")
        self._paths.append(str(path))

    def close(self) -> None:
        """Wait for every submitted chart (again: nothing more to wait for)."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        if self._proc.returncode is not None:
            return
        try:
            self._proc.stdin.close()
        except BrokenPipeError:
            pass
        answers = [json.loads(line) for line in self._proc.stdout]
        code = self._proc.wait()
        bad = [f"{Path(p).name}: {a['error']}" for p, a in zip(self._paths, answers) if a.get("error")]
        if len(answers) < len(self._paths) or code != 0:
            bad.append(f"{len(self._paths) - len(answers)} chart(s) not rendered (exit status {code})")
        if bad:
            self._failed("; ".join(bad))

    def _failed(self, what: str) -> None:
        self._proc.kill()
        self._proc.wait()
        self._err.seek(0)
        tail = self._err.read()[-2000:].strip()
        raise RuntimeError(f"chart rendering (vl-convert, python -m benchmaker.chart_png) failed: {what}"
                           + (f"\n{tail}" if tail else ""))

    def __enter__(self) -> PngProcess:
        return self

    def __exit__(self, kind, value, tb) -> None:
        try:
            if kind is None:
                self.close()
            elif self._proc.returncode is None:
                self._proc.kill()
                self._proc.wait()
        finally:
            self._err.close()


def serve(requests: TextIO, answers: TextIO) -> None:
    """The helper's loop: one JSON request per line (spec, vl_version, scale, path), one JSON answer
    per line. It starts vl-convert's engine (with its default Vega-Lite) before reading the first."""
    import vl_convert as vlc

    vlc.vegalite_to_png(_WARM)
    for line in requests:
        job = json.loads(line)
        try:
            write(job["spec"], job["vl_version"], job["scale"], job["path"])
            answers.write("{}\n")
        except Exception as e:  # reported by PngProcess.close with the chart's name
            answers.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve(sys.stdin, sys.stdout)

"""Stage logging: every stage logs to its Snakemake ``log:`` file and to the terminal.

``stage_logging(path)`` routes the root logger to the log file (everything, DEBUG and up) and to the
original terminal stderr (INFO and up), and writes any uncaught traceback to both before re-raising.
``progress(...)`` wraps tqdm: done / total, rate and ETA are reported at a bounded frequency.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import traceback
from pathlib import Path
from typing import Iterable, Iterator, TypeVar

from tqdm import tqdm

__all__ = ["stage_logging", "progress", "get_logger"]

T = TypeVar("T")
_FMT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"benchmaker.{name}" if not name.startswith("benchmaker") else name)


@contextlib.contextmanager
def stage_logging(log_path: str | None, level: int = logging.INFO) -> Iterator[logging.Logger]:
    root = logging.getLogger()
    old_handlers, old_level = root.handlers[:], root.level
    handlers: list[logging.Handler] = []
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(log_path, mode="w", encoding="utf-8")
        fh.setLevel(logging.DEBUG)
        handlers.append(fh)
    term = logging.StreamHandler(sys.__stderr__)
    term.setLevel(level)
    handlers.append(term)
    for h in handlers:
        h.setFormatter(logging.Formatter(_FMT))
    root.handlers = handlers
    root.setLevel(logging.DEBUG if log_path else level)
    for noisy in ("httpx", "httpx2", "httpcore", "urllib3", "PIL", "matplotlib", "filelock", "openai", "google_genai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logger = get_logger("stage")
    t0 = time.perf_counter()
    try:
        yield logger
        logger.info("finished in %.1f s", time.perf_counter() - t0)
    except BaseException as exc:
        tb = "".join(traceback.format_exception(exc))
        logger.error("stage failed after %.1f s:\n%s", time.perf_counter() - t0, tb)
        raise
    finally:
        for h in handlers:
            h.flush()
            if h is not term:
                h.close()
        root.handlers, root.level = old_handlers, old_level


class _LogWriter:
    def __init__(self, logger: logging.Logger):
        self.logger = logger

    def write(self, s: str) -> None:
        s = s.strip("\r\n ")
        if s:
            self.logger.info(s)

    def flush(self) -> None:  # tqdm calls it
        pass


def progress(
    iterable: Iterable[T] | None = None,
    *,
    total: int | None = None,
    desc: str = "",
    unit: str = "it",
    logger: logging.Logger | None = None,
    mininterval: float = 5.0,
) -> tqdm:
    """A tqdm bar that reports through logging (log file + terminal), at most every ``mininterval`` s."""
    logger = logger or get_logger("progress")
    return tqdm(
        iterable,
        total=total,
        desc=desc,
        unit=unit,
        file=_LogWriter(logger),
        mininterval=mininterval,
        ascii=True,
        dynamic_ncols=False,
        ncols=100,
    )

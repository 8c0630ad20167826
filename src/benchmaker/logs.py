"""Stage logging: every stage logs to its Snakemake ``log:`` file in full and to the terminal briefly.

``stage_logging(path)`` routes the root logger to the log file (everything, DEBUG and up) and to the
original terminal stderr, which gets warnings, errors and progress only:

* **progress** (``progress(...)``, a tqdm bar): every update goes to the log file; the terminal gets
  one line per stage when it ends (done/total, rate, elapsed), plus one line every
  ``BENCHMAKER_PROGRESS_SECONDS`` (default 30) while a long stage runs (done/total, rate, ETA);
* **warnings** are shown once per message template on the terminal; repeats stay in the log and the
  stage ends with one summary line (``N repeated warnings not shown``);
* third-party chatter (open_clip's ``INFO [root]`` lines, httpx/httpcore/urllib3 debug) is dropped
  from both, unless it is a warning;
* ``BENCHMAKER_VERBOSE=1`` turns the quietening off: the terminal gets every record (DEBUG and up),
  every progress update and every repeated warning; the log file gets the third-party chatter too.

An uncaught exception writes its traceback to the log file only, and a short block to ``<log>.error``:
for a user-caused error (bad config, missing file, missing key, no weights: see ``is_user_error``) the
exception's message, which names the fix; for anything else the exception type and message plus the
log's path. The workflow's ``onerror`` handler prints those blocks as the run's final block, the one
place a failure's fix is printed: under a Snakemake run that prints it (:func:`final_block_only`, called
by the Snakefile, sets ``BENCHMAKER_FINAL_BLOCK=1`` for its local jobs) a failing stage prints nothing
more; elsewhere (a stage run on its own, a job in a pod whose log the controller reads) it prints the
block to stderr. :func:`final_block_only` also drops Snakemake's wrapper lines about such a failure
(``RuleException: CalledProcessError ... returned non-zero exit status 1`` and the closing
``WorkflowError: At least one job did not complete successfully``), and third-party ERROR records
(open_clip's ``ERROR [root] Failed to download weights ...``, which the block's message repeats) go
to the log file only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import textwrap
import time
import traceback
from pathlib import Path
from typing import Iterable, Iterator, TypeVar

from tqdm import tqdm

__all__ = ["stage_logging", "progress", "get_logger", "is_user_error", "error_block", "verbose", "failure_summary",
           "final_block_only", "ERROR_SUFFIX", "FINAL_BLOCK_ENV"]

T = TypeVar("T")
_FMT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"
_TERM_FMT = "%(levelname)s [%(name)s] %(message)s"
_LOG_LINE = "  full log and traceback: "
ERROR_SUFFIX = ".error"   # <log>.error: the short failure block of a stage, read by the Snakefile's onerror
FINAL_BLOCK_ENV = "BENCHMAKER_FINAL_BLOCK"  # "1": the Snakemake run prints every <log>.error at its end

# exceptions whose message is written for the user (names the key, file or command that fixes it);
# matched by class name along the MRO so that this module imports none of the libraries defining them
USER_ERROR_NAMES = frozenset({
    "ConfigError", "ModelLoadError", "MissingKey", "UploadError", "UserError", "ProfileInstallError",
    "FormatError", "RightsMapError", "BatchPending", "FileNotFoundError", "PermissionError", "NotADirectoryError",
    "IsADirectoryError",
    "AuthenticationError", "PermissionDeniedError", "KeyRejected",
    "PermanentAPIError", "TransientExhausted",   # benchmaker.providers.retry: messages say what to do
    "LabelImportError",                          # benchmaker.audit.labels: the label file and row, and the fix
    "StagingError", "SlurmError", "KubeError",   # their messages say how to fix (tests/test_logs.py checks)
})
# third-party loggers whose records below WARNING never reach a handler
NOISY = ("httpx", "httpx2", "httpcore", "urllib3", "PIL", "matplotlib", "filelock", "openai", "google_genai",
         "huggingface_hub", "fsspec", "asyncio", "h5py", "numexpr", "timm", "numba")


# third-party loggers whose warnings (retries, mostly) go to the log file only
NETWORK_CHATTER = ("huggingface_hub", "urllib3", "httpx", "httpcore", "requests", "filelock", "openai",
                   "google_genai")


def verbose() -> bool:
    return os.environ.get("BENCHMAKER_VERBOSE", "").strip().lower() not in ("", "0", "false", "no")


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"benchmaker.{name}" if not name.startswith("benchmaker") else name)


def is_user_error(exc: BaseException) -> bool:
    return any(c.__name__ in USER_ERROR_NAMES for c in type(exc).__mro__)


def error_block(exc: BaseException, *, rule: str | None = None, log_path: str | None = None) -> str:
    """The short block a user reads when a stage fails: problem and fix, never a traceback."""
    head = f"benchmaker: {'rule ' + rule if rule else 'stage'} failed"
    msg = str(exc).strip() or type(exc).__name__
    if is_user_error(exc):
        body = msg
        names = {c.__name__ for c in type(exc).__mro__}
        if names & {"AuthenticationError", "PermissionDeniedError"}:   # raised by the SDK itself (batch calls)
            body += ("\nThe API rejected the API key: check the environment variable named by "
                     "<stage>.<adapter>.api_key_env (default OPENAI_API_KEY; GEMINI_API_KEY for gemini) and "
                     "base_url.")
    else:
        body = f"{type(exc).__name__}: {msg}\n(an unexpected error: please report it with the log below)"
    lines = [head + ":"]
    for para in body.splitlines():
        lines.append(textwrap.indent(para, "  ") if para.strip() else "")
    if log_path:
        lines.append(f"{_LOG_LINE}{log_path}")
    return "\n".join(lines)


class _Quiet(logging.Filter):
    """Drops third-party chatter below WARNING (open_clip logs INFO on the root logger)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        if record.name == "root" and "open_clip" in (record.pathname or ""):
            return False
        return not record.name.startswith(NOISY)


class _TermFilter(logging.Filter):
    """The terminal's view: no file-only records, each warning template once, progress as throttled."""

    def __init__(self, show_all: bool, level: int):
        super().__init__()
        self.show_all = show_all
        self.level = level
        self.seen: set[tuple[str, str]] = set()
        self.repeated = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "file_only", False):
            return False
        if self.show_all:
            return True
        kind = getattr(record, "progress", None)
        if kind == "update":
            return False
        if kind is None and not getattr(record, "term", False) and record.levelno < self.level:
            return False
        if record.levelno < logging.ERROR and record.name.startswith(NETWORK_CHATTER):
            self.repeated += 1     # retry warnings of HTTP/Hub clients: the log has them, the error says why
            return False
        if record.levelno >= logging.ERROR and not record.name.startswith("benchmaker"):
            self.repeated += 1     # a library's own error line (open_clip's on root): the exception tells it
            return False
        if record.levelno == logging.WARNING:
            key = (record.name, str(record.msg) if record.msg != "%s" else record.getMessage()[:300])
            if key in self.seen:
                self.repeated += 1
                return False
            self.seen.add(key)
        return True


def _mute_own_handlers(name: str) -> list[logging.Handler]:
    """Remove the stderr handler a library installs on its own logger (huggingface_hub does, on import,
    and prints every download retry through it); its records still propagate to our handlers."""
    if name == "huggingface_hub":
        try:
            import huggingface_hub.utils.logging  # noqa: F401  (installs the handler now, not mid-stage)
        except ImportError:
            return []
    lg = logging.getLogger(name)
    removed = [h for h in lg.handlers if type(h) is logging.StreamHandler]
    for h in removed:
        lg.removeHandler(h)
    return removed


@contextlib.contextmanager
def stage_logging(log_path: str | None, level: int = logging.WARNING, *,
                  rule: str | None = None) -> Iterator[logging.Logger]:
    root = logging.getLogger()
    old_handlers, old_level = root.handlers[:], root.level
    show_all = verbose()
    handlers: list[logging.Handler] = []
    quiet = _Quiet()
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        Path(str(log_path) + ERROR_SUFFIX).unlink(missing_ok=True)
        fh = logging.FileHandler(log_path, mode="w", encoding="utf-8")
        fh.setLevel(logging.DEBUG)
        fh.setFormatter(logging.Formatter(_FMT))
        if not show_all:
            fh.addFilter(quiet)
        handlers.append(fh)
    term = logging.StreamHandler(sys.__stderr__)
    term.setLevel(logging.DEBUG)
    term.setFormatter(logging.Formatter(_TERM_FMT))
    term_filter = _TermFilter(show_all, level)
    if not show_all:
        term.addFilter(quiet)
    term.addFilter(term_filter)
    handlers.append(term)
    root.handlers = handlers
    if not show_all:
        for name in NOISY:
            logging.getLogger(name).setLevel(logging.WARNING)
    root.setLevel(logging.DEBUG if (log_path or show_all) else min(level, logging.INFO))
    hub_handlers = [] if show_all else _mute_own_handlers("huggingface_hub")
    old_capture = logging.getLogger("py.warnings").handlers == [] and not show_all
    logging.captureWarnings(True)   # warnings.warn(...) -> the log file, and once to the terminal
    logger = get_logger("stage")
    t0 = time.perf_counter()
    try:
        yield logger
        if term_filter.repeated:
            logger.info("%d repeated or third-party warning(s) not shown here%s", term_filter.repeated,
                        f"; every one is in {log_path}" if log_path else "", extra={"term": True})
        logger.info("finished in %.1f s", time.perf_counter() - t0)
    except BaseException as exc:
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        tb = "".join(traceback.format_exception(exc))
        logger.error("stage failed after %.1f s:\n%s", time.perf_counter() - t0, tb, extra={"file_only": True})
        if isinstance(exc, KeyboardInterrupt):   # Ctrl-C: Snakemake says so; no failure block
            raise
        block = error_block(exc, rule=rule, log_path=log_path)
        told = False
        if log_path:
            try:
                Path(str(log_path) + ERROR_SUFFIX).write_text(block + "\n", encoding="utf-8")
                told = os.environ.get(FINAL_BLOCK_ENV) == "1" and not show_all  # the run's final block has it
            except OSError:
                pass
        if not told:
            print(block, file=sys.__stderr__, flush=True)
        raise
    finally:
        for h in handlers:
            h.flush()
            if h is not term:
                h.close()
        root.handlers, root.level = old_handlers, old_level
        if old_capture:
            logging.captureWarnings(False)
        logging.getLogger("huggingface_hub").handlers.extend(h for h in hub_handlers
                                                              if h not in logging.getLogger("huggingface_hub").handlers)


class _LogWriter:
    """tqdm's output: every refresh to the log file only (the terminal sees _Progress's own lines)."""

    def __init__(self, logger: logging.Logger):
        self.logger = logger

    def write(self, s: str) -> None:
        s = s.strip("\r\n ")
        if s:
            self.logger.info(s, extra={"progress": "update"})

    def flush(self) -> None:  # tqdm calls it
        pass


class _Progress(tqdm):
    """A tqdm bar whose terminal output is one line when it ends, and one per interval while long."""

    def __init__(self, *args, logger: logging.Logger, term_every: float, **kwargs):
        self._bm_logger = logger
        self._bm_every = term_every
        self._bm_last = time.monotonic()
        self._bm_done = False
        super().__init__(*args, **kwargs)

    def _bm_emit(self, final: bool) -> None:
        d = self.format_dict
        n, total, elapsed = d["n"], d["total"], d["elapsed"]
        rate = (n / elapsed) if elapsed > 0 else 0.0
        what = f"{self.desc + ': ' if self.desc else ''}{n:,}" + (f"/{total:,}" if total else "") + f" {self.unit}"
        if final and not n:
            text = f"{self.desc + ': ' if self.desc else ''}nothing to do (0 {self.unit})"
        elif final:
            text = f"{what} done in {elapsed:.1f} s ({rate:.1f} {self.unit}/s)"
        else:
            eta = (total - n) / rate if total and rate > 0 else None
            text = f"{what} ({rate:.1f} {self.unit}/s" + (f", ETA {eta:.0f} s)" if eta is not None else ")")
        self._bm_logger.info(text, extra={"progress": "final" if final else "interval"})

    def update(self, n: float | None = 1):
        out = super().update(n)
        if self.disable:  # TQDM_DISABLE=1 (or disable=True): tqdm set up no state to report from
            return out
        now = time.monotonic()
        if now - self._bm_last >= self._bm_every:
            self._bm_last = now
            self._bm_emit(final=False)
        return out

    def close(self) -> None:
        if not self._bm_done and not self.disable:
            self._bm_done = True
            self._bm_emit(final=True)
        super().close()


def progress(
    iterable: Iterable[T] | None = None,
    *,
    total: int | None = None,
    desc: str = "",
    unit: str = "it",
    logger: logging.Logger | None = None,
    mininterval: float = 5.0,
) -> tqdm:
    """A tqdm bar reporting through logging: every ``mininterval`` s to the log file, once at the end
    (and every ``BENCHMAKER_PROGRESS_SECONDS``, default 30, while running) to the terminal."""
    logger = logger or get_logger("progress")
    try:
        every = float(os.environ.get("BENCHMAKER_PROGRESS_SECONDS", "30"))
    except ValueError:
        every = 30.0
    return _Progress(
        iterable,
        total=total,
        desc=desc,
        unit=unit,
        file=_LogWriter(logger),
        mininterval=mininterval,
        ascii=True,
        dynamic_ncols=False,
        ncols=100,
        logger=logger,
        term_every=every,
    )


def failure_summary(logs_dir: str | Path, since: float) -> str | None:
    """The run's final block: every stage failure block (``<log>.error``) written since ``since``."""
    root = Path(logs_dir)
    if not root.is_dir():
        return None
    groups: dict[str, list[str]] = {}   # the same problem in several jobs (shards) is told once
    for f in sorted(root.rglob(f"*{ERROR_SUFFIX}")):
        try:
            if f.stat().st_mtime < since - 1:
                continue
            lines = f.read_text(encoding="utf-8").strip().splitlines()
        except OSError:
            continue
        if not lines:
            continue
        logs = [ln for ln in lines if ln.startswith(_LOG_LINE)]
        body = "\n".join(ln for ln in lines if not ln.startswith(_LOG_LINE))
        groups.setdefault(body, []).extend(ln[len(_LOG_LINE):] for ln in logs)
    if not groups:
        return None
    out = ["=" * 78]
    for body, logs in groups.items():
        out.append(body)
        if len(logs) == 1:
            out.append(f"{_LOG_LINE}{logs[0]}")
        elif logs:
            out.append(f"  (in {len(logs)} jobs) full logs and tracebacks: {logs[0]} and {len(logs) - 1} more")
    out.append("=" * 78)
    return "\n".join(out)


def final_block_only(jobs_write_here: bool = True) -> None:
    """In the Snakemake process: the run's final block (``onerror``) is where a failure's fix is printed,
    once. Snakemake's wrapper lines about a failed stage are dropped and, when the jobs' ``<log>.error``
    files land where ``onerror`` reads them (``jobs_write_here``: not in pods with their own storage, whose
    stderr the controller reads instead), jobs inherit ``BENCHMAKER_FINAL_BLOCK=1`` and print no block of
    their own. ``BENCHMAKER_VERBOSE=1``: nothing changes."""
    if verbose():
        return
    if jobs_write_here:
        os.environ[FINAL_BLOCK_ENV] = "1"
    from .snakemake_compat import drop_failed_stage_wrappers

    drop_failed_stage_wrappers()

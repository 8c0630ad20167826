"""Bridge from a Snakemake ``script:`` to a library ``run(...)`` function, without importing Snakemake.

``run_stage(snakemake, "benchmaker.plan:run")`` passes every *named* input, output and param of the
rule as a keyword argument (file lists become lists of str), plus ``threads``; the stage's logging and
any traceback go to the rule's ``log:`` file. When the stage fails under Snakemake, the terminal gets
the short block of ``logs.error_block`` and the script exits with status 1 without printing the
traceback a second time (it is in the log).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from typing import Any, Callable

from .logs import stage_logging

__all__ = ["run_stage", "named_items"]


def _plain(value: Any) -> Any:
    if isinstance(value, (str, bytes, int, float, bool, dict)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def named_items(namedlist: Any) -> dict[str, Any]:
    """The named entries of a Snakemake Namedlist (duck-typed: anything with ``_names``)."""
    names = getattr(namedlist, "_names", None) or {}
    return {name: _plain(getattr(namedlist, name)) for name in names}


def _resolve(target: str | Callable[..., Any]) -> Callable[..., Any]:
    if callable(target):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr or "run")


@contextlib.contextmanager
def _exit_quietly(smk: Any):
    """Under Snakemake, a failed stage exits 1 instead of letting Python print the traceback again."""
    try:
        yield
    except Exception:
        if type(smk).__module__.startswith("snakemake"):
            sys.exit(1)
        raise


def run_stage(smk: Any, target: str | Callable[..., Any], **extra: Any) -> Any:
    log = smk.log[0] if len(smk.log) else None
    with _exit_quietly(smk), stage_logging(log, rule=getattr(smk, "rule", None)) as logger:
        kwargs: dict[str, Any] = {}
        for part in (smk.input, smk.output, smk.params):
            for k, v in named_items(part).items():
                if k in kwargs:
                    raise TypeError(f"rule {smk.rule}: name '{k}' used twice among input/output/params")
                kwargs[k] = v
        kwargs["threads"] = int(getattr(smk, "threads", 1) or 1)
        kwargs.update(extra)
        logger.info("rule %s%s", smk.rule, f" ({dict(smk.wildcards)})" if len(smk.wildcards) else "")
        result = _resolve(target)(**kwargs)
        _log_peak_memory(logger)
        return result


def _log_peak_memory(logger) -> None:
    """One line with the job's peak resident memory (this process; the largest finished child, e.g.
    a DataLoader worker): exact even for sub-second jobs, unlike sampled benchmark files."""
    import resource
    import sys

    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 1e6
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale / 1e6
    logger.info("peak memory: %.0f MB (this process), %.0f MB (largest child process)", own, child)

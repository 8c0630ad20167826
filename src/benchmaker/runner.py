"""Bridge from a Snakemake ``script:`` to a library ``run(...)`` function, without importing Snakemake.

``run_stage(snakemake, "benchmaker.plan:run")`` passes every *named* input, output and param of the
rule as a keyword argument (file lists become lists of str), plus ``threads``; the stage's logging and
any traceback go to the rule's ``log:`` file. When the stage fails under Snakemake, the terminal gets
the short block of ``logs.error_block`` and the script exits with status 1 without printing the
traceback a second time (it is in the log).

Names are checked against the target's signature before it runs: a rule input, output or param that
the stage function does not accept is an error naming the rule, the name and what the function
accepts (stage functions take no ``**kwargs``, so a typo such as ``cache_dirr=`` cannot silently turn
a feature off). Only the documented trigger-only names (``TRIGGER_ONLY``) are dropped when the
function does not take them: they exist to make Snakemake rerun the rule, not to reach the code.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
from typing import Any, Callable, Iterable

from .logs import get_logger, stage_logging

__all__ = ["run_stage", "named_items", "check_kwargs", "ParamError", "TRIGGER_ONLY", "STARTUP_LINE", "CPU_LINE",
           "process_age", "own_peak_kib"]

# names a rule may pass only so that Snakemake reruns it when they change; dropped unless the stage
# function accepts them. version (param): stage_version(stage), the digest of the stage's code
# (versions.py); weights (input): local CLIP checkpoint files (rules/common.smk clip_weight_inputs),
# inputs so that replacing a checkpoint in place reruns the rule, read by the model loader itself
# triggers (param): the output-deciding part of an API rule's settings (benchmaker.triggers.output_settings)
# evaluation_files, deepen_files (inputs): the result files beside evaluate/leaderboard.csv and
# deepen/report.json (rules/common.smk evaluate_report_inputs, deepen_report_inputs), read from that
# file's folder: declared so that a pod (and a strict-mode job, benchmaker.strict) is given them
TRIGGER_ONLY: frozenset[str] = frozenset({"version", "weights", "triggers", "evaluation_files", "deepen_files"})
# params that a stage writes into its outputs as the user wrote them (the dataset card's config, the
# audit's settings): never mapped to a pod's local copies of staged files (jobpaths.job_paths)
RECORDED_PARAMS: frozenset[str] = frozenset({"public_config", "settings"})
# offered by the runner itself, passed only to functions that take it
_OFFERED: frozenset[str] = frozenset({"threads"})


# loaded by the runner or the rule scripts themselves, never deciding a stage's output: versions and
# stages (the check itself and the stage registry) and staging (scripts map staged weight paths under
# --profile nrp, rules/cluster.smk); strict (links the inputs into a sandbox, never changes bytes)
_NOT_STAGE_CODE: frozenset[str] = frozenset({"benchmaker.versions", "benchmaker.stages", "benchmaker.staging",
                                             "benchmaker.config_paths", "benchmaker.strict"})


class ParamError(TypeError):
    """A rule passes a name that its stage function does not accept (or misses a required one)."""


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


def _name(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def check_kwargs(rule: str, func: Callable[..., Any], kwargs: dict[str, Any],
                 kinds: dict[str, str] | None = None) -> dict[str, Any]:
    """The keyword arguments of ``func`` for rule ``rule``: trigger-only names it does not accept are
    dropped; any other name it does not accept, or a required one that is missing, raises
    ``ParamError`` naming the rule and the name (``kinds`` says whether a name is an input, output or
    param, for the message)."""
    kinds = kinds or {}
    params = inspect.signature(func).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    accepted = {n for n, p in params.items()
                if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)}
    out: dict[str, Any] = {}
    unknown = []
    for k, v in kwargs.items():
        if k in accepted or takes_any:
            out[k] = v
        elif k not in TRIGGER_ONLY and k not in _OFFERED:
            unknown.append(k)
    if unknown:
        what = ", ".join(f"{kinds.get(k, 'param')} '{k}'" for k in unknown)
        raise ParamError(
            f"rule {rule}: {_name(func)} does not accept {what}. It accepts: {', '.join(sorted(accepted))}. "
            "Fix the name in the rule (rules/*.smk) or add the argument to the stage function.")
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty
               and p.kind is inspect.Parameter.KEYWORD_ONLY and n not in out]
    if missing:
        raise ParamError(f"rule {rule}: {_name(func)} needs {', '.join(repr(m) for m in missing)}, "
                         "which the rule does not pass (as a named input, output or param)")
    return out


def _unversioned_modules(target: Any, loaded: Iterable[str]) -> list[str]:
    """Modules of benchmaker that ran in this stage but are not part of its stage version."""
    from .versions import STAGE_ENTRIES, stage_modules

    module = target.partition(":")[0] if isinstance(target, str) else getattr(target, "__module__", "")
    stages = [s for s, entries in STAGE_ENTRIES.items() if module in entries]
    if not stages:
        return []
    known = {m[:-len("/__init__.py")].replace("/", ".") if m.endswith("/__init__.py") else
             m[:-3].replace("/", ".") for m in stage_modules(stages[0])}
    known = {f"benchmaker.{m}" if m != "__init__" else "benchmaker" for m in known}
    return sorted(m for m in loaded if (m == "benchmaker" or m.startswith("benchmaker."))
                  and m not in known and m not in _NOT_STAGE_CODE)


def run_stage(smk: Any, target: str | Callable[..., Any], **extra: Any) -> Any:
    log = smk.log[0] if len(smk.log) else None
    with _exit_quietly(smk), stage_logging(log, rule=getattr(smk, "rule", None)) as logger:
        kwargs: dict[str, Any] = {}
        kinds: dict[str, str] = {}
        for kind, part in (("input", smk.input), ("output", smk.output), ("param", smk.params)):
            for k, v in named_items(part).items():
                if k in kwargs or k in _OFFERED:
                    raise ParamError(f"rule {smk.rule}: name '{k}' used twice among input/output/params "
                                     f"(or reserved: {', '.join(sorted(_OFFERED))})")
                kwargs[k] = v
                kinds[k] = kind
        # under --profile nrp a param naming a file the controller staged reaches this job's copy of it
        from .jobpaths import job_paths, link_staged

        inputs = [*named_items(smk.input).values(), *(smk.input if isinstance(smk.input, list) else [])]
        for k, kind in kinds.items():
            # the copy appears at the path as written (params unchanged: outputs record what the
            # user wrote); where that cannot be made, the param points at the copy instead
            if kind == "param" and k not in RECORDED_PARAMS and not link_staged(kwargs[k], inputs):
                kwargs[k] = job_paths(kwargs[k], inputs)
        kwargs["threads"] = int(getattr(smk, "threads", 1) or 1)
        kwargs.update(extra)
        logger.info("rule %s%s", smk.rule, f" ({dict(smk.wildcards)})" if len(smk.wildcards) else "")
        func = _resolve(target)
        from .io import remove_stale_temporaries

        outs = list(smk.output) if isinstance(smk.output, list) else list(named_items(smk.output).values())
        for out in {str(o) for v in outs for o in (v if isinstance(v, (list, tuple)) else [v])}:
            for name in remove_stale_temporaries(out):
                logger.info("removed %s, left by an interrupted earlier attempt of this job", name)
        started = process_age()
        if started is not None:  # benchmarks/example_wall.py splits a job's time with this line
            logger.info("%s %.2f s (process start to the stage's first line)", STARTUP_LINE, started)
        # strict mode (BENCHMAKER_STRICT=1): a Snakemake job reads its inputs from a folder holding
        # only them (benchmaker.strict)
        from .strict import sandbox_inputs

        with sandbox_inputs(kwargs, kinds, rule=smk.rule,
                            on=type(smk).__module__.startswith("snakemake")) as job_kwargs:
            result = func(**check_kwargs(smk.rule, func, job_kwargs, kinds))
        missed = _unversioned_modules(target, sys.modules)
        if missed:  # versions.py's import closure missed a module the stage really ran
            get_logger("runner").warning("stage version of rule %s misses modules it ran: %s (see "
                                         "benchmaker/versions.py)", smk.rule, ", ".join(missed))
        _log_peak_memory(logger)
        if type(smk).__module__.startswith("snakemake"):
            # the job's process ends next: Python's final garbage collections would walk every object
            # torch, open_clip, ranx ... created (~1 CPU-s at exit of a model job, ~0.2 s frozen).
            # Frozen objects are only left out of cycle collection; outputs are closed by now, and
            # logging's handlers are still flushed at exit
            import gc

            gc.freeze()
        return result


STARTUP_LINE = "start-up"
CPU_LINE = "cpu time"


def process_age() -> float | None:
    """Seconds since this process started (Linux: /proc; elsewhere None): a job's fixed cost up to
    now, its interpreter, Snakemake's script preamble and the stage's imports."""
    import os

    try:
        with open("/proc/self/stat") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


def own_peak_kib() -> int | None:
    """This process's own peak resident set (Linux ``VmHWM``, KiB), or None elsewhere. Not
    ``ru_maxrss``: Linux carries that over ``execve`` from the process that forked, so a job started
    by a large process (Snakemake, a benchmark holding its data) would report that process's peak."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _log_peak_memory(logger) -> None:
    """One line with the job's peak resident memory (this process; the largest finished child, e.g.
    a DataLoader worker): exact even for sub-second jobs, unlike sampled benchmark files."""
    import resource
    import sys

    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    own = own_peak_kib()
    own = (own * 1024 if own is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale) / 1e6
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale / 1e6
    logger.info("peak memory: %.0f MB (this process), %.0f MB (largest child process)", own, child)
    ru = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    logger.info("%s %.2f s (this process and its finished children, user + system)", CPU_LINE,
                sum(r.ru_utime + r.ru_stime for r in ru))

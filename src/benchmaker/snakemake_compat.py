"""Every use of Snakemake's internals, in one place, each checked against the running Snakemake.

The workflow (Snakefile, rules/) relies on three things Snakemake does not document as API:

* :func:`not_a_trigger` -- a param the job gets but Snakemake never compares with the params stored
  with the outputs: Snakemake leaves params computed by a function of ``threads`` (or input, output,
  resources) out of its rerun check ("derived" params, ``Rule._is_deriving_function``). Runtime knobs
  (``x-runtime: true`` in config/schema.yaml, benchmaker.triggers) reach jobs this way.
* :func:`patch_s3_fresh_dir` -- snakemake-storage-plugin-s3 0.3.6 caches "is not a folder" per object
  (``StorageObject._is_dir``): the controller asks about a directory() output before the job runs,
  and after the pod uploaded it still answers "missing in storage". The patch forgets that answer
  before every existence check.
* :func:`keep_job_incomplete_marks` -- a cluster job's own Snakemake leaves its outputs'
  "incomplete" marks to the controller (``PersistenceBase.finished``), so that what a job finishes
  after its controller died is remade, not trusted without metadata (docs/clusters.md).
* :func:`mark_before_submission` -- a cluster executor marks a job's outputs incomplete only once the
  submission returned (``RealExecutor.report_job_submission`` -> ``job.register``); the patch marks
  them before (``RemoteExecutor.run_job_pre``), so that a job submitted by a controller that died
  before it recorded the submission is not trusted either.
* :func:`record_pod_status` -- snakemake-executor-plugin-kubernetes 0.5.1 reports a failed Job with
  the pod's log only and deletes the Job right after (``Executor.check_active_jobs`` ->
  ``report_job_error``); what ended the pod (``OOMKilled``, ``Evicted``, a deadline, the exit code)
  is then lost. The patch reads the Job's and its pod's status from the API when the error is
  reported (the Job still exists then) and writes it beside the pod's log as ``<job>.status.json``
  (benchmaker.podlogs reads it for the run's final block).
* :func:`explain_config_yaml_errors` -- Snakemake reads config files (``--configfile``, a profile's
  ``configfile:``, the Snakefile's ``configfile:``) in ``snakemake.common.configfile._load_configfile``
  and answers a YAML syntax error with "Config file is not valid JSON or YAML", naming neither the
  file nor the line (the YAML error, which has both, is only its ``__context__``). ``--configfile`` is
  read while Snakemake parses its arguments, before the Snakefile runs, so the workflow profile
  (``profiles/default``, loaded first on every run from the checkout) installs this wrapper: the
  message becomes ``<file>:<line>:<column>: not valid YAML: ...``, worded as ``benchmaker
  validate-config`` words it.
* :func:`release_scheduler_timers` -- after each round of scheduling, Snakemake's job scheduler arms a
  ``threading.Timer`` of ``--max-jobs-per-timespan``'s timespan (1 s by default) to look again
  (``JobScheduler._schedule_reevalutation``); the thread is not a daemon, so when the last job is done
  Python waits for it before the process exits: up to a second at the end of every run, after the
  results are complete. The Snakefile's ``onsuccess``/``onerror`` cancel those timers (the scheduler
  has returned by then).
* :func:`ignore_unawaited_input_sizes` -- while the DAG is built, Snakemake evaluates a resource callable
  that takes ``input`` (rules/resources.smk sizes jobs by their inputs) inside its own event loop; the
  input's sizes are a coroutine (``InputFiles._predicated_size_files``) that ``async_run`` refuses to run
  there (``NestedCoroutineError``, ``Rule.expand_resources`` then leaves the resource to be evaluated
  later), and the coroutine is dropped unawaited: Python prints "RuntimeWarning: coroutine
  'InputFiles._predicated_size_files.<locals>.sizes' was never awaited" on ``snakemake -n`` and real runs
  under ``--profile slurm``. Harmless, and an upstream bug (snakemake/snakemake#4280, open, seen with
  9.19-9.27): the Snakefile filters exactly that warning (its message and category), nothing else.

The workflow (Snakefile, rules/) also reads and changes Snakemake's ``workflow`` object, whose
attributes are not documented API either. Each use is a named function here, the only code that
touches those attributes (``workflow.basedir``, documented, is read directly):

* :func:`default_storage_provider`, :func:`default_storage_prefix`, :func:`storage_plugin_settings`
  -- ``--default-storage-provider``/``-prefix`` and a storage plugin's ``--storage-<name>-*``
  settings (``workflow.storage_settings``, ``workflow.storage_provider_settings``).
* :func:`is_main_process`, :func:`is_spawned_job` -- whether this process is the controller or a job
  that Snakemake spawned on a cluster (``workflow.exec_mode``).
* :func:`executor_name`, :func:`is_dry_run`, :func:`executor_setting` -- the executor plugin and its
  settings, known once the DAG is built (``workflow.executor_plugin``, ``workflow.executor_settings``).
* :func:`configfiles_given`, :func:`configfiles_read`, :func:`set_job_configfiles` -- the config files
  of the command line (``--configfile``, which replace the Snakefile's ``configfile:``), every config
  file read, and the ones each spawned job gets (``workflow.config_settings.configfiles``, which
  Snakemake passes to jobs as ``--configfiles``; ``workflow.configfiles``, which its source archive
  ships to jobs without a shared file system).

:data:`SUPPORTED` is the Snakemake range these were checked with (pyproject.toml pins the same range and the
Snakefile's ``min_version`` names its lower bound; tests/test_snakemake_compat.py checks all three, and
each use against the installed Snakemake). The
Snakefile calls :func:`check_snakemake` first: another Snakemake version stops with one clear error
instead of a silent change in what reruns. This is the only module of the library that imports
Snakemake, and only inside these functions (no stage imports it).
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["SUPPORTED", "SUPPORTED_S3_PLUGIN", "check_snakemake", "explain_config_yaml_errors",
           "keep_job_incomplete_marks", "mark_before_submission", "not_a_trigger", "patch_s3_fresh_dir",
           "drop_failed_stage_wrappers", "ignore_unawaited_input_sizes", "record_pod_status",
           "release_scheduler_timers", "default_storage_provider", "default_storage_prefix",
           "storage_plugin_settings", "is_main_process", "is_spawned_job", "executor_name", "is_dry_run",
           "executor_setting", "configfiles_given", "configfiles_read", "set_job_configfiles"]

SUPPORTED = ">=9.27,<10"
SUPPORTED_S3_PLUGIN = ">=0.3.6,<0.4"


class CompatError(RuntimeError):
    """The installed Snakemake (or plugin) is outside the range benchmaker was checked with."""


def _check(name: str, version: str, spec: str) -> None:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    if Version(version) not in SpecifierSet(spec):
        raise CompatError(
            f"{name} {version} is installed; benchmaker supports {name}{spec} (pyproject.toml). "
            f"Install a supported version, e.g. pip install '{name}{spec}'")


def check_snakemake(version: str | None = None) -> None:
    """Raise CompatError unless Snakemake (``version``, default the installed one) is supported, and
    check that the private hook :func:`not_a_trigger` relies on still behaves as it did."""
    if version is None:
        import snakemake

        version = snakemake.__version__
    _check("snakemake", version, SUPPORTED)
    from snakemake.rules import Rule

    if not Rule._is_deriving_function(not_a_trigger(None)):
        raise CompatError("snakemake.rules.Rule._is_deriving_function no longer treats a function of "
                          "threads as a derived param: runtime knobs would become rerun triggers")


def not_a_trigger(value: Any) -> Callable[[Any, Any], Any]:
    """A param the job gets but Snakemake never compares (runtime knobs that do not change bytes):
    a function of ``threads``, which Snakemake counts as derived and leaves out of the params it
    stores with the outputs. So changing ``value`` reruns nothing."""
    return lambda wildcards, threads: value


def patch_s3_fresh_dir() -> bool:
    """Make snakemake-storage-plugin-s3 forget a cached "not a folder" answer before each existence
    check (see the module doc). Idempotent; returns True when the patch is in place."""
    from importlib.metadata import version

    import snakemake_storage_plugin_s3 as plugin

    _check("snakemake-storage-plugin-s3", version("snakemake-storage-plugin-s3"), SUPPORTED_S3_PLUGIN)
    cls = plugin.StorageObject
    if getattr(cls.exists, "_benchmaker_fresh_dir", False):
        return True
    original = cls.exists

    def exists(self):
        if getattr(self, "_is_dir", None) is False:
            self._is_dir = None
        return original(self)

    exists._benchmaker_fresh_dir = True
    cls.exists = exists
    return True


def keep_job_incomplete_marks() -> bool:
    """Only a controller removes an output's "incomplete" mark: the one that records the job's
    metadata (params, code, inputs) when it sees the job succeed.

    Snakemake's controller marks a job's outputs incomplete when it submits the job. On a shared file
    system (SLURM) the job's own Snakemake (``--mode remote``/``subprocess``) shares ``.snakemake/``
    and removes that mark when it ends, without recording metadata (only a controller does). So a
    job that finishes after its controller died (``kill -9``) leaves outputs that look finished and
    carry no metadata: a resumed run trusts them and a later params change does not rerun them.
    Patched, the job leaves the mark, ``rerun-incomplete`` remakes such outputs under a controller
    that records them, as on Kubernetes (a pod never sees the controller's ``.snakemake/``).
    Idempotent; returns True when the patch is in place."""
    from snakemake.persistence import PersistenceBase
    from snakemake_interface_executor_plugins.settings import ExecMode

    original = PersistenceBase.finished
    if getattr(original, "_benchmaker_keep_marks", False):
        return True
    import inspect

    if not inspect.iscoroutinefunction(original) or list(inspect.signature(original).parameters) != ["self", "job"]:
        raise CompatError("snakemake.persistence.PersistenceBase.finished changed its shape: check that a "
                          "cluster job still leaves its outputs' incomplete marks to the controller")

    async def finished(self, job):
        workflow = self.dag.workflow
        if workflow.exec_mode != ExecMode.DEFAULT and not workflow.remote_execution_settings.immediate_submit:
            self._clear_cache()  # a job's own Snakemake: the controller records and unmarks
            return
        await original(self, job)

    finished._benchmaker_keep_marks = True
    PersistenceBase.finished = finished
    return True


def mark_before_submission() -> bool:
    """A cluster job's outputs are marked incomplete before it is submitted, not after.

    Snakemake marks them when the executor reports the submission (``report_job_submission`` calls
    ``job.register(external_jobid)``), after the cluster accepted the job. A controller that dies in
    between (a Kubernetes Job created, the answer still on its way) leaves a job that may finish
    while no controller watches, with outputs neither marked nor recorded: trusted by the next run.
    Patched, ``RemoteExecutor.run_job_pre`` (the cluster executors call it right before ``run_job``
    submits) marks them first; the executor's own mark follows, with the job id. Local runs are not
    touched. Idempotent; returns True when in place."""
    from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor

    original = RemoteExecutor.run_job_pre
    if getattr(original, "_benchmaker_mark_first", False):
        return True
    import inspect

    if list(inspect.signature(original).parameters) != ["self", "job"]:
        raise CompatError("snakemake_interface_executor_plugins' RemoteExecutor.run_job_pre changed its shape: check "
                          "that a cluster job's outputs are still marked incomplete before it is submitted")

    def run_job_pre(self, job):
        original(self, job)
        if not job.is_local:  # a job submitted to the cluster (local jobs are marked when they run)
            job.register()

    run_job_pre._benchmaker_mark_first = True
    RemoteExecutor.run_job_pre = run_job_pre
    return True


def record_pod_status() -> bool:
    """When the kubernetes executor reports a failed Job, write what the API says ended its pod
    (benchmaker.podlogs.pod_status) to ``<aux>/kubernetes-logs/<job>.status.json``, with the rule the
    Job ran. Never fails the report: an API error leaves the file out. Idempotent; True when in place."""
    import inspect

    from snakemake_executor_plugin_kubernetes import Executor

    original = Executor.report_job_error
    if getattr(original, "_benchmaker_pod_status", False):
        return True
    if list(inspect.signature(original).parameters)[:3] != ["self", "job_info", "msg"]:
        raise CompatError("the kubernetes executor's report_job_error changed its shape: check that a failed "
                          "pod's status still reaches the final block (benchmaker.podlogs)")

    def report_job_error(self, job_info, msg=None, **kwargs):
        try:
            _write_pod_status(self, job_info)
        except Exception:  # noqa: BLE001 - the report itself must go on
            pass
        return original(self, job_info, msg, **kwargs)

    report_job_error._benchmaker_pod_status = True
    Executor.report_job_error = report_job_error
    return True


def _write_pod_status(executor: Any, job_info: Any) -> None:
    import json
    import re

    from .podlogs import STATUS_SUFFIX, pod_status

    name = job_info.external_jobid
    api = executor.kubeapi.api_client
    job = api.sanitize_for_serialization(executor.batchapi.read_namespaced_job_status(name, executor.namespace))
    pods = executor.kubeapi.list_namespaced_pod(namespace=executor.namespace, label_selector=f"job-name={name}")
    status = pod_status(job, [api.sanitize_for_serialization(p) for p in pods.items])
    args = " ".join(" ".join([*(c.get("command") or []), *(c.get("args") or [])])
                    for c in ((job.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or [])
    m = re.search(r"--target-jobs '?(\w+):", args)
    status["rule"] = m.group(1) if m else getattr(getattr(job_info, "job", None), "name", None)
    (executor.log_path / f"{name}{STATUS_SUFFIX}").write_text(json.dumps(status) + "\n", encoding="utf-8")


def release_scheduler_timers() -> int:
    """Cancel the job scheduler's pending re-evaluation timers (see the module doc), so that the
    process exits when the run is over instead of up to ``--max-jobs-per-timespan``'s timespan later.
    Only timers armed by ``snakemake.scheduling.job_scheduler`` are touched; call it once the
    scheduler has returned (``onsuccess``/``onerror``). Returns how many were cancelled."""
    import threading

    n = 0
    for thread in threading.enumerate():
        function = getattr(thread, "function", None)
        if isinstance(thread, threading.Timer) and getattr(function, "__module__", None) == (
                "snakemake.scheduling.job_scheduler"):
            thread.cancel()
            n += 1
    return n


def explain_config_yaml_errors() -> bool:
    """Make Snakemake's "Config file is not valid JSON or YAML" name the file, line and column (see
    the module doc). Idempotent. Returns False, changing nothing, for a Snakemake outside
    :data:`SUPPORTED` (the Snakefile's :func:`check_snakemake` then stops the run with the version
    error) or one whose loader no longer looks as expected."""
    import snakemake
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    if Version(snakemake.__version__) not in SpecifierSet(SUPPORTED):
        return False
    from snakemake.common import configfile

    original = getattr(configfile, "_load_configfile", None)
    if original is None:
        return False
    if getattr(original, "_benchmaker_yaml_mark", False):
        return True

    @functools.wraps(original)
    def _load_configfile(configpath_or_obj, filetype="Config"):
        try:
            return original(configpath_or_obj, filetype)
        except Exception as exc:
            import yaml

            cause = exc.__context__
            if not isinstance(cause, yaml.MarkedYAMLError) or "not valid JSON or YAML" not in str(exc):
                raise
            from .config import yaml_error_message

            mark = cause.problem_mark or cause.context_mark
            where = configpath_or_obj if isinstance(configpath_or_obj, (str, os.PathLike)) else (
                getattr(configpath_or_obj, "name", None) or (mark.name if mark is not None else "<config>"))
            # the same exception, reworded: Snakemake prints it (and its traceback) as before
            exc.args = (f"{filetype} file {yaml_error_message(where, cause)}",)
            raise

    _load_configfile._benchmaker_yaml_mark = True
    configfile._load_configfile = _load_configfile
    return True


# the warning Python prints for the dropped coroutine (snakemake/snakemake#4280), matched whole
UNAWAITED_INPUT_SIZES = r"coroutine 'InputFiles\._predicated_size_files\.<locals>\.sizes' was never awaited\Z"


def ignore_unawaited_input_sizes() -> None:
    """Filter the RuntimeWarning of Snakemake's dropped input-size coroutine (see the module doc): that exact
    message and category only, so every other RuntimeWarning (another coroutine never awaited included)
    is still printed. Idempotent (``warnings.filterwarnings`` keeps one copy of a filter)."""
    import warnings

    warnings.filterwarnings("ignore", message=UNAWAITED_INPUT_SIZES, category=RuntimeWarning)


# -- the workflow object (module doc, second list) -----------------------------------------------------

def default_storage_provider(workflow: Any) -> str | None:
    """``--default-storage-provider`` (``s3`` under --profile nrp), None without one."""
    return workflow.storage_settings.default_storage_provider


def default_storage_prefix(workflow: Any) -> str | None:
    """``--default-storage-prefix`` (``s3://bucket/build``), None without one."""
    return workflow.storage_settings.default_storage_prefix or None


def storage_plugin_settings(workflow: Any, name: str) -> Any:
    """The untagged settings of storage plugin ``name`` (``--storage-s3-endpoint-url``, ...): an object
    with one attribute per setting, or None when the plugin is not in use."""
    tagged = (workflow.storage_provider_settings or {}).get(name)
    return tagged.get_settings(None) if tagged is not None else None


def is_main_process(workflow: Any) -> bool:
    """True in the controller: the process the user started (not a job Snakemake spawned)."""
    return workflow.is_main_process


def is_spawned_job(workflow: Any) -> bool:
    """True in a job Snakemake spawned in a pod or a cluster job (``--mode remote``): it parses the
    Snakefile again."""
    return workflow.remote_exec


def executor_name(workflow: Any) -> str | None:
    """The executor plugin's name (``local``, ``dryrun``, ``kubernetes``, ``slurm``); None while the
    Snakefile is parsed (Snakemake sets the executor once parsing is over)."""
    plugin = workflow.executor_plugin
    return None if plugin is None else plugin.name


def is_dry_run(workflow: Any) -> bool:
    """True in ``snakemake -n`` (False while the Snakefile is parsed: the executor is not known yet)."""
    return bool(workflow.dryrun)


def executor_setting(workflow: Any, name: str) -> Any:
    """Setting ``name`` of the executor plugin (``--kubernetes-namespace`` is ``namespace``), None
    when the executor has no such setting (a dry run has none)."""
    return getattr(workflow.executor_settings, name, None)


def configfiles_given(workflow: Any) -> list[Path]:
    """The ``--configfile`` files (a profile's ``configfile:`` included), absolute, in order; empty
    when none was given (then the Snakefile's own ``configfile:`` is read)."""
    return list(workflow.config_settings.configfiles)


def configfiles_read(workflow: Any) -> list[str]:
    """Every config file read so far (``--configfile`` and the Snakefile's ``configfile:``), as given."""
    return [str(f) for f in workflow.configfiles]


def set_job_configfiles(workflow: Any, files: Sequence[str | os.PathLike]) -> None:
    """Every job Snakemake spawns gets exactly ``files`` (in order) as its config files, and the
    source archive (jobs without a shared file system) ships them. Call it in the controller while
    the Snakefile is parsed."""
    files = [Path(f).absolute() for f in files]
    workflow.config_settings.configfiles[:] = files
    workflow.configfiles[:] = [str(f) for f in files]


class _SnakemakeWrappers(logging.Filter):
    """Snakemake's wrapper lines about a failed benchmaker stage, whose block the final block prints: the
    script's ``RuleException: CalledProcessError ... returned non-zero exit status 1`` and the closing
    ``WorkflowError: At least one job did not complete successfully``. Other failures (a killed job, another
    exit status, a shell command) keep Snakemake's lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = getattr(record, "exception", None)
        msg = str(record.msg)
        if exc == "RuleException" and "CalledProcessError" in msg and "returned non-zero exit status 1." in msg \
                and "/.snakemake/scripts/" in msg:
            return False
        return not (exc == "WorkflowError" and "At least one job did not complete successfully" in msg)


def drop_failed_stage_wrappers() -> None:
    """Snakemake 9 logs a failed job's script error through the ``snakemake.logging`` logger, with the
    exception's class name in the record's ``exception`` attribute: filter out the wrapper lines of a
    failed benchmaker stage (:class:`_SnakemakeWrappers`), whose fix the run's final block prints
    (tests/test_first_hour_failure.py runs a real failure and fails if Snakemake changes this)."""
    lg = logging.getLogger("snakemake.logging")
    if not any(isinstance(f, _SnakemakeWrappers) for f in lg.filters):
        lg.addFilter(_SnakemakeWrappers())

"""benchmaker/snakemake_compat.py: the supported Snakemake range is the one pyproject pins and the one
installed, and each use of a Snakemake internal still works with the installed Snakemake."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from benchmaker import snakemake_compat as compat

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = list(project["dependencies"]) + [d for extra in project["optional-dependencies"].values() for d in extra]
    out = {}
    for dep in deps:
        m = re.match(r"^([A-Za-z0-9_.-]+)\s*(.*)$", dep.split(";")[0].strip())
        out[m.group(1).lower()] = m.group(2).replace(" ", "")
    return out


def test_the_supported_range_is_pyprojects_pin():
    pins = _pins()
    assert pins["snakemake"] == compat.SUPPORTED
    assert pins["snakemake-storage-plugin-s3"] == compat.SUPPORTED_S3_PLUGIN


def test_the_installed_snakemake_is_supported_and_checked():
    compat.check_snakemake()  # raises when the installed version is outside the range


@pytest.mark.parametrize("version", ["9.26.0", "10.0.0", "8.30.0"])
def test_another_snakemake_is_one_clear_error(version):
    with pytest.raises(compat.CompatError, match=r"snakemake>=9\.27,<10.*pip install"):
        compat.check_snakemake(version)


def test_not_a_trigger_is_a_derived_param_for_snakemake():
    """Snakemake leaves derived params out of the params it compares: a function of threads is one."""
    from snakemake.rules import Rule

    fn = compat.not_a_trigger({"batch_size": 3})
    assert Rule._is_deriving_function(fn)
    assert fn(None, 1) == {"batch_size": 3}
    assert not Rule._is_deriving_function(lambda wildcards: 1)  # the check can fail


def test_s3_patch_forgets_a_cached_not_a_folder_answer(monkeypatch):
    plugin = pytest.importorskip("snakemake_storage_plugin_s3")
    calls = []

    def exists(self):
        calls.append(self._is_dir)
        return True

    monkeypatch.setattr(plugin.StorageObject, "exists", exists)
    assert compat.patch_s3_fresh_dir()
    patched = plugin.StorageObject.exists
    assert compat.patch_s3_fresh_dir() and plugin.StorageObject.exists is patched  # idempotent
    obj = object.__new__(plugin.StorageObject)
    obj._is_dir = False
    assert plugin.StorageObject.exists(obj) is True
    assert calls == [None] and obj._is_dir is None
    # the attribute the patch resets is the one the plugin caches in (is_dir() fills it)
    src = Path(plugin.__file__).read_text()
    assert "self._is_dir = any(" in src


def test_the_image_and_ci_install_a_supported_snakemake():
    """The image's Snakemake (Dockerfile, .gitlab-ci.yml: jobs run it) is inside the supported range."""
    from packaging.specifiers import SpecifierSet

    for path, pattern in (("Dockerfile", r"ARG SNAKEMAKE_VERSION=([\d.]+)"),
                          (".gitlab-ci.yml", r'SNAKEMAKE_VERSION:\s*"([\d.]+)"')):
        version = re.search(pattern, (ROOT / path).read_text()).group(1)
        assert version in SpecifierSet(compat.SUPPORTED), (path, version)


@pytest.mark.parametrize("mode", ["REMOTE", "SUBPROCESS"])
def test_a_cluster_jobs_snakemake_leaves_the_incomplete_mark_to_the_controller(tmp_path, monkeypatch, mode):
    """A job's own Snakemake (on SLURM it shares .snakemake/ with the controller) no longer removes
    its outputs' incomplete marks when it ends; before the patch it did (a job finished after its
    controller died then looked finished, without metadata)."""
    import asyncio
    from types import SimpleNamespace

    from snakemake.io import IOFile
    from snakemake.persistence import PersistenceBase
    from snakemake.persistence.file import FilePersistence
    from snakemake_interface_executor_plugins.settings import ExecMode

    monkeypatch.setattr(PersistenceBase, "finished", PersistenceBase.finished)  # undone after the test
    out = IOFile(str(tmp_path / "out.txt"))
    workflow = SimpleNamespace(exec_mode=getattr(ExecMode, mode),
                               execution_settings=SimpleNamespace(keep_metadata=True),
                               remote_execution_settings=SimpleNamespace(immediate_submit=False),
                               dag_settings=SimpleNamespace(max_checksum_file_size=0))
    job = SimpleNamespace(output=[out])

    def marked_after_finish() -> bool:
        pers = FilePersistence(dag=SimpleNamespace(workflow=workflow), path=tmp_path / ".snakemake")
        pers.started(job, "4711")  # the controller, at submission
        asyncio.run(pers.finished(job))  # the job's own Snakemake, at its end
        return bool(pers._filter_incomplete_keys([pers._get_key(out)]))

    assert not marked_after_finish()  # unpatched: the job removes the mark (the check can fail)
    assert compat.keep_job_incomplete_marks() and compat.keep_job_incomplete_marks()  # idempotent
    assert marked_after_finish()


BAD_YAML = "a: 1\nb: [x\nc: 2\n"  # the '[' is never closed: yaml stops at line 3, column 2


def test_snakemakes_config_loader_keeps_the_yaml_mark_as_context(tmp_path):
    """What the wrapper relies on: Snakemake's loader raises its WorkflowError while handling the
    YAML error, so the error with the file's line is the WorkflowError's __context__."""
    import yaml
    from snakemake.common import configfile
    from snakemake_interface_common.exceptions import WorkflowError

    original = getattr(configfile._load_configfile, "__wrapped__", configfile._load_configfile)
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_YAML)
    with pytest.raises(WorkflowError, match="not valid JSON or YAML") as e:
        original(bad)
    assert isinstance(e.value.__context__, yaml.MarkedYAMLError)
    assert e.value.__context__.problem_mark.line == 2


def test_config_yaml_errors_name_file_and_line(tmp_path, monkeypatch):
    from snakemake.common import configfile
    from snakemake_interface_common.exceptions import WorkflowError

    original = getattr(configfile._load_configfile, "__wrapped__", configfile._load_configfile)
    monkeypatch.setattr(configfile, "_load_configfile", original)
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_YAML)
    assert compat.explain_config_yaml_errors()
    patched = configfile._load_configfile
    assert compat.explain_config_yaml_errors() and configfile._load_configfile is patched  # idempotent
    with pytest.raises(WorkflowError) as e:
        configfile.load_configfile(bad)  # as ConfigSettings and workflow.configfile() call it
    assert str(e.value).startswith(f"Config file {bad}:3:2: not valid YAML: ")
    good = tmp_path / "good.yaml"
    good.write_text("a: [1, 2]\n")
    assert configfile.load_configfile(good) == {"a": [1, 2]}
    with pytest.raises(FileNotFoundError):  # other errors pass unchanged
        configfile.load_configfile(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(WorkflowError, match="keys at top level"):
        configfile.load_configfile(tmp_path / "list.yaml")


def test_config_yaml_errors_leave_another_snakemake_alone(monkeypatch):
    import snakemake
    from snakemake.common import configfile

    before = configfile._load_configfile
    monkeypatch.setattr(snakemake, "__version__", "10.0.0")
    assert compat.explain_config_yaml_errors() is False
    assert configfile._load_configfile is before


def test_cluster_jobs_are_marked_incomplete_before_they_are_submitted(monkeypatch):
    """A controller that dies while a submission is on its way (a Kubernetes Job created, the answer
    not yet back; sbatch run in the SLURM executor's thread) must already have marked the job's
    outputs incomplete: Snakemake marks them only once the executor reports the submission."""
    from types import SimpleNamespace

    from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor

    monkeypatch.setattr(RemoteExecutor, "run_job_pre", RemoteExecutor.run_job_pre)  # undone after the test
    events: list = []

    def job(local: bool):
        return SimpleNamespace(is_local=local, log_info=lambda: events.append("printed"),
                               register=lambda external_jobid=None: events.append(("marked", external_jobid)))

    executor = SimpleNamespace(printjob=lambda j: j.log_info())
    RemoteExecutor.run_job_pre(executor, job(False))  # what the executors call right before submitting
    assert events == ["printed"]  # unpatched: not marked yet (the check can fail)
    assert compat.mark_before_submission() and compat.mark_before_submission()  # idempotent
    events.clear()
    RemoteExecutor.run_job_pre(executor, job(False))
    assert events == ["printed", ("marked", None)]
    events.clear()
    RemoteExecutor.run_job_pre(executor, job(True))  # a localrule runs (and is marked) on the controller
    assert events == ["printed"]


def test_a_failed_pods_status_is_recorded_when_the_kubernetes_executor_reports_it(monkeypatch, tmp_path):
    """The kubernetes executor deletes a failed Job right after reporting it: the patch records what
    the API says ended its pod first (tests/test_kube_recovery.py reads such records against the fake
    API), and an API error never stops the report."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_kubernetes import Executor

    monkeypatch.setattr(Executor, "report_job_error", Executor.report_job_error)  # undone after the test
    reported, recorded = [], []
    monkeypatch.setattr(Executor, "report_job_error",
                        lambda self, job_info, msg=None, **kw: reported.append((job_info.external_jobid, msg)))
    monkeypatch.setattr(compat, "_write_pod_status", lambda ex, job_info: recorded.append(job_info.external_jobid))
    assert compat.record_pod_status() and compat.record_pod_status()  # idempotent
    Executor.report_job_error(SimpleNamespace(), SimpleNamespace(external_jobid="snakejob-1"), msg="m")
    assert recorded == ["snakejob-1"] and reported == [("snakejob-1", "m")]

    def broken(ex, job_info):
        raise RuntimeError("API down")

    monkeypatch.setattr(compat, "_write_pod_status", broken)
    Executor.report_job_error(SimpleNamespace(), SimpleNamespace(external_jobid="snakejob-2"))
    assert reported[-1] == ("snakejob-2", None)


def test_the_schedulers_reevaluation_timer_is_released_and_no_other_timer():
    """Snakemake's scheduler arms a non-daemon threading.Timer after each round (the process would
    wait for it at exit); release_scheduler_timers cancels those, and only those."""
    import threading
    from types import SimpleNamespace

    from snakemake.scheduling.job_scheduler import JobScheduler

    from benchmaker.snakemake_compat import release_scheduler_timers

    released = []
    scheduler = SimpleNamespace(_open_jobs=SimpleNamespace(release=lambda: released.append(1)))
    other = threading.Timer(30, lambda: None)
    other.start()
    try:
        before = set(threading.enumerate())
        JobScheduler._schedule_reevalutation(scheduler, 30)  # what the scheduler does after a round
        (timer,) = [t for t in threading.enumerate() if t not in before]
        assert isinstance(timer, threading.Timer) and not timer.daemon
        assert release_scheduler_timers() == 1
        timer.join(timeout=5)
        assert not timer.is_alive() and not released
        assert other.is_alive() and not other.finished.is_set()
    finally:
        other.cancel()


def _unawaited_warnings(install: bool) -> list[str]:
    """The RuntimeWarnings printed when Snakemake drops its input-size coroutine inside a running event loop (as
    it does while building the DAG, snakemake/snakemake#4280), another coroutine is dropped, and another
    RuntimeWarning is raised; with the project's filter installed first when ``install``."""
    import asyncio
    import gc
    import warnings

    from snakemake.exceptions import NestedCoroutineError
    from snakemake.iocontainers import InputFiles

    async def other():
        return None

    async def in_a_loop():
        with pytest.raises(NestedCoroutineError):
            InputFiles([__file__]).size_files  # noqa: B018 - the property runs the coroutine
        other()  # noqa: RUF006 - dropped on purpose

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if install:
            compat.ignore_unawaited_input_sizes()
        asyncio.run(in_a_loop())
        gc.collect()
        warnings.warn("something else", RuntimeWarning, stacklevel=1)
    return sorted(str(w.message) for w in seen if w.category is RuntimeWarning)


def test_only_snakemakes_unawaited_input_sizes_warning_is_filtered():
    mine = "coroutine 'InputFiles._predicated_size_files.<locals>.sizes' was never awaited"
    other = "coroutine '_unawaited_warnings.<locals>.other' was never awaited"
    assert _unawaited_warnings(install=False) == sorted([mine, other, "something else"])  # the bug is still there
    assert _unawaited_warnings(install=True) == sorted([other, "something else"])
    assert re.search(r"^ignore_unawaited_input_sizes\(\)$", (ROOT / "Snakefile").read_text(), re.M)


def test_the_snakefile_states_the_supported_lower_bound():
    """One statement of the supported Snakemake: the Snakefile's min_version is SUPPORTED's lower bound
    (pyproject's pin is SUPPORTED: test_the_supported_range_is_pyprojects_pin)."""
    from packaging.specifiers import SpecifierSet

    (minimum,) = re.findall(r'^min_version\("([\d.]+)"\)', (ROOT / "Snakefile").read_text(), re.M)
    (lower,) = [s.version for s in SpecifierSet(compat.SUPPORTED) if s.operator == ">="]
    assert minimum == lower


def test_the_workflow_uses_no_snakemake_internal_outside_the_compat_module():
    """The rules and the Snakefile reach Snakemake's ``workflow`` object only through
    benchmaker.snakemake_compat (``workflow.basedir`` is documented API) and never import snakemake's
    own modules but its documented ``snakemake.utils``."""
    for path in [ROOT / "Snakefile", *sorted((ROOT / "rules").glob("*.smk"))]:
        text = path.read_text()
        uses = set(re.findall(r"\bworkflow\.(\w+)", text)) - {"basedir"}
        assert not uses, f"{path.name} reads workflow.{', workflow.'.join(sorted(uses))}: use snakemake_compat"
        imports = set(re.findall(r"^\s*(?:from|import) (snakemake[\w.]*)", text, re.M)) - {"snakemake.utils"}
        assert not imports, (path.name, imports)


PROBE = '''
import json
import sys

sys.path.insert(0, {src!r})
from benchmaker import snakemake_compat as c

if not c.configfiles_given(workflow):

    configfile: "own.yaml"


def _s3(name):
    s = c.storage_plugin_settings(workflow, "s3")
    return None if s is None else getattr(s, name)


FACTS = {{"parse": {{
    "provider": c.default_storage_provider(workflow), "prefix": c.default_storage_prefix(workflow),
    "s3_endpoint": _s3("endpoint_url"), "main": c.is_main_process(workflow),
    "spawned": c.is_spawned_job(workflow), "executor": c.executor_name(workflow),
    "dry": c.is_dry_run(workflow), "given": [str(f) for f in c.configfiles_given(workflow)],
    "read": c.configfiles_read(workflow),
}}}}
c.set_job_configfiles(workflow, ["job.yaml", {last!r}])


def probe(wildcards):
    from snakemake.spawn_jobs import SpawnedJobArgsFactory  # what a spawned job's command line gets

    FACTS["dag"] = {{"executor": c.executor_name(workflow), "dry": c.is_dry_run(workflow),
                    "job_args": SpawnedJobArgsFactory(workflow).get_configfiles_arg()}}
    print("FACTS=" + json.dumps(FACTS))
    return []


rule all:
    input:
        probe,


onstart:
    # the files the source archive ships to jobs without a shared file system
    print("SOURCES=" + json.dumps(sorted(workflow.dag.get_sources())))
'''


def _probe(tmp_path, *args: str) -> tuple[dict, list | None]:
    """Run the installed Snakemake on a Snakefile that reports what each compat function returns."""
    import json
    import subprocess
    import sys

    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "Snakefile").write_text(PROBE.format(src=str(ROOT / "src"), last=str(tmp_path / "last.yaml")))
    for name in ("own.yaml", "job.yaml"):
        (work / name).write_text(f"{name[:3]}: 1\n")
    (tmp_path / "last.yaml").write_text("last: 1\n")
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args], cwd=work,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    facts = json.loads(re.search(r"^FACTS=(.*)$", r.stdout, re.M).group(1))
    sources = re.search(r"^SOURCES=(.*)$", r.stdout, re.M)
    return facts, (json.loads(sources.group(1)) if sources else None)


def test_the_workflow_object_functions_on_a_controller_with_default_storage(tmp_path):
    """What rules/cluster.smk reads and changes on Snakemake's workflow object, on a real run: the
    default storage and a storage plugin's settings, the --configfile files (outside the working
    folder), the executor once the DAG is built, and the config files every job gets: the job's
    command line (--configfiles) and the source archive both follow set_job_configfiles."""
    (tmp_path / "given.yaml").write_text("given: 1\n")
    facts, sources = _probe(tmp_path, "--configfile", str(tmp_path / "given.yaml"),
                            "--default-storage-provider", "s3", "--default-storage-prefix", "s3://bucket/build",
                            "--storage-s3-endpoint-url", "http://127.0.0.1:9", "--storage-s3-access-key", "a",
                            "--storage-s3-secret-key", "b")
    given = str(tmp_path / "given.yaml")
    assert facts["parse"] == {"provider": "s3", "prefix": "s3://bucket/build", "s3_endpoint": "http://127.0.0.1:9",
                              "main": True, "spawned": False, "executor": None, "dry": False, "given": [given],
                              "read": [given]}
    job, last = tmp_path / "work" / "job.yaml", tmp_path / "last.yaml"
    assert facts["dag"] == {"executor": "local", "dry": False, "job_args": f"--configfiles {job} {last}"}
    assert {"job.yaml", "../last.yaml"} <= set(sources) and not [s for s in sources if "own" in s or "given" in s]


def test_the_workflow_object_functions_in_a_spawned_dry_run(tmp_path):
    """A job Snakemake spawned (``--mode remote``, as in a pod) is no main process; without
    --configfile the Snakefile's own configfile: is the one read; a dry run is known as one."""
    facts, _ = _probe(tmp_path, "-n", "--mode", "remote")
    assert facts["parse"] == {"provider": None, "prefix": None, "s3_endpoint": None, "main": False,
                              "spawned": True, "executor": None, "dry": False, "given": [], "read": ["own.yaml"]}
    assert facts["dag"]["executor"] == "dryrun" and facts["dag"]["dry"] is True


def test_the_executor_settings_the_workflow_reads_exist():
    """The kubernetes executor's settings rules/cluster.smk reads by name (executor_setting), and the
    executor names it compares with (executor_name)."""
    import dataclasses

    from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

    k8s = pytest.importorskip("snakemake_executor_plugin_kubernetes")
    assert {"namespace", "persistent_volumes"} <= {f.name for f in dataclasses.fields(k8s.ExecutorSettings)}
    registry = ExecutorPluginRegistry()
    assert registry.get_plugin("kubernetes").name == "kubernetes"
    pytest.importorskip("snakemake_executor_plugin_slurm")
    assert registry.get_plugin("slurm").name == "slurm"

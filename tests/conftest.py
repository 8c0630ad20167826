"""Shared fixtures. Everything runs offline: HF_HUB_OFFLINE=1, tiny random CLIP checkpoints."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# strict mode in every workflow run of the suite (and every stage run in-process): each job reads its
# inputs from a folder holding only what its rule declares, as in a pod (benchmaker/strict.py,
# docs/architecture.md); BENCHMAKER_STRICT=0 turns it off
os.environ.setdefault("BENCHMAKER_STRICT", "1")

from benchmaker import _tvshim  # noqa: E402

_tvshim.install()

import support  # noqa: E402

# no SLURM in any Snakemake of the suite (subprocess, job or in-process parser): the SLURM plugin asks
# `scontrol show config` (10 s of retries where SLURM's client is installed and no controller runs);
# tests/test_slurm.py, which talks to a real one, runs its commands on support.real_path()
os.environ["PATH"] = support.no_slurm_path()


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory) -> Path:
    """A tiny random open_clip model as a local-dir: folder (use model=f'local-dir:{path}')."""
    return support.make_tiny_clip(tmp_path_factory.mktemp("tiny_clip"))


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """30 small generated images in 5 colour folders + 3 bad files in broken/ (read-only use)."""
    return support.make_corpus(tmp_path_factory.mktemp("corpus") / "images")


@pytest.fixture()
def fake(monkeypatch):
    """The strict fake OpenAI server (tests/fake_openai.py), answering after 2 polls, with a fast
    Retry-After and a test key in OPENAI_API_KEY. A test file may define its own ``fake``."""
    import fake_openai

    f = fake_openai.start(steps=2)
    f.retry_after = "0.01"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    yield f
    fake_openai.stop(f)


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory, tiny_corpus, tiny_clip) -> dict:
    """The tiny benchmark built twice, in two folders, other orders and cores, a kill -9 and resume
    (tests/support_runs.py): tests/test_determinism.py compares them, tests/test_workflow.py reads
    run A. One worker builds it (SERIAL_GROUPS "tiny-runs")."""
    import support_runs

    return support_runs.run_twice(tmp_path_factory.mktemp("det"), tiny_corpus, tiny_clip)


@pytest.fixture(scope="session")
def tiny_upstream(tmp_path_factory, tiny_corpus, tiny_clip) -> dict:
    """The tiny benchmark on one shard built up to its scored qrels and query embeddings, once
    (tests/support_runs.py): a test copies it with support_runs.copy_upstream and runs only its own
    stages. One worker builds it (SERIAL_GROUPS "tiny-upstream")."""
    import support_runs

    return support_runs.build_upstream(tmp_path_factory.mktemp("upstream"), tiny_corpus, tiny_clip)


@pytest.fixture(scope="session")
def numba_cache(request, tmp_path_factory) -> Path:
    """ranx's numba JIT cache (compiling costs ~40 s here): kept across test sessions in the pytest
    cache (.pytest_cache/d/numba), as real runs keep it per user (~/.cache/benchmaker/numba,
    docs/evaluate.md); a fresh folder per session under ``-p no:cacheprovider``. A fresh folder (a
    clean clone in CI) starts as a copy of the per-user cache that `make`'s set-up compiled (step 5,
    benchmaker.evaluate.warm): the same installation's functions, so nothing is compiled again."""
    cache = getattr(request.config, "cache", None)
    folder = cache.mkdir("numba") if cache is not None else tmp_path_factory.mktemp("numba")
    _seed_numba_cache(folder)
    return folder


def _seed_numba_cache(folder: Path) -> None:
    """Copy the per-user numba cache's entries into an empty ``folder``: each entry folder copied
    aside, then renamed into place (a worker reading the cache never sees half a copy)."""
    import shutil

    from benchmaker.evaluate.warm import default_cache_dir

    seed = default_cache_dir()
    if any(folder.iterdir()) or not seed.is_dir() or seed.resolve() == folder.resolve():
        return
    for entry in sorted(p for p in seed.iterdir() if p.is_dir()):
        aside = folder.parent / f".{folder.name}-{os.getpid()}-{entry.name}"
        shutil.copytree(entry, aside)
        try:
            aside.rename(folder / entry.name)
        except OSError:  # another worker put it there first
            shutil.rmtree(aside, ignore_errors=True)


@pytest.fixture()
def tiny_cfg(tmp_path, tiny_corpus, tiny_clip) -> dict:
    return support.tiny_config(tmp_path, tiny_corpus, tiny_clip)


# In CI the real-SLURM tests must run: a skip (no root, no apt, no package source, ...) fails the
# test there unless BENCHMAKER_ALLOW_SLURM_SKIP=1 says that this CI machine cannot run them.
def _slurm_skip_allowed() -> bool:
    return os.environ.get("CI", "").lower() != "true" or os.environ.get("BENCHMAKER_ALLOW_SLURM_SKIP") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.get_closest_marker("slurm") is not None and not _slurm_skip_allowed():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"SLURM test skipped in CI ({reason}); fix the CI machine, or set "
                           "BENCHMAKER_ALLOW_SLURM_SKIP=1 to allow the skip explicitly")


# Parallel runs: `make test` runs pytest-xdist with `-n 2 --dist loadgroup` (one worker per core; a
# plain `-n N` gets the same groups). A group runs whole on one worker, its tests in file order; tests
# without a group go to whichever worker is free. A test gets a group when
#   * it uses a module- (or class-) scoped fixture: a full workflow run, a git clone, a SLURM cluster
#     is then built once, on one worker, and the tests that read it in order stay together;
#   * it must not run beside another test of its group (SERIAL_GROUPS: what they share);
#   * it is marked `slurm` (the real SLURM cluster tests/test_slurm.py starts on localhost).
# Longest first: a worker that asks for work gets the heaviest unit left (a `slow` or `slurm` test
# weighs SLOW_WEIGHT, any other 1; a group the sum of its tests), so the workflow runs start early
# and the many sub-second tests fill the end: both workers finish within seconds of each other
# instead of one running a long test alone at the end.
# The groups reach the scheduler through GroupScheduling below, not through pytest-xdist's own
# loadgroup: with pytest >= 9.2 that one silently ignores every group (pytest-xdist#1386: it renames
# the test's node id, which pytest 9.2 no longer reads), and tests/test_parallel_groups.py checks that
# ours holds on the installed versions.
SERIAL_GROUPS: dict[str, tuple[tuple[str, str], ...]] = {
    # Snakemake with the checkout itself as working directory: each locks the same outputs
    # (results/example-bench) in <checkout>/.snakemake, and a second one at once fails to lock
    "checkout-workdir": (("test_example.py", "test_example_dry_run_from_repo_root"),
                         ("test_deepen_workflow.py", "test_example_overlay_dry_run_from_repo_root"),
                         ("test_workflow.py", "test_lint_is_clean")),
    # the session fixture `tiny_runs` (two workflow builds): built once, on the worker that runs its users
    "tiny-runs": (("test_determinism.py", "runs"), ("test_workflow.py", "full_run")),
    # the session fixture `tiny_upstream` (the one-shard tiny benchmark up to its qrels): built once, on
    # the worker that runs the tests that copy it (each named: the fixture is defined in this file)
    "tiny-upstream": (("test_evaluate_workflow.py", "test_evaluate_target_end_to_end"),
                      ("test_deepen_workflow.py", "test_deepen_offline_end_to_end"),
                      ("test_loss_totals.py", "test_system_and_second_judge_losses_reach_the_totals")),
    # ranx's numba cache kept in the pytest cache (.pytest_cache/d/numba): one writer at a time
    "pytest-cache": (("test_example.py", "test_example_end_to_end_offline"),
                     ("test_export_publish.py", "builds")),  # every test using the `builds` fixture
}
GROUPS_DIR = "benchmaker_xdist_groups"  # the workerinput key: where workers write their groups
SLOW_WEIGHT = 30  # a workflow run (`slow`, `slurm`): tens of seconds, where most tests take under one


def weight_of(item) -> int:
    """How long a test is expected to take, in units of a unit test (see above)."""
    slow = item.get_closest_marker("slow") is not None or item.get_closest_marker("slurm") is not None
    return SLOW_WEIGHT if slow else 1


def xdist_group_of(item) -> str | None:
    """The xdist group of a test (see above), or None: any worker may run it."""
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    for group, entries in SERIAL_GROUPS.items():
        for file, name in entries:
            if item.path.name == file and (getattr(item, "originalname", item.name) == name
                                           or name in getattr(item, "fixturenames", ())):
                return group
    if item.get_closest_marker("slurm") is not None:
        return "slurm"
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name) if info is not None else None
        if defs and defs[-1].scope in ("module", "class", "package"):
            return item.path.name
    return None


def pytest_collection_modifyitems(config, items):
    """On an xdist worker: write {node id: group} where the controller's scheduler reads it."""
    folder = getattr(config, "workerinput", {}).get(GROUPS_DIR)
    if not folder:
        return
    groups = {item.nodeid: g for item in items if (g := xdist_group_of(item)) is not None}
    weights = {item.nodeid: w for item in items if (w := weight_of(item)) != 1}
    out = Path(folder) / f"{config.workerinput['workerid']}.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"groups": groups, "weights": weights}))
    os.replace(tmp, out)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """On the controller, per worker: the folder it writes its groups to."""
    config = node.config
    if not hasattr(config, "_benchmaker_groups_dir"):
        import tempfile

        config._benchmaker_groups_dir = tempfile.mkdtemp(prefix="xdist-groups-")
    node.workerinput[GROUPS_DIR] = config._benchmaker_groups_dir


def heaviest_unit(workqueue: dict[str, dict[str, bool]], weights: dict[str, int]) -> str:
    """The scope whose tests weigh most (the first of equals, in queue order)."""
    return max(workqueue, key=lambda scope: sum(weights.get(nodeid, 1) for nodeid in workqueue[scope]))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") not in ("load", "loadgroup"):  # `-n N` alone means `--dist load`
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """pytest-xdist's loadscope scheduler with our groups as scopes, the heaviest unit first;
        every other test is its own scope, so it goes to whichever worker is free."""

        groups: dict[str, str] | None = None
        weights: dict[str, int] = {}

        def _read_groups(self) -> None:
            if self.groups is None:  # all workers have collected (and written) by now
                self.groups, self.weights = {}, {}
                written = sorted(Path(config._benchmaker_groups_dir).glob("*.json"))
                if not written:
                    raise RuntimeError("no xdist worker wrote its test groups (tests/conftest.py)")
                for f in written:
                    got = json.loads(f.read_text())
                    self.groups.update(got["groups"])
                    self.weights.update(got["weights"])

        def _split_scope(self, nodeid: str) -> str:
            self._read_groups()
            group = self.groups.get(nodeid)
            return f"group:{group}" if group is not None else nodeid

        def _assign_work_unit(self, node) -> None:
            self._read_groups()
            self.workqueue.move_to_end(heaviest_unit(self.workqueue, self.weights), last=False)
            super()._assign_work_unit(node)

    return GroupScheduling(config, log)


def pytest_unconfigure(config):
    folder = getattr(config, "_benchmaker_groups_dir", None)
    if folder:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)

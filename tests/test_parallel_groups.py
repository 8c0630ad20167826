"""`make test` runs on pytest-xdist workers; tests/conftest.py keeps tests that share state on one
worker. Every entry of its SERIAL_GROUPS table names a test or fixture that exists, and the rule
that keeps module-scoped fixtures' users together picks them up."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import conftest
import pytest
import support

TESTS = support.ROOT / "tests"


def _names(file: str) -> set[str]:
    tree = ast.parse((TESTS / file).read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


@pytest.mark.parametrize("group", sorted(conftest.SERIAL_GROUPS))
def test_serial_group_entries_exist(group):
    for file, name in conftest.SERIAL_GROUPS[group]:
        assert (TESTS / file).is_file(), (group, file)
        assert name in _names(file), f"{group}: {file} has no test or fixture {name}"


def test_make_test_runs_the_groups_on_workers():
    """The Makefile's test target is the README's and CI's command: xdist with the group scheduler."""
    target = (support.ROOT / "Makefile").read_text().split("\ntest:")[1].split("\n\n")[0]
    assert re.search(r"-m pytest -n \$\(TEST_WORKERS\) --dist loadgroup", target), target


class _Item:
    def __init__(self, file, name, fixtures=(), scopes=None, slurm=False):
        self.path = TESTS / file
        self.name = self.originalname = name
        self.fixturenames = list(fixtures)
        scopes = scopes or {}

        class Def:
            def __init__(self, scope):
                self.scope = scope

        class Info:
            name2fixturedefs = {f: (Def(scopes.get(f, "function")),) for f in fixtures}

        self._fixtureinfo = Info()
        self._slurm = slurm

    def get_closest_marker(self, name):
        return object() if name == "slurm" and self._slurm else None


def test_group_rules():
    assert conftest.xdist_group_of(_Item("test_x.py", "test_a", ["tmp_path", "tiny_clip"],
                                         {"tiny_clip": "session"})) is None
    assert conftest.xdist_group_of(_Item("test_x.py", "test_b", ["full_run"], {"full_run": "module"})) == "test_x.py"
    assert conftest.xdist_group_of(_Item("test_x.py", "test_c", slurm=True)) == "slurm"
    assert conftest.weight_of(_Item("test_x.py", "test_c", slurm=True)) == conftest.SLOW_WEIGHT
    assert conftest.weight_of(_Item("test_x.py", "test_a")) == 1
    dry_run = _Item("test_example.py", "test_example_dry_run_from_repo_root")
    assert conftest.xdist_group_of(dry_run) == "checkout-workdir"
    assert conftest.xdist_group_of(_Item("test_export_publish.py", "test_y", ["builds"],
                                         {"builds": "module"})) == "pytest-cache"
    # the session fixture tiny_runs: its users in two files on one worker (built once)
    for file, fixture in (("test_determinism.py", "runs"), ("test_workflow.py", "full_run")):
        assert conftest.xdist_group_of(_Item(file, "test_z", [fixture, "tiny_runs"],
                                             {fixture: "module", "tiny_runs": "session"})) == "tiny-runs"
    # the session fixture tiny_upstream: its three users in three files on one worker (built once)
    users = [("test_evaluate_workflow.py", "test_evaluate_target_end_to_end"),
             ("test_deepen_workflow.py", "test_deepen_offline_end_to_end"),
             ("test_loss_totals.py", "test_system_and_second_judge_losses_reach_the_totals")]
    for file, name in users:
        assert conftest.xdist_group_of(_Item(file, name, ["tmp_path", "tiny_upstream"],
                                             {"tiny_upstream": "session"})) == "tiny-upstream"


def test_heaviest_unit_first_ties_in_queue_order():
    queue = {"a.py::t": {"a.py::t": False}, "group:g": {"g.py::x": False, "g.py::y": False},
             "s.py::slow": {"s.py::slow": False}, "h.py::u": {"h.py::u": False}}
    assert conftest.heaviest_unit(queue, {"s.py::slow": conftest.SLOW_WEIGHT}) == "s.py::slow"
    assert conftest.heaviest_unit(queue, {}) == "group:g"
    assert conftest.heaviest_unit({k: queue[k] for k in ("h.py::u", "a.py::t")}, {}) == "h.py::u"


def test_groups_hold_under_xdist(tmp_path):
    """A real `pytest -n 2 --dist loadgroup` with this conftest's hooks: the users of a module-scoped
    fixture all run on one worker (the fixture is built once), while the other tests spread over
    both workers; the slow tests, written last, start first. (pytest-xdist's own loadgroup fails
    the first half on pytest >= 9.2.)"""
    (tmp_path / "conftest.py").write_text(
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        f"spec = importlib.util.spec_from_file_location('bm_conftest', {str(TESTS / 'conftest.py')!r})\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "for name in ('pytest_collection_modifyitems', 'pytest_configure_node', "
        "'pytest_xdist_make_scheduler', 'pytest_unconfigure'):\n"
        "    globals()[name] = getattr(mod, name)\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: a workflow run\n")
    log = tmp_path / "ran.txt"
    (tmp_path / "test_g.py").write_text(
        "import os, time, pytest\n\n"
        "BUILT = []\n\n"
        "@pytest.fixture(scope='module')\n"
        "def shared():\n"
        "    BUILT.append(1)\n"
        "    return len(BUILT)\n\n"
        "def _log(kind):\n"
        f"    with open({str(log)!r}, 'a') as fh:\n"
        "        fh.write(f\"{kind} {os.environ['PYTEST_XDIST_WORKER']}\\n\")\n\n"
        "@pytest.mark.parametrize('i', range(4))\n"
        "def test_shared(shared, i):\n"
        "    assert shared == 1\n"
        "    _log('shared')\n"
        "    time.sleep(0.3)\n\n"
        "@pytest.mark.parametrize('i', range(8))\n"
        "def test_free(i):\n"
        "    _log('free')\n"
        "    time.sleep(0.3)\n\n"
        "@pytest.mark.slow\n"
        "@pytest.mark.parametrize('i', range(2))\n"
        "def test_slow(i):\n"
        "    _log('slow')\n"
        "    time.sleep(0.3)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CI"))}
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q", "-p",
                        "no:cacheprovider", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ran = [line.split() for line in log.read_text().splitlines()]
    assert len(ran) == 14
    assert len({w for kind, w in ran if kind == "shared"}) == 1, ran
    assert {w for _, w in ran} == {"gw0", "gw1"}, ran
    # each worker's first test was a slow one
    assert [next(kind for kind, w in ran if w == worker) for worker in ("gw0", "gw1")] == ["slow", "slow"], ran

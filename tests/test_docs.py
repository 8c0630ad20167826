"""The docs are reference: what a script can check of them holds.

- README: the number of tests ``make test`` leaves out is the number the ``heavy`` marker deselects,
  the pytest-xdist workers and the slowest tests it prints are the Makefile's and pyproject's, and every
  ``make TARGET`` it names is a target of the Makefile.
- docs/architecture.md: its library layout names every top-level module and package of src/benchmaker.
- docs/performance.md: current figures only (≤ 350 lines; the history is in CHANGELOG.md), and every
  section with a figure names the command that reproduces it and the date it was measured.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "benchmaker"
README = (ROOT / "README.md").read_text()
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}


def test_the_readme_names_the_heavy_tests_make_test_leaves_out():
    said = re.search(r"`make test` leaves out (\w+) tests", README)
    assert said, "README: the sentence on the tests `make test` leaves out"
    marked = [f.relative_to(ROOT).as_posix() for f in sorted((ROOT / "tests").glob("test_*.py"))
              if "heavy" in f.read_text()]
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "heavy", "-p", "no:randomly",
                        "-p", "no:cacheprovider", *marked], cwd=ROOT, capture_output=True, text=True, timeout=300)
    collected = [ln for ln in r.stdout.splitlines() if "::" in ln]
    assert r.returncode == 0 and collected, r.stdout[-2000:] + r.stderr[-2000:]
    assert NUMBERS[said.group(1)] == len(collected), collected
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "-m 'not heavy'" in addopts  # what `make test` runs leaves them out
    assert "test-heavy:" in (ROOT / "Makefile").read_text() and "-m heavy" in (ROOT / "Makefile").read_text()


def test_the_readme_states_the_test_runs_settings():
    makefile = (ROOT / "Makefile").read_text()
    workers = int(re.search(r"^TEST_WORKERS \?= (\d+)", makefile, re.M).group(1))
    said = re.search(r"It runs on (\w+) pytest-xdist workers", README)
    assert said and NUMBERS[said.group(1)] == workers
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    slowest = re.search(r"prints the (\d+) slowest tests \(`--durations=(\d+)`\)", README)
    assert slowest and slowest.group(1) == slowest.group(2) and f"--durations={slowest.group(1)}" in addopts


def test_every_make_target_the_docs_name_exists():
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        named = set(re.findall(r"`make ([a-z][\w-]*)", path.read_text()))
        assert named <= targets, (path.name, named - targets)


def _layout_names() -> set[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## Library layout", 1)[1].split("```", 2)[1]
    return set(re.findall(r"^(\S+)", block, re.M))


def test_the_library_layout_names_every_top_level_module():
    modules = {p.name for p in PKG.glob("*.py") if p.name != "__init__.py"}
    packages = {p.parent.name + "/" for p in PKG.glob("*/__init__.py")}
    named = _layout_names()
    there = modules | packages
    assert there <= named, f"docs/architecture.md, Library layout: add {sorted(there - named)}"
    assert named <= there, f"docs/architecture.md names what is not there: {sorted(named - there)}"


def _sections(text: str) -> list[tuple[str, str]]:
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return list(zip(parts[1::2], parts[2::2]))


def test_performance_states_current_figures_with_command_machine_and_date():
    text = (ROOT / "docs" / "performance.md").read_text()
    assert len(text.splitlines()) <= 350, "docs/performance.md: current figures only; history goes to CHANGELOG.md"
    assert "CHANGELOG.md" in text and (ROOT / "CHANGELOG.md").exists()
    sections = _sections(text)
    assert len(sections) >= 10
    for title, body in sections:
        if not re.search(r"\d+(\.\d+)? (s|MB|GB|images/s)\b", body):
            continue  # no figure
        assert re.search(r"python -m benchmaker|python benchmarks/\w+\.py", body), f"{title}: which command?"
        assert re.search(r"20\d\d-\d\d-\d\d", body), f"{title}: measured when?"
        assert re.search(r"\bthe (VM|H100 node)\b", body, re.I), f"{title}: on which machine?"


@pytest.mark.parametrize("script", sorted({m for m in re.findall(r"benchmarks/(\w+\.py)",
                                                                  (ROOT / "docs" / "performance.md").read_text())}))
def test_every_benchmark_the_performance_doc_names_exists(script):
    assert (ROOT / "benchmarks" / script).is_file()

"""The import graph of src/benchmaker has no cycle, and no arrow goes from a lower layer up to a
higher one. Every import counts: module level, inside functions (lazy imports of heavy modules) and
under ``if TYPE_CHECKING``; a package's own ``__init__`` (imported implicitly with any of its
modules) is not an edge.

Layers, lowest first: the foundation (configuration, formats, files, logging, the runner), the
provider engine (``providers/``), the stages (one package each), the entry points (cli, upstream,
preflight, estimate: the CLI's cost estimate builds the requests every paid stage would send).
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "benchmaker"
STAGES = {"preprocess", "vision", "plan", "queries", "judge", "similarity", "summary", "export", "audit", "evaluate",
          "deepen"}
ENTRY = {"cli", "upstream", "preflight", "estimate"}


def _name(f: Path) -> str:
    parts = list(f.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of the package it imports."""
    mods = {_name(f): f for f in PKG.rglob("*.py")}
    g: dict[str, set[str]] = {m: set() for m in mods}
    for mod, f in mods.items():
        package = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                targets = [target] + [f"{target}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                if t in mods and t != mod and not mod.startswith(t + "."):
                    g[mod].add(t)
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other (strongly connected components of 2+)."""
    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for n in g[todo.pop()]:
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen

    reached = {m: reach(m) for m in g}
    groups = {frozenset({m} | {n for n in reached[m] if m in reached[n]}) for m in g if m in reached[m]}
    return sorted(sorted(c) for c in groups)


def layer(mod: str) -> int:
    top = mod.split(".")[1] if "." in mod else ""
    if top in ENTRY:
        return 3
    if top in STAGES:
        return 2
    if top == "providers":
        return 1
    return 0


def test_the_import_graph_has_no_cycle():
    g = import_graph()
    assert sum(map(len, g.values())) > 100
    assert not cycles(g), f"import cycles: {cycles(g)}"


def test_no_import_goes_up_a_layer():
    g = import_graph()
    up = {(a, b) for a, targets in g.items() for b in targets if layer(b) > layer(a)}
    assert not up, f"imports from a lower layer to a higher one: {sorted(up)}"


def _package(tmp_path, monkeypatch, files: dict[str, str]) -> None:
    """A stand-in benchmaker package of ``files`` (path -> source) that the graph builder reads."""
    pkg = tmp_path / "benchmaker"
    for name, text in {"__init__.py": "", **files}.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    monkeypatch.setattr(__import__(__name__), "PKG", pkg)


def test_the_check_finds_a_cycle(tmp_path, monkeypatch):
    """The graph builder sees lazy imports: a cycle through a function-level import is found."""
    _package(tmp_path, monkeypatch, {"a.py": "from .sub import b\n", "sub/__init__.py": "",
                                     "sub/b.py": "def f():\n    from .. import a\n"})
    assert cycles(import_graph()) == [["benchmaker.a", "benchmaker.sub.b"]]


def test_the_check_finds_an_upward_import(tmp_path, monkeypatch):
    """A foundation module that imports a stage (even lazily) is an arrow up a layer."""
    _package(tmp_path, monkeypatch, {"config.py": "def check():\n    from .judge.rules import x\n",
                                     "judge/__init__.py": "", "judge/rules.py": "from ..config import check\nx = 1\n"})
    g = import_graph()
    assert {(a, b) for a, t in g.items() for b in t if layer(b) > layer(a)} == {
        ("benchmaker.config", "benchmaker.judge.rules")}

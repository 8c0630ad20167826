"""The import graph of src/benchmaker has no cycle, between modules or between packages, and no
arrow goes from a lower layer up to a higher one. Every import counts: module level, inside functions
(lazy imports of heavy modules) and under ``if TYPE_CHECKING``; a package's own ``__init__``
(imported implicitly with any of its modules) is not an edge.

Layers, lowest first: the foundation (configuration, formats, files, logging, the runner: the modules
at the top of the package), the pages (``pages/``: report, charts and output folders every stage that
publishes a page writes with), the provider engine (``providers/``), the stages (one package each),
the entry points (cli, upstream, preflight, estimate: the CLI's cost estimate builds the requests every
paid stage would send). Between the stages the package graph has no cycle: a stage package may use a
stage below it (deepen uses evaluate's runs) and is then above it, never both ways.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

PKG = Path(__file__).resolve().parents[1] / "src" / "benchmaker"
LAYERS = {"pages": 1, "providers": 2}
STAGES = {"preprocess", "vision", "plan", "queries", "judge", "similarity", "summary", "export", "audit", "evaluate",
          "deepen"}
ENTRY = {"cli", "upstream", "preflight", "estimate"}
LAYERS |= {s: 3 for s in STAGES} | {e: 4 for e in ENTRY}


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
    """The groups of nodes that import each other: the strongly connected components of 2+ nodes
    (scipy's), each sorted, in sorted order."""
    nodes = sorted(g)
    at = {n: i for i, n in enumerate(nodes)}
    edges = [(at[a], at[b]) for a in nodes for b in g[a]]
    rows, cols = zip(*edges) if edges else ((), ())
    adjacency = csr_matrix((np.ones(len(edges)), (rows, cols)), shape=(len(nodes), len(nodes)))
    _, label = connected_components(adjacency, directed=True, connection="strong")
    groups: dict[int, list[str]] = {}
    for n in nodes:
        groups.setdefault(int(label[at[n]]), []).append(n)
    return sorted(c for c in groups.values() if len(c) > 1)


def top(mod: str) -> str:
    """The top-level module or package ``mod`` is in: benchmaker.summary.stage -> summary."""
    return mod.split(".")[1] if "." in mod else ""


def package_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
    """top-level module or package -> those it imports (the module graph, folded by :func:`top`)."""
    pg: dict[str, set[str]] = {top(m): set() for m in g}
    for a, targets in g.items():
        pg[top(a)] |= {top(b) for b in targets if top(b) != top(a)}
    return pg


def layer(mod: str) -> int:
    """0 for a foundation module; the layer of a package is named in LAYERS."""
    return LAYERS.get(top(mod), 0)


def test_every_package_is_in_a_layer():
    """A new package is placed on purpose: in LAYERS (a stage, the pages, ...), never by default in
    the foundation."""
    packages = {p.parent.name for p in PKG.glob("*/__init__.py")}
    assert packages - set(LAYERS) == set(), f"packages in no layer (add them to LAYERS): {packages - set(LAYERS)}"


def test_the_import_graph_has_no_cycle():
    g = import_graph()
    assert sum(map(len, g.values())) > 100
    assert not cycles(g), f"import cycles: {cycles(g)}"


def test_the_package_graph_has_no_cycle():
    """Two packages never import each other, even through other modules (summary's stage imports the
    evaluate report, which must then not import the summary package)."""
    pg = package_graph(import_graph())
    assert {"summary", "evaluate", "pages"} <= set(pg) and "pages" in pg["evaluate"]
    assert not cycles(pg), f"package cycles: {cycles(pg)}"


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


def test_the_check_finds_a_package_cycle(tmp_path, monkeypatch):
    """Two stage packages that use each other's modules, with no module cycle: a package cycle."""
    _package(tmp_path, monkeypatch, {
        "summary/__init__.py": "", "summary/stage.py": "from ..evaluate.report import section\n",
        "summary/report.py": "x = 1\n", "evaluate/__init__.py": "",
        "evaluate/report.py": "def section():\n    from ..summary.report import x\n"})
    g = import_graph()
    assert not cycles(g)
    assert cycles(package_graph(g)) == [["evaluate", "summary"]]


def test_the_check_finds_an_upward_import(tmp_path, monkeypatch):
    """A foundation module that imports a stage (even lazily) is an arrow up a layer."""
    _package(tmp_path, monkeypatch, {"config.py": "def check():\n    from .judge.rules import x\n",
                                     "judge/__init__.py": "", "judge/rules.py": "from ..config import check\nx = 1\n"})
    g = import_graph()
    assert {(a, b) for a, t in g.items() for b in t if layer(b) > layer(a)} == {
        ("benchmaker.config", "benchmaker.judge.rules")}


@functools.cache
def _defined(f: Path) -> set[str]:
    """The names a module defines at its top level (also under top-level if/try), and its submodules."""
    names: set[str] = {p.stem for p in f.parent.glob("*.py")} | {p.name for p in f.parent.iterdir() if p.is_dir()} \
        if f.name == "__init__.py" else set()

    def scan(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.If, ast.Try)):
                scan(node.body + node.orelse + getattr(node, "finalbody", [])
                     + [s for h in getattr(node, "handlers", []) for s in h.body])
    scan(ast.parse(f.read_text()).body)
    return names


def test_every_imported_name_exists():
    """``from benchmaker.x import name`` names something x defines, also in a lazy import inside a
    function, which no test may reach: deepen's dollar cap imported provider_runner from the module it
    had left (providers.engine) and every deepen job with an API judge stopped with ImportError."""
    files = {_name(f): f for f in PKG.rglob("*.py")}
    bad = []
    for mod, f in files.items():
        package = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
            if not isinstance(node, ast.ImportFrom) or not (node.level or (node.module or "").startswith("benchmaker")):
                continue
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
            if target not in files:
                bad.append(f"{mod}:{node.lineno}: no module {target}")
                continue
            missing = [a.name for a in node.names if a.name != "*" and a.name not in _defined(files[target])]
            bad += [f"{mod}:{node.lineno}: {target} has no {n}" for n in missing]
    assert not bad, bad


def test_the_providers_package_lists_its_lazy_names_alike():
    """providers/__init__ loads its shared names on first use (PEP 562): ``__all__`` (which ruff checks
    against the TYPE_CHECKING imports) and ``_HOMES`` (``_HOME``, name -> module, is what ``__getattr__`` reads)
    list the same names, and each resolves to the object of the module ``_HOMES`` names."""
    import importlib

    import benchmaker.providers as providers

    assert sorted(providers.__all__) == sorted(providers._HOME)
    for name, module in providers._HOME.items():
        home = importlib.import_module(f"benchmaker.providers.{module}")
        assert getattr(providers, name) is getattr(home, name), name

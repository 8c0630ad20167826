"""Stage versions: a digest of the code each stage actually runs, put into the rule's params.

A stage's module set is **computed**: the import closure inside ``benchmaker`` of its entry points
(``STAGE_ENTRIES``: the modules of the functions its rules run, as :mod:`benchmaker.stages` declares
them, plus the runner every script goes through). The closure follows

* ``import benchmaker.x`` / ``from benchmaker.x import y`` and relative imports (``from ..x import y``,
  ``from . import y``), at module level and inside functions (heavy modules are imported lazily);
* ``"benchmaker.x.y:Name"`` string literals, which is how adapter registries name the classes that
  ``benchmaker.adapters.load_adapter`` imports by name (so every registered adapter is part of its
  stage), and ``importlib.import_module("benchmaker.x")`` with a literal argument;
* the ``__init__.py`` of every package on the way (importing ``a.b`` runs ``a/__init__.py``);
* data files in the folders of the subpackages it imports (templates, e.g. an ``.html`` page).

``stage_version(stage)`` is the sha256 of the closure's relative paths and file contents, so editing
any module a stage imports reruns that stage (Snakemake's params trigger) and what follows, and
nothing else. Only files are read: importing this module never imports torch or a stage module, and
the whole package is parsed once per process (a few milliseconds).
"""

from __future__ import annotations

import ast
import hashlib
import re
from functools import lru_cache
from pathlib import Path

from .stages import STAGES

__all__ = ["stage_version", "stage_modules", "import_closure", "STAGE_ENTRIES", "STAGE_REGISTRIES", "COMMON_ENTRIES",
           "NOT_STAGE_CODE"]

_PKG = Path(__file__).resolve().parent
_ROOT = "benchmaker"

# stage -> the modules of the functions its rules run (benchmaker.stages.STAGES, the one declaration of
# the stages; tests/test_versions.py checks it against scripts/ and rules/*.smk)
STAGE_ENTRIES: dict[str, tuple[str, ...]] = {
    name: tuple(dict.fromkeys(target.partition(":")[0] for target in stage.rules.values()))
    for name, stage in STAGES.items()
}
# stage -> adapter registries outside its own package that it loads adapters from by name (pool
# deepening and the audit's second judge run whichever judge adapter is configured, through
# benchmaker.judge.base.get_judge)
STAGE_REGISTRIES: dict[str, tuple[str, ...]] = {
    "deepen_system": ("benchmaker.judge.base",),
    "audit_judge2": ("benchmaker.judge.base",),
}
# the stage registry and this module: the runner loads them to check a job's modules, and they decide no
# output, so they are in no stage's set (adding a stage, or editing this check, reruns nothing)
NOT_STAGE_CODE: frozenset[str] = frozenset({"benchmaker.versions", "benchmaker.stages"})
# every script runs its stage through the runner (how params reach run(...), logging)
COMMON_ENTRIES: tuple[str, ...] = ("benchmaker.runner",)

_TARGET = re.compile(r"""["'](benchmaker(?:\.\w+)+):\w+["']""")
_TARGET_LITERAL = re.compile(r"^(benchmaker(?:\.\w+)+):\w+$")
_IMPORT_CALL = re.compile(r"""(?:import_module|__import__)\(\s*["'](benchmaker(?:\.\w+)*)["']""")


# an import statement on its own line(s): `import a.b`, `from ..x import (y,\n z)`, at any indent
_IMPORT_STMT = re.compile(r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import[ \t]*(?:\([^)]*\)|[^\n]*)|import[ \t]+[^\n]*)",
                          re.MULTILINE)


def _import_tree(source: str, path: Path, top_only: bool = False) -> ast.Module:
    """An AST of the import statements of ``source`` (every nesting level, each parsed dedented).

    Parsing only the import lines is ~10x faster than parsing whole files; a line that is not valid
    Python on its own (an import inside a string, a backslash continuation) makes the whole file be
    parsed instead, which finds exactly the real import statements.
    """
    body: list[ast.stmt] = []
    for m in _IMPORT_STMT.finditer(source):
        if top_only and m.group(0)[:1] in (" ", "\t"):
            continue  # an import inside a function, class or block
        try:
            body.extend(ast.parse(m.group(0).strip()).body)
        except SyntaxError:
            tree = ast.parse(source, filename=str(path))
            return ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))],
                              type_ignores=[]) if top_only else tree
    return ast.Module(body=body, type_ignores=[])


def _statements(body: list[ast.stmt]):
    """Every statement, nested ones included (function and class bodies, if/try/with/for blocks).

    Import statements are statements, so expressions are never walked (5x faster than ast.walk).
    """
    for node in body:
        yield node
        for attr in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = getattr(node, attr, None)
            if isinstance(inner, list):
                yield from _statements(inner)


@lru_cache(maxsize=None)
def _module_file(name: str) -> Path | None:
    """The file of module ``name`` (``benchmaker.a.b``) inside this package, or None."""
    parts = name.split(".")
    if parts[0] != _ROOT:
        return None
    base = _PKG.joinpath(*parts[1:])
    for cand in (base / "__init__.py", base.with_suffix(".py")):
        if cand.is_file():
            return cand
    return None


@lru_cache(maxsize=None)
def _is_package(name: str) -> bool:
    f = _module_file(name)
    return f is not None and f.name == "__init__.py"


def _with_parents(name: str) -> list[str]:
    """``a.b.c`` -> ``a``, ``a.b``, ``a.b.c`` (importing a module runs its packages' __init__)."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


@lru_cache(maxsize=None)
def _direct_imports(name: str, top_only: bool = False) -> tuple[frozenset[str], frozenset[str]]:
    """(modules of this package that module ``name`` imports anywhere in its code -- only at module
    level with ``top_only`` --, modules it names as ``"module:Class"`` registry targets)."""
    path = _module_file(name)
    if path is None:
        return frozenset(), frozenset()
    source = path.read_text(encoding="utf-8")
    tree = _import_tree(source, path, top_only)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    targets: set[str] = set()

    def add(mod: str, into: set[str] = found) -> None:
        if _module_file(mod) is not None:
            into.update(m for m in _with_parents(mod) if _module_file(m) is not None)

    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == _ROOT:
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level > 1:
                    base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != _ROOT:
                continue
            add(mod)
            for alias in node.names:  # `from pkg import submodule`
                if alias.name != "*" and _is_package(mod):
                    sub = f"{mod}.{alias.name}"
                    if _module_file(sub) is not None:
                        add(sub)
    if ("import_module(" in source or "__import__(" in source) and _IMPORT_CALL.search(source) \
            or _TARGET.search(source):  # few files: parse them whole
        for node in ast.walk(ast.parse(source, filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                m = _TARGET_LITERAL.match(node.value)  # registries: "benchmaker.vision.clip:ClipAnnotator"
                if m:
                    add(m.group(1), targets)
            elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                  and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
                  and isinstance(node.args[0].value, str) and node.args[0].value.split(".")[0] == _ROOT):
                add(node.args[0].value)  # importlib.import_module("benchmaker.x")
    found.discard(name)
    return frozenset(found), frozenset(targets - {name})


def _in_scope(module: str, entries: tuple[str, ...]) -> bool:
    """Whether ``module`` belongs to an entry: the entry itself or, for a package entry, inside it."""
    return any(module == e or (_is_package(e) and module.startswith(e + ".")) for e in entries)


def import_closure(*entries: str, also: tuple[str, ...] = (), registries: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Every module of this package that running ``entries`` can import (sorted module names).

    Registry targets (``"module:Class"`` literals) are followed only from modules that belong to an
    entry (the stage's own package): the vision stage loads every vision adapter by name, but the
    judge, which imports ``vision.openai`` for shared helpers, never loads a vision adapter.
    ``also``: more starting modules whose registries are not followed (the runner); ``registries``:
    modules outside the entries' packages whose registry targets are followed (``STAGE_REGISTRIES``).
    """
    todo = [m for e in (*entries, *also) for m in _with_parents(e)]
    for e in (*entries, *also):
        if _module_file(e) is None:
            raise KeyError(f"no module {e!r} in {_PKG}")
    seen: set[str] = set()
    while todo:
        mod = todo.pop()
        if mod in seen or mod in NOT_STAGE_CODE or _module_file(mod) is None:
            continue
        seen.add(mod)
        # a package __init__ outside the stage's own packages runs as the parent of a module the stage
        # imports: its module-level imports run, the imports inside its functions belong to whoever
        # calls them (the judge imports vision.openai, never vision.run's shared-embedding path)
        imports, targets = _direct_imports(mod, _is_package(mod) and not _in_scope(mod, entries))
        todo.extend(imports - seen)
        if _in_scope(mod, entries) or mod in registries:
            todo.extend(targets - seen)
    return tuple(sorted(seen))


@lru_cache(maxsize=None)
def _package_data(package_dir: Path) -> tuple[Path, ...]:
    """Non-Python files shipped beside a package's modules (templates such as ``page.html``)."""
    return tuple(sorted(f for f in package_dir.iterdir()
                        if f.is_file() and f.suffix not in (".py", ".pyc", ".pyo") and not f.name.startswith(".")))


def stage_modules(stage: str) -> tuple[str, ...]:
    """The files (relative to ``src/benchmaker``) whose code stage ``stage`` runs, sorted: the
    modules of its import closure, plus the data files in the folder of each subpackage it imports
    (a template read with ``importlib.resources`` is code too). The top folder's own data files are
    not included: they are none of a stage's business (the config schema lives in ``schemas/``)."""
    if stage not in STAGE_ENTRIES:
        raise KeyError(f"unknown stage {stage!r} (known: {', '.join(STAGE_ENTRIES)})")
    mods = import_closure(*STAGE_ENTRIES[stage], also=COMMON_ENTRIES, registries=STAGE_REGISTRIES.get(stage, ()))
    files = {_module_file(m) for m in mods}
    for m in mods:
        if _is_package(m) and m != _ROOT:
            files.update(_package_data(_module_file(m).parent))
    return tuple(sorted(str(f.relative_to(_PKG)) for f in files))


@lru_cache(maxsize=None)
def stage_version(stage: str) -> str:
    """12 hex digits of sha256 over the paths and contents of ``stage_modules(stage)``."""
    h = hashlib.sha256()
    for rel in stage_modules(stage):
        h.update(rel.encode() + b"\0")
        h.update((_PKG / rel).read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:12]

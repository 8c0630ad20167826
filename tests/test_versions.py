"""Stage versions come from each stage's real import closure (benchmaker/versions.py).

A test here fails when a stage's module set and its real imports disagree: the entries against the
scripts and rules, the fast import scan against a full parse of every file, the closure against the
modules a fresh interpreter really loads, and the version against edits of single modules.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmaker import versions
from benchmaker.stages import STAGES, rule_target
from benchmaker.versions import STAGE_ENTRIES, stage_modules

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "benchmaker"


def _rules() -> dict[str, dict]:
    """rule name -> {"script": scripts/<x>.py name or None, "stage": stage_version argument or None}."""
    out = {}
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        text = smk.read_text()
        starts = [(m.start(), m.group(1)) for m in re.finditer(r"^\s*rule (\w+):", text, re.MULTILINE)]
        for i, (pos, name) in enumerate(starts):
            block = text[pos: starts[i + 1][0] if i + 1 < len(starts) else len(text)]
            script = re.search(r'"\.\./scripts/(\w+\.py)"', block)
            stage = re.search(r'stage_version\("(\w+)"\)', block)
            out[name] = {"script": script and script.group(1), "stage": stage and stage.group(1)}
        # `use rule a as b with:` makes rule b with a's script and params (unless the block overrides them)
        for m in re.finditer(r"^use rule (\w+) as (\w+)(?: with:\n((?:[ \t]+.*\n|\n)*))?", text, re.MULTILINE):
            body = m.group(3) or ""
            script = re.search(r'"\.\./scripts/(\w+\.py)"', body)
            stage = re.search(r'stage_version\("(\w+)"\)', body)
            out[m.group(2)] = {"script": script.group(1) if script else out[m.group(1)]["script"],
                               "stage": stage.group(1) if stage else out[m.group(1)]["stage"]}
    return out


def _target(rule: str, script: str) -> str:
    """The ``module:function`` the job of ``rule`` runs: for the shared scripts/stage.py the function
    benchmaker.stages declares for the rule, else its own script's run_stage target."""
    if script == "stage.py":
        return rule_target(rule)
    m = re.search(r'run_stage\(snakemake,\s*"([\w.]+:\w+)"', (ROOT / "scripts" / script).read_text())
    assert m, script
    return m.group(1)


def test_every_rule_is_declared_under_its_stage():
    """benchmaker.stages is the one declaration of the stages: every rule with a script is in it, under
    the stage its version param names, and a rule with its own script runs the declared function."""
    rules = {name: rule for name, rule in _rules().items() if rule["script"]}
    declared = {rule: (name, target) for name, stage in STAGES.items() for rule, target in stage.rules.items()}
    assert set(rules) == set(declared)
    for name, rule in rules.items():
        stage, target = declared[name]
        assert _target(name, rule["script"]) == target, name
        if rule["stage"] is None:
            assert name == "upload", f"rule {name} has no version=stage_version(...) param"
        else:
            assert rule["stage"] == stage, f"rule {name}: stage_version({rule['stage']!r}) but STAGES says {stage!r}"
    scripts = {p.name for p in (ROOT / "scripts").glob("*.py")} - {"benchmaker_bridge.py"}
    assert scripts == {r["script"] for r in rules.values()}


def test_stage_entries_are_the_modules_of_the_declared_functions():
    assert set(STAGE_ENTRIES) == set(STAGES)
    for name, stage in STAGES.items():
        assert set(STAGE_ENTRIES[name]) == {t.partition(":")[0] for t in stage.rules.values()}
    # the registry and the version check decide no output: in no stage's set (adding a stage reruns nothing)
    assert not [s for s in STAGE_ENTRIES if {"stages.py", "versions.py"} & set(stage_modules(s))]


def _full_parse_imports(name: str) -> set[str]:
    """The reference: every import statement of a whole-file parse, resolved like versions.py does."""
    path = versions._module_file(name)
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def add(mod):
        if versions._module_file(mod) is not None:
            found.update(m for m in versions._with_parents(mod) if versions._module_file(m) is not None)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
            add(mod)
            for a in node.names:
                add(f"{mod}.{a.name}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            m = re.fullmatch(r"(benchmaker(?:\.\w+)+):\w+", node.value)
            if m:
                add(m.group(1))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")):
            add(node.args[0].value)
    found.discard(name)
    return found


def _all_modules() -> list[str]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out.append(".".join(parts))
    return out


def test_fast_import_scan_equals_a_full_parse_of_every_module():
    for name in _all_modules():
        imports, targets = versions._direct_imports(name)
        assert imports | targets == _full_parse_imports(name), name


def test_known_dependencies_are_in_the_module_sets():
    assert "merge.py" in stage_modules("merge")
    assert "sharding.py" in stage_modules("preprocess")
    judge = stage_modules("judge")
    # the judge shares the provider engine with vision, never vision's modules (providers/records.py)
    assert not [m for m in judge if m.startswith("vision/")], judge
    assert "providers/records.py" in judge and "providers/records.py" in stage_modules("vision")
    # registry-loaded adapters belong to their own stage, not to a stage that imports the package
    vision = stage_modules("vision")
    assert {"vision/clip.py", "vision/metadata.py", "vision/gemini.py", "similarity/model.py"} <= set(vision)
    assert "vision/clip.py" not in judge and "similarity/model.py" not in judge
    assert {"judge/rules.py", "judge/gemini.py"} <= set(judge)
    # the audit's second judge runs the judge with any adapter: an edit of an adapter, its prompts or the
    # provider engine reruns it (its version missed them all, and the job warned so at every run)
    assert {"judge/rules.py", "judge/openai.py", "judge/gemini.py", "judge/prompts.py",
            "providers/transport.py"} <= set(stage_modules("audit_judge2"))
    # non-ML stages never reach the torch-importing modules
    for stage in ("preprocess", "merge", "plan", "summary", "export"):
        assert not {"similarity/model.py", "_tvshim.py"} & set(stage_modules(stage)), stage


def _versions_in(pkg: Path) -> dict[str, str]:
    """stage_version of every stage computed over a copy of the package at ``pkg`` (a fresh interpreter)."""
    code = ("import json; from benchmaker.versions import STAGE_ENTRIES, stage_version; "
            "print(json.dumps({s: stage_version(s) for s in STAGE_ENTRIES}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": str(pkg.parent), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("edited, must_change, must_not_change", [
    ("merge.py", {"merge"}, {"plan", "judge", "preprocess", "embed"}),
    ("sharding.py", {"preprocess"}, {"plan", "merge", "embed"}),
    ("vision/prompts.py", {"vision"}, {"judge", "plan", "embed", "summary"}),
    ("providers/records.py", {"vision", "judge"}, {"plan", "embed", "summary"}),
    ("similarity/model.py", {"vision", "embed", "score"}, {"judge", "plan", "summary", "export"}),
    ("summary/stats.py", {"summary", "export"}, {"plan", "judge", "vision"}),
    # the stage's own module: the stages that use the summary's report helpers do not import it
    ("summary/stage.py", {"summary"}, {"evaluate", "audit_labelling", "audit_report", "deepen", "plan"}),
])
def test_editing_a_module_changes_exactly_the_stages_that_import_it(tmp_path, edited, must_change,
                                                                    must_not_change):
    pkg = shutil.copytree(PKG, tmp_path / "benchmaker", ignore=shutil.ignore_patterns("__pycache__"))
    before = _versions_in(pkg)
    with open(pkg / edited, "a") as fh:
        fh.write("\n# an edit\n")
    after = _versions_in(pkg)
    changed = {s for s in before if before[s] != after[s]}
    assert must_change <= changed and not (must_not_change & changed), changed
    assert changed == {s for s in STAGE_ENTRIES if edited in stage_modules(s)}


def test_a_data_file_in_a_package_is_part_of_the_stages_that_import_it(tmp_path):
    pkg = shutil.copytree(PKG, tmp_path / "benchmaker", ignore=shutil.ignore_patterns("__pycache__"))
    before = _versions_in(pkg)
    (pkg / "summary" / "template.html").write_text("<p>a template</p>")
    after = _versions_in(pkg)
    changed = {s for s in before if before[s] != after[s]}
    # the stages that import the summary package (the audit report renders with its charts)
    assert {"summary", "export", "upload"} <= changed, changed
    assert changed == {s for s in STAGE_ENTRIES if "summary/__init__.py" in stage_modules(s)}, changed
    assert not {"preprocess", "vision", "plan", "judge", "embed", "score"} & changed, changed
    (pkg / "schemas" / "other.yaml").write_text("a: 1\n")  # not a package: no stage reads it
    assert _versions_in(pkg) == after


def test_closure_covers_what_a_fresh_interpreter_loads():
    """Import each stage's entries and instantiate-free load every adapter it registers; every
    benchmaker module then in sys.modules must be in the stage's module set."""
    code = r"""
import importlib, json, sys
from benchmaker.versions import STAGE_ENTRIES, COMMON_ENTRIES
stage = sys.argv[1]
for m in (*STAGE_ENTRIES[stage], *COMMON_ENTRIES):
    importlib.import_module(m)
for reg in ("benchmaker.vision.base", "benchmaker.judge.base"):
    if reg.rsplit(".", 1)[0] in STAGE_ENTRIES[stage]:
        for target in importlib.import_module(reg).ADAPTERS.values():
            importlib.import_module(target.partition(":")[0])
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "benchmaker")))
"""
    for stage in STAGE_ENTRIES:
        r = subprocess.run([sys.executable, "-c", code, stage], capture_output=True, text=True,
                           env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
        assert r.returncode == 0, r.stderr[-3000:]
        loaded = set(json.loads(r.stdout.strip().splitlines()[-1])) - {"benchmaker.versions", "benchmaker.stages"}
        files = {str(versions._module_file(m).relative_to(PKG)) for m in loaded}
        assert files <= set(stage_modules(stage)), (stage, files - set(stage_modules(stage)))


def test_fast_and_reads_files_only():
    code = ("import sys, time; t = time.perf_counter(); from benchmaker.versions import stage_version, "
            "STAGE_ENTRIES; [stage_version(s) for s in STAGE_ENTRIES]; "
            "print(time.perf_counter() - t, 'torch' in sys.modules, "
            "sorted(m for m in sys.modules if m.startswith('benchmaker')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    seconds, torch_loaded, mods = r.stdout.split(" ", 2)
    assert torch_loaded == "False" and mods.strip() == "['benchmaker', 'benchmaker.stages', 'benchmaker.versions']"
    print(f"all stage versions in {float(seconds) * 1000:.0f} ms")

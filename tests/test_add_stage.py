"""Adding a stage touches four places (docs/architecture.md, "Adding a stage"): its function, its rule
(a rule file and its ``include:``), one entry in ``benchmaker/stages.py`` and its settings in
``config/schema.yaml``. A toy stage is added to a copy of the workflow in exactly those places and run
for real: it gets its stage version, the shared script runs its function, its settings reach it with the
schema's defaults, a runtime knob reruns nothing and a setting that decides its output reruns it alone.
Every other registry is derived: no other stage's version changes by the addition.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import support

ROOT = support.ROOT

TOY_MODULE = '''"""A toy stage: writes its settings."""

import json
from pathlib import Path


def run(*, out: str, settings: dict, workers: int = 1) -> None:
    Path(out).write_text(json.dumps(settings, sort_keys=True) + "\\n")
'''
TOY_RULE = '''
rule toy:
    output:
        out=f"{RESULTS}/toy.json",
    log:
        f"{LOGS}/toy.log",
    params:
        settings=output_settings(config["toy"], "toy"),
        workers=not_a_trigger(config["toy"]["workers"]),
        version=stage_version("toy"),
    script:
        "../scripts/stage.py"
'''
TOY_SCHEMA = '''  toy:
    type: object
    additionalProperties: false
    default: {}
    properties:
      greeting: {type: string, default: hello, description: "decides the toy's output"}
      workers: {type: integer, minimum: 1, default: 2, description: "a runtime knob", x-runtime: true}
'''


def _add_toy_stage(root: Path) -> list[str]:
    """The four places, edited as a person would; returns the files touched."""
    (root / "src/benchmaker/toy.py").write_text(TOY_MODULE)                          # 1. the function
    (root / "rules/toy.smk").write_text(TOY_RULE.lstrip("\n"))                       # 2. the rule ...
    with open(root / "Snakefile", "a") as fh:                                        # ... and its include
        fh.write('\n\ninclude: "rules/toy.smk"\n')
    stages = root / "src/benchmaker/stages.py"                                       # 3. its declaration
    text = stages.read_text()
    anchor = "STAGES: dict[str, dict[str, str]] = {\n"
    assert anchor in text
    stages.write_text(text.replace(anchor, anchor + '    "toy": {"toy": "benchmaker.toy:run"},\n'))
    schema = root / "config/schema.yaml"                                             # 4. its settings
    text = schema.read_text()
    assert "\nproperties:\n" in text
    schema.write_text(text.replace("\nproperties:\n", "\nproperties:\n" + TOY_SCHEMA, 1))
    return ["src/benchmaker/toy.py", "rules/toy.smk", "Snakefile", "src/benchmaker/stages.py", "config/schema.yaml"]


def _versions(root: Path) -> dict[str, str]:
    code = ("import json; from benchmaker.versions import STAGE_ENTRIES, stage_version; "
            "print(json.dumps({s: stage_version(s) for s in STAGE_ENTRIES}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": str(root / "src"), "PATH": os.environ["PATH"]})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _snakemake(root: Path, workdir: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(root / "src"),
           "PATH": support.no_slurm_path()}
    cmd = [sys.executable, "-m", "snakemake", "-s", str(root / "Snakefile"), "-d", str(workdir),
           "--configfile", str(config), "--workflow-profile", "none", "--cores", "1", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def test_a_new_stage_takes_four_places(tmp_path, tiny_cfg):
    root = tmp_path / "checkout"
    for part in ("Snakefile", "rules", "scripts", "config", "src", "envs", "profiles"):
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, root / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            root.mkdir(exist_ok=True)
            shutil.copy2(src, root / part)
    before = _versions(root)
    touched = _add_toy_stage(root)
    assert len(touched) == 5  # four places: the rule file and its include are one
    after = _versions(root)
    assert after.pop("toy") and after == before, "adding a stage changed other stages' versions"

    work = tmp_path / "work"
    work.mkdir()
    cfg = support.write_config(tmp_path / "c.yaml", {**tiny_cfg, "toy": {"workers": 3}})
    target = str(Path(tiny_cfg["paths"]["results"]) / "tiny" / "toy.json")
    r = _snakemake(root, work, cfg, target)
    assert r.returncode == 0, r.stderr[-3000:]
    out = next(Path(tiny_cfg["paths"]["results"]).rglob("toy.json"))
    assert json.loads(out.read_text()) == {"greeting": "hello"}  # the schema's default, no runtime knob
    # a runtime knob plans nothing; the setting that decides the output plans the toy alone
    cfg = support.write_config(tmp_path / "c.yaml", {**tiny_cfg, "toy": {"workers": 7}})
    r = _snakemake(root, work, cfg, str(out), "-n")
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, r.stdout[-2000:]
    cfg = support.write_config(tmp_path / "c.yaml", {**tiny_cfg, "toy": {"greeting": "hi"}})
    r = _snakemake(root, work, cfg, str(out), "-n")
    assert r.returncode == 0, r.stderr[-3000:]
    assert support.job_stats(r.stdout + r.stderr) == {"toy": 1}, r.stdout[-2000:]

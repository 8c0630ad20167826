"""Adding a stage touches four places (docs/architecture.md, "Adding a stage", names their files; this
test touches exactly those): its module with its function (and the module's line in the library layout),
its rule (a rule file and its ``include:``), one entry in ``benchmaker/stages.py`` and its settings in
``config/schema.yaml``. A toy stage that loses an item, pays for a request, needs memory by the size of
its input and runs a model on a GPU is added to a copy of the workflow in exactly those places and run
for real: it gets its stage version, the shared script runs its function, its settings reach it with
the schema's defaults, its job asks for the memory its declared model gives for its input's size and
for a GPU, its losses and its cost appear in the summary's totals and its losses table (the entry in
stages.py names its files), a runtime knob reruns nothing and a setting that decides its output reruns
it (and the summary that counts it) alone. Every other registry is derived: no other stage's version
changes by the addition, and the checks that read the registries pass on the copy with nothing more:
the estimate's (a stage that pays is priced or its declaration says why not), tests/test_triggers.py's
(the toy's settings decide the toy's rules, from its declaration) and the library layout's; the toy
writes no new file kind (no ``formats.Spec``).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import support

ROOT = support.ROOT

TOY_MODULE = '''"""A toy stage: writes its settings, loses one image and pays for one request."""

import json
from pathlib import Path

import polars as pl

from benchmaker.formats import write_table
from benchmaker.losses import Losses


def run(*, images: str, out: str, losses: str, costs: str, settings: dict, workers: int = 1) -> None:
    Path(out).write_text(json.dumps(settings, sort_keys=True) + "\\n")
    lost = Losses("toy")
    lost.add("image", "toy-image", "toy_reason", "the toy lost it")
    lost.write(losses)
    paid = {"stage": "toy", "item_id": "toy-query", "model": "toy-model", "mode": "sync", "input_tokens": 10,
            "cached_input_tokens": 0, "output_tokens": 5, "reasoning_tokens": 0, "cost_usd": 0.25}
    write_table(pl.DataFrame([paid]), "costs", costs)
'''
TOY_RULE = '''
rule toy:
    input:
        images=f"{RESULTS}/images.jsonl",
    output:
        out=f"{RESULTS}/toy.json",
        losses=f"{RESULTS}/losses/toy.jsonl",
        costs=f"{RESULTS}/costs/toy.jsonl",
    log:
        f"{LOGS}/toy.log",
    resources:
        mem_mb=RES.mem_mb("toy"),
        **gpu_resources(needs_gpu("toy")),
    params:
        settings=output_settings(config["toy"], "toy"),
        workers=not_a_trigger(config["toy"]["workers"]),
        version=stage_version("toy"),
    script:
        "../scripts/stage.py"
'''
TOY_MB_PER_MB = 50_000.0  # MB of memory per MB of images.jsonl: the tiny corpus's file asks for more than the minimum
TOY_SCHEMA = '''  toy:
    type: object
    additionalProperties: false
    default: {}
    properties:
      greeting: {type: string, default: hello, description: "decides the toy's output"}
      workers: {type: integer, minimum: 1, default: 2, description: "a runtime knob", x-runtime: true}
'''


def _add_toy_stage(root: Path) -> dict[int, list[str]]:
    """The four places, edited as a person would; returns the files touched in each."""
    (root / "src/benchmaker/toy.py").write_text(TOY_MODULE)                          # 1. the function ...
    layout = root / "docs/architecture.md"                                            # ... its module's line
    text = layout.read_text()
    anchor = "## Library layout\n\n```\n"
    assert anchor in text
    layout.write_text(text.replace(anchor, anchor + "toy.py           the toy stage (tests/test_add_stage.py)\n"))
    (root / "rules/toy.smk").write_text(TOY_RULE.lstrip("\n"))                       # 2. the rule ...
    with open(root / "Snakefile", "a") as fh:                                        # ... and its include
        fh.write('\n\ninclude: "rules/toy.smk"\n')
    stages = root / "src/benchmaker/stages.py"                                       # 3. its declaration
    text = stages.read_text()
    anchor = "STAGES: dict[str, Stage] = {\n"
    assert anchor in text
    stages.write_text(text.replace(anchor, anchor + '    "toy": Stage({"toy": "benchmaker.toy:run"}, '
                                   'losses="losses/toy.jsonl", costs="costs/toy.jsonl", '
                                   f'memory={{"toy": Memory(PY_MB, {{"images": {TOY_MB_PER_MB}}})}}, '
                                   'gpu={"toy": True}, not_estimated="a toy: its one request is not predicted"),\n'))
    schema = root / "config/schema.yaml"                                             # 4. its settings
    text = schema.read_text()
    assert "\nproperties:\n" in text
    schema.write_text(text.replace("\nproperties:\n", "\nproperties:\n" + TOY_SCHEMA, 1))
    return {1: ["src/benchmaker/toy.py", "docs/architecture.md"], 2: ["rules/toy.smk", "Snakefile"],
            3: ["src/benchmaker/stages.py"], 4: ["config/schema.yaml"]}


def _documented_places() -> dict[int, list[str]]:
    """The files each place of docs/architecture.md's "Adding a stage" names: ``N. **...** (`file`, ...)``."""
    text = (ROOT / "docs/architecture.md").read_text().split("## Adding a stage", 1)[1].split("\n## ", 1)[0]
    return {int(n): re.findall(r"`([^`]+)`", files)
            for n, files in re.findall(r"^(\d)\. \*\*[^*]+\*\* \(([^)]*)\)", text, re.M)}


def _registries(root: Path) -> subprocess.Popen:
    """In the copy: the stage versions, the paid stages that the estimate neither prices nor says why not,
    and the rules tests/test_triggers.py expects each toy setting to decide (a process: it runs beside the
    workflow's; :func:`_answer`)."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import test_triggers; "
            "from benchmaker.versions import STAGE_ENTRIES, stage_version; "
            "from benchmaker.estimate import NOT_ESTIMATED, PAID; from benchmaker.stages import STAGES; "
            "from benchmaker.triggers import RUNTIME, setting_paths; "
            "print(json.dumps({'versions': {s: stage_version(s) for s in STAGE_ENTRIES}, "
            "'unpriced': sorted(n for n, s in STAGES.items() if s.costs and n not in {**PAID, **NOT_ESTIMATED}), "
            "'rules': {p: sorted(test_triggers.direct_rules(p)) for p, node in setting_paths() "
            "          if p.startswith('toy.') and not node.get(RUNTIME)}}))")
    return subprocess.Popen([sys.executable, "-c", code, str(ROOT / "tests")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={"PYTHONPATH": str(root / "src"), "PATH": os.environ["PATH"]})


def _answer(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out)


def _layout_misses(root: Path) -> set[str]:
    """The copy's top-level modules that its docs/architecture.md library layout does not name."""
    block = (root / "docs/architecture.md").read_text().split("## Library layout", 1)[1].split("```", 2)[1]
    return {p.name for p in (root / "src/benchmaker").glob("*.py")} - {"__init__.py"} - set(
        re.findall(r"^(\S+)", block, re.M))


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


@pytest.mark.slow
def test_a_new_stage_takes_four_places(tmp_path, tiny_cfg):
    root = tmp_path / "checkout"
    for part in ("Snakefile", "rules", "scripts", "config", "src", "envs", "profiles", "docs/architecture.md"):
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, root / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            (root / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / part)
    before = _versions(root)
    touched = _add_toy_stage(root)
    assert touched == _documented_places(), "the places docs/architecture.md names are not the ones touched"
    assert len(touched) == 4
    assert not _layout_misses(root)
    registries = _registries(root)

    work = tmp_path / "work"
    work.mkdir()
    # one shard: the toy reads the merged images.jsonl, and the summary counts what every stage lost and
    # paid whatever the shards (tests/test_change_detection.py is about shards)
    tiny_cfg = {**tiny_cfg, "n_shards": 1}
    cfg = support.write_config(tmp_path / "c.yaml", {**tiny_cfg, "toy": {"workers": 3}})
    results = Path(tiny_cfg["paths"]["results"]) / "tiny"
    r = _snakemake(root, work, cfg, str(results / "summary"))
    after = _answer(registries)
    assert after["versions"].pop("toy") and after["versions"] == before, "adding a stage changed other versions"
    assert after["unpriced"] == [] and after["rules"] == {"toy.greeting": ["toy"]}, after
    assert r.returncode == 0, r.stderr[-3000:]
    out = results / "toy.json"
    assert json.loads(out.read_text()) == {"greeting": "hello"}  # the schema's default, no runtime knob
    # its job asked for the memory of its declared model at its input's size, and for a GPU
    size_mb = (results / "images.jsonl").stat().st_size / 1e6
    want = int(math.ceil(max(500, 250 + TOY_MB_PER_MB * size_mb) / 100) * 100)
    assert want > 500, size_mb
    job = r.stderr.split("rule toy:", 1)[1].split("\n\n", 1)[0]
    resources = dict(kv.split("=", 1) for kv in re.search(r"resources: (.*)", job).group(1).split(", "))
    assert resources["mem_mb"] == str(want) and resources["gpu"] == "1", job
    # the summary counted the toy's losses and its spend, beside the other stages'
    numbers = json.loads((results / "summary" / "summary.json").read_text())
    assert numbers["losses"]["toy"] == {"toy_reason": 1}, numbers["losses"]
    assert numbers["costs"]["by_stage"]["toy"]["cost_usd"] == 0.25, numbers["costs"]
    assert numbers["costs"]["cost_usd"] == 0.25 and numbers["costs"]["requests"] == 1   # the offline stages pay 0
    table = (results / "summary" / "losses_by_stage.csv").read_text()
    assert "toy,image,toy_reason,1" in table, table
    # a runtime knob plans nothing; the setting that decides the output plans the toy alone
    cfg = support.write_config(tmp_path / "c.yaml", {**tiny_cfg, "toy": {"workers": 7}})
    r = _snakemake(root, work, cfg, str(out), "-n")
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, r.stdout[-2000:]
    cfg = support.write_config(tmp_path / "c.yaml", {**tiny_cfg, "toy": {"greeting": "hi"}})
    r = _snakemake(root, work, cfg, str(out), "-n")
    assert r.returncode == 0, r.stderr[-3000:]
    assert support.job_stats(r.stdout + r.stderr) == {"toy": 1}, r.stdout[-2000:]
    r = _snakemake(root, work, cfg, str(results / "summary"), "-n")
    assert r.returncode == 0, r.stderr[-3000:]
    assert support.job_stats(r.stdout + r.stderr) == {"toy": 1, "summary": 1}, r.stdout[-2000:]


def test_counted_files_follow_the_declaration_in_its_order():
    """loss_files()/cost_files() (rules/common.smk) expand each stage's declared file over the items the
    report includes, in the order of benchmaker.stages.STAGES; a set of items nobody names is an error."""
    import pytest

    from benchmaker import stages

    items = {"shard": ["00000", "00001"], "evaluate_system": ["bm25"], "judge2": [], "deepen_system": []}
    assert stages.counted_files("costs", "R", items) == [
        "R/costs/vision/00000.jsonl", "R/costs/vision/00001.jsonl", "R/costs/queries.jsonl", "R/costs/judge.jsonl",
        "R/costs/evaluate/bm25.jsonl"]
    assert stages.counted_files("losses", "R", items) == [
        "R/losses/vision.jsonl", "R/losses/plan.jsonl", "R/losses/queries.jsonl", "R/losses/judge.jsonl",
        "R/losses/similarity.jsonl",
        "R/losses/evaluate/bm25.jsonl"]
    # every permanent loss is counted: the evaluated systems' and the second judge's too, each under a
    # stage name of its own (the rows of a system say "evaluate", the second judge's "judge")
    items = {**items, "evaluate_system": ["bm25", "clip"], "judge2": ["loose"]}
    files = stages.counted_files("losses", "R", items)
    assert files[-3:] == ["R/losses/evaluate/bm25.jsonl", "R/losses/evaluate/clip.jsonl",
                          "R/audit/judge2/loose/losses.jsonl"]
    assert stages.counted_stages("losses", items) == [None] * 5 + ["evaluate: bm25", "evaluate: clip", "audit_judge2"]
    assert stages.outside_stages(items) == ["evaluate: bm25", "evaluate: clip", "audit_judge2"]
    # costs: every file under a name (its stage's, or the system's: two rerankers are two rows), a deepened
    # system's under its own name too, but its losses are the benchmark's (not outside)
    items = {**items, "deepen_system": ["bm25"]}
    assert stages.counted_stages("costs", items) == ["vision", "vision", "queries", "judge", "evaluate: bm25",
                                                     "evaluate: clip", "audit_judge2", "deepen: bm25"]
    assert stages.counted_stages("losses", items)[-1] == "deepen: bm25"
    assert "deepen: bm25" not in stages.outside_stages(items)
    # a stage whose losses are not the benchmark's names them (else its rows would count as the benchmark's)
    assert all(s.counted_as for s in stages.STAGES.values() if s.outside_benchmark)
    toy = {"toy": stages.Stage({"toy": "benchmaker.toy:run"}, costs="costs/toy/{page}.jsonl")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stages, "STAGES", toy)
        with pytest.raises(KeyError, match=r"stage 'toy': its costs file .* has \{page\}.*counted_items"):
            stages.counted_files("costs", "R", items)

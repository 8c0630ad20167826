"""Rule params are checked: a name a stage function does not accept is an error naming the rule.

Unit tests of ``benchmaker.runner`` with a stand-in ``snakemake`` object, and a check of every job of
the real workflow (built with Snakemake's API for each adapter combination) against the signature of
the function its script runs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import support

from benchmaker.runner import TRIGGER_ONLY, ParamError, check_kwargs, run_stage

ROOT = Path(__file__).resolve().parents[1]


class Named(dict):
    """A Snakemake Namedlist stand-in: named entries as attributes plus ``_names``."""

    def __init__(self, **kw):
        super().__init__(kw)
        self._names = {k: None for k in kw}

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __len__(self):
        return len(self._names)


def smk(rule="plan", input=None, output=None, params=None, log=None):
    return SimpleNamespace(rule=rule, input=Named(**(input or {})), output=Named(**(output or {})),
                           params=Named(**(params or {})), log=[str(log)] if log else [], threads=3,
                           wildcards=Named())


def stage(*, images: str, out: str, cache_dir: str | None = None, threads: int = 1) -> dict:
    return {"images": images, "out": out, "cache_dir": cache_dir, "threads": threads}


def stage_without_threads(*, images: str, out: str) -> dict:
    return {"images": images, "out": out}


def test_named_inputs_outputs_params_and_threads_reach_the_stage(tmp_path):
    got = run_stage(smk(input={"images": "a.jsonl"}, output={"out": "b.jsonl"},
                        params={"cache_dir": "c", "version": "abc123"}, log=tmp_path / "x.log"), stage)
    assert got == {"images": "a.jsonl", "out": "b.jsonl", "cache_dir": "c", "threads": 3}


def test_trigger_only_params_and_threads_are_dropped_when_not_accepted():
    assert "version" in TRIGGER_ONLY
    got = run_stage(smk(input={"images": "a"}, output={"out": "b"}, params={"version": "abc"}),
                    stage_without_threads)
    assert got == {"images": "a", "out": "b"}


def test_misspelled_param_is_an_error_naming_rule_and_param(tmp_path):
    log = tmp_path / "plan.log"
    with pytest.raises(ParamError) as exc:
        run_stage(smk(rule="embed_images", input={"images": "a"}, output={"out": "b"},
                      params={"cache_dirr": "c"}, log=log), stage)
    msg = str(exc.value)
    assert "rule embed_images" in msg and "param 'cache_dirr'" in msg and "cache_dir" in msg
    assert "cache_dirr" in log.read_text()  # the traceback reaches the rule's log


def test_unknown_input_or_output_name_is_named_as_such():
    with pytest.raises(ParamError, match=r"rule r: .* input 'imagez'"):
        check_kwargs("r", stage, {"imagez": "a", "out": "b"}, {"imagez": "input", "out": "output"})
    with pytest.raises(ParamError, match=r"needs 'images'"):
        check_kwargs("r", stage, {"out": "b"})


def test_name_used_twice_or_reserved_is_an_error():
    with pytest.raises(ParamError, match="used twice"):
        run_stage(smk(input={"images": "a"}, output={"images": "b"}), stage)
    with pytest.raises(ParamError, match="threads"):
        run_stage(smk(input={"images": "a"}, output={"out": "b"}, params={"threads": 4}), stage)


def test_every_script_bridges_through_one_module():
    """No rule script repeats the sys.path ceremony: each imports run_stage from scripts/benchmaker_bridge.py."""
    for script in sorted((ROOT / "scripts").glob("*.py")):
        if script.name == "benchmaker_bridge.py":
            continue
        text = script.read_text()
        assert re.search(r"^from benchmaker_bridge import .*\brun_stage\b", text, re.MULTILINE), script.name
        assert "sys.path" not in text and "import benchmaker" not in text \
            and "from benchmaker." not in text, script.name


def test_stage_entry_points_take_no_catch_all_kwargs():
    """Every function a rule runs (benchmaker.stages.STAGES) has an explicit signature (no **kwargs)."""
    import importlib
    import inspect

    from benchmaker.stages import STAGES

    for rule, target in ((r, t) for stage in STAGES.values() for r, t in stage.rules.items()):
        module, _, name = target.partition(":")
        func = getattr(importlib.import_module(module), name)
        kinds = {p.kind for p in inspect.signature(func).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds, f"rule {rule}: {target} takes **kwargs"


PROBE = r"""
import importlib, json, re, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import (ConfigSettings, DAGSettings, OutputSettings, ResourceSettings,
                                      StorageSettings)
from benchmaker.runner import check_kwargs
from benchmaker.stages import rule_target

root, workdir, configs = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
checked = {}
for cfg in configs:
    with SnakemakeApi(OutputSettings(quiet=None)) as api:
        wf = api.workflow(resource_settings=ResourceSettings(cores=1),
                          config_settings=ConfigSettings(configfiles=[Path(cfg)]),
                          storage_settings=StorageSettings(), snakefile=root / "Snakefile", workdir=workdir)
        wf.dag(DAGSettings(targets={"all", "upload"})).execute_workflow(executor="local",
                                                                         pseudo_executor="dryrun")
        for job in wf._workflow.dag.jobs:
            script = job.rule.script
            if not script:
                continue
            # the function the rule's job runs: the one its own script names, else its declared one
            m = re.search(r'run_stage\(snakemake,\s*"([\w.]+):(\w+)"', (root / "rules" / script).resolve().read_text())
            module, func = m.groups() if m else rule_target(job.rule.name).split(":")
            f = getattr(importlib.import_module(module), func)
            names, kinds = {}, {}
            for kind, part in (("input", job.input), ("output", job.output), ("param", job.params)):
                for n in part._names:
                    names[n] = None
                    kinds[n] = kind
            names["threads"] = 1
            check_kwargs(job.rule.name, f, names, kinds)
            checked[job.rule.name] = sorted(set(checked.get(job.rule.name, [])) | set(names))
print(json.dumps(checked))
"""


def test_every_rule_of_every_adapter_passes_only_accepted_names(tmp_path, tiny_corpus, tiny_clip):
    meta = tmp_path / "meta.jsonl"
    meta.write_text("")
    pools, reuse = tmp_path / "pools.jsonl", tmp_path / "reuse.jsonl"   # fixed pools, reused judge labels
    pools.write_text("")
    reuse.write_text("")
    llm = {"base_url": "http://127.0.0.1:9/v1", "model": "gpt-5-mini"}
    variants = {
        "clip": {},
        "batch": {"vision": {"adapter": "openai", "openai": {**llm, "mode": "batch"}},
                  "judge": {"adapter": "openai", "openai": {**llm, "mode": "batch"}},
                  "paths": {"pools_file": str(pools), "judge_reuse_file": str(reuse)}},
        "sync": {"vision": {"adapter": "gemini", "gemini": {"mode": "sync"}},
                 "judge": {"adapter": "openai", "openai": {**llm, "mode": "sync"}},
                 "paths": {"judge_reuse_file": str(reuse)}},
        "metadata": {"vision": {"adapter": "metadata"}, "paths": {"metadata_jsonl": str(meta)}},
    }
    configs = [str(support.write_config(tmp_path / f"{name}.yaml",
                                        support.tiny_config(tmp_path, tiny_corpus, tiny_clip, **over)))
               for name, over in variants.items()]
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": support.no_slurm_path(), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", PROBE, str(ROOT), str(tmp_path), json.dumps(configs)],
                       capture_output=True, text=True, env={**__import__("os").environ, **env}, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    checked = json.loads(r.stdout.strip().splitlines()[-1])
    expected = {"preprocess", "vision", "vision_build", "vision_submit", "vision_collect", "merge_annotations",
                "plan", "judge", "judge_build", "judge_submit", "judge_collect", "queries", "queries_build",
                "queries_submit", "queries_collect", "decode_images", "embed_images", "embed_queries",
                "score", "summary", "export", "upload"}
    assert expected <= set(checked), expected - set(checked)
    for rule in ("judge", "judge_build", "judge_collect", "queries", "queries_build", "queries_collect"):
        assert "reuse" in checked[rule], (rule, checked[rule])
    assert "pools_file" in checked["plan"], checked["plan"]


TRIGGER_PROBE = r"""
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings, StorageSettings

root, workdir, configs = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
seen = {}
for cfg in configs:
    with SnakemakeApi(OutputSettings(quiet=None)) as api:
        wf = api.workflow(resource_settings=ResourceSettings(cores=1),
                          config_settings=ConfigSettings(configfiles=[Path(cfg)]),
                          storage_settings=StorageSettings(), snakefile=root / "Snakefile", workdir=workdir)
        wf.dag(DAGSettings(targets={"all"})).execute_workflow(executor="local", pseudo_executor="dryrun")
        for job in wf._workflow.dag.jobs:
            # what Snakemake stores with the outputs and compares on the next run ("params" trigger)
            seen[f"{Path(cfg).stem}:{job.rule.name}"] = json.dumps(list(job.non_derived_params), default=str)
print(json.dumps(seen))
"""


def test_api_runtime_knobs_are_not_rerun_triggers(tmp_path, tiny_corpus, tiny_clip):
    """Concurrency, polling, waiting and batch cutting (`x-runtime: true` in the schema) never
    reach the params Snakemake compares, in any API rule of batch or sync mode; the output-deciding
    settings (model, prompts) do."""
    from benchmaker.triggers import runtime_keys

    knobs = {"concurrency": 7, "poll_seconds": 12345, "wait": False, "max_requests_per_batch": 4321}
    llm = {"base_url": "http://127.0.0.1:9/v1", "model": "gpt-5-mini-unique-model", **knobs}
    variants = {
        "batch": {"vision": {"adapter": "openai", "openai": {**llm, "mode": "batch"}},
                  "judge": {"adapter": "openai", "openai": {**llm, "mode": "batch"}},
                  "preprocess": {"workers": 13}},
        "sync": {"vision": {"adapter": "openai", "openai": {**llm, "mode": "sync"}},
                 "judge": {"adapter": "openai", "openai": {**llm, "mode": "sync"}}},
    }
    configs = [str(support.write_config(tmp_path / f"{name}.yaml",
                                        support.tiny_config(tmp_path, tiny_corpus, tiny_clip, **over)))
               for name, over in variants.items()]
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": support.no_slurm_path(), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", TRIGGER_PROBE, str(ROOT), str(tmp_path), json.dumps(configs)],
                       capture_output=True, text=True, env={**__import__("os").environ, **env}, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    api_jobs = {k: v for k, v in seen.items() if k.split(":")[1] in
                ("vision", "vision_build", "vision_submit", "vision_collect", "judge", "judge_build",
                 "judge_submit", "judge_collect", "queries", "queries_build", "queries_submit", "queries_collect")}
    assert {"batch:vision_collect", "batch:judge_collect", "batch:vision_submit", "sync:vision",
            "sync:judge", "batch:queries_collect", "batch:queries_submit", "sync:queries"} <= set(api_jobs), \
        sorted(seen)
    assert set(knobs) <= set(runtime_keys("vision.openai"))
    for name, params in api_jobs.items():
        for value in ("12345", "4321"):
            assert value not in params, f"{name}: a runtime knob is a rerun trigger: {params[:400]}"
    pre = [v for k, v in seen.items() if k.startswith("batch:preprocess")]
    assert pre and all('"workers": 13' not in v and '"verify_decode"' in v for v in pre), pre[:1]
    for name in ("batch:vision_collect", "batch:judge_collect", "sync:vision", "sync:judge", "batch:queries_collect",
                 "sync:queries"):
        assert "gpt-5-mini-unique-model" in api_jobs[name], name  # the model still is a trigger


def test_a_jobs_own_temporaries_left_by_a_killed_attempt_are_removed(tmp_path):
    """A SIGKILL skips every cleanup: what atomic_path, the merge's spill folder and pages.outdir
    left next to an output is removed before the job runs again; nothing else is touched."""
    out = tmp_path / "annotations.jsonl"
    stale = [".annotations.jsonl.k2j_9x0a.tmp", ".annotations.jsonl.parts.ad8jrp5f", ".annotations.jsonl.old.4242",
             ".annotations.jsonl.ab12cd34.parquet.tmp"]
    kept = ["annotations.jsonl.bak", ".annotations.jsonl.notes", ".other.jsonl.k2j_9x0a.tmp", "x.annotations.jsonl",
            ".annotations.jsonl.parts.too-long-name"]
    for name in stale + kept:
        if "parts" in name:
            (tmp_path / name).mkdir()
            (tmp_path / name / "00000.arrow").write_text("x")
        else:
            (tmp_path / name).write_text("x")
    log = tmp_path / "merge.log"
    got = run_stage(smk(input={"images": "a"}, output={"out": str(out)}, log=log), stage_without_threads)
    assert got == {"images": "a", "out": str(out)}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept + ["merge.log"])
    text = log.read_text()
    assert all(f"removed {name}, left by an interrupted earlier attempt" in text for name in stale), text


def test_strict_mode_gives_a_stage_only_its_declared_inputs(tmp_path):
    """BENCHMAKER_STRICT=1 (on in the test suite): the inputs are links in a folder of their own, so a
    read of a file beside a declared one fails as it would in a pod; the folder goes afterwards."""
    from benchmaker.strict import sandbox_inputs, strict_on

    (tmp_path / "board.csv").write_text("a\n")
    (tmp_path / "beside.csv").write_text("b\n")
    kwargs = {"evaluation": str(tmp_path / "board.csv"), "out": str(tmp_path / "out.csv"), "n": 3}
    kinds = {"evaluation": "input", "out": "output", "n": "param"}
    assert not strict_on({"BENCHMAKER_STRICT": "0"}) and strict_on({"BENCHMAKER_STRICT": "true"})
    with sandbox_inputs(kwargs, kinds, environ={"BENCHMAKER_STRICT": "1"}) as got:
        board = Path(got["evaluation"])
        assert board.read_text() == "a\n" and got["out"] == kwargs["out"] and got["n"] == 3
        assert not (board.parent / "beside.csv").exists()
    assert not board.parent.exists()
    with sandbox_inputs(kwargs, kinds, environ={"BENCHMAKER_STRICT": "1"}, on=False) as got:
        assert got == kwargs


def test_strict_mode_catches_a_read_beside_the_leaderboard(tmp_path):
    """Issue 32's case: summary and export read the result files beside evaluate/leaderboard.csv. Given
    only the leaderboard (as its rule once declared), strict mode's folder lacks them and the reader
    says which; with them declared (rules/common.smk evaluate_report_inputs) it reads them all."""
    from benchmaker.errors import UserError
    from benchmaker.evaluate.report import RESULT_FILES, check_results
    from benchmaker.strict import sandbox_inputs

    ev = tmp_path / "evaluate"
    (ev / "sage").mkdir(parents=True)
    for f in RESULT_FILES:
        (ev / f).write_text("system,x\nclip,1\n")
    (ev / "sage" / "clip.csv").write_text("a\n1\n")
    strict = {"BENCHMAKER_STRICT": "1"}
    with sandbox_inputs({"evaluation": str(ev / "leaderboard.csv")}, {"evaluation": "input"}, environ=strict) as kw:
        with pytest.raises(UserError, match=r"drilldown\.csv.*missing beside leaderboard\.csv.*evaluate_report_inputs"):
            check_results(kw["evaluation"])
    check_results(ev / "leaderboard.csv")                     # not strict: the folder has them all
    declared = {"evaluation": str(ev / "leaderboard.csv"),
                "evaluation_files": [str(ev / f) for f in RESULT_FILES[1:]] + [str(ev / "sage" / "clip.csv")]}
    with sandbox_inputs(declared, dict.fromkeys(declared, "input"), environ=strict) as kw:
        check_results(kw["evaluation"])

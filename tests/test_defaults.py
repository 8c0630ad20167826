"""No default is written twice: a literal in src/benchmaker that repeats a schema default beside the
setting's name (``settings.get("batch_size") or 128``, ``settings.get("split", "test")``,
``setdefault``, a parameter ``batch_size=128``, a dataclass field, a ``*DEFAULTS`` dict) is an error.
Nor is one contradicted: a fallback read beside a setting's name (``s.get("workers") or 1`` where the
schema says 2) that is a value of the setting's kind (a number, a non-empty list, one of its enum
choices) and none of its schema defaults is an error too. Stage code reads a section through
``benchmaker.settings_schema.filled(path, section)`` (the schema's defaults filled in; re-exported by
benchmaker.config) or one value through ``default(path)``.

There is no list of exceptions: every module reads the schema's defaults.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from benchmaker.triggers import setting_paths

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "benchmaker"
TRIVIAL = (None, "", 0, False)

def schema_defaults() -> dict[str, list]:
    """key name -> the defaults the schema gives settings of that name."""
    out: dict[str, list] = {}
    for path, node in setting_paths():
        if "default" in node:
            out.setdefault(path.split(".")[-1], []).append(node["default"])
    return out


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return Ellipsis


def _fallbacks(tree: ast.AST):
    """(setting name node, fallback node) of every shape that writes a default beside a setting's name:
    ``s.get("k") or 128``, ``s.get("k", 128)``, ``s.setdefault("k", 128)``, a parameter ``k=128``, a
    class field ``k: int = 128`` and an entry ``"k": 128`` of a ``*DEFAULTS*`` dict."""
    for node in ast.walk(tree):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and len(node.values) == 2:
            get, fallback = node.values
            if isinstance(get, ast.Call) and getattr(get.func, "attr", None) == "get" and len(get.args) == 1:
                yield get.args[0], fallback
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("get", "setdefault") \
                and len(node.args) == 2:
            yield node.args[0], node.args[1]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            positional = a.posonlyargs + a.args
            for arg, d in zip(positional[len(positional) - len(a.defaults):], a.defaults):
                yield ast.Constant(arg.arg), d
            for arg, d in zip(a.kwonlyargs, a.kw_defaults):
                if d is not None:
                    yield ast.Constant(arg.arg), d
        if isinstance(node, ast.ClassDef):
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                    yield ast.Constant(st.target.id), st.value
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and "DEFAULTS" in t.id for t in targets):
                dicts = [n for n in ast.walk(node.value) if isinstance(n, ast.Dict)] if node.value else []
                for d in dicts:
                    for k, v in zip(d.keys, d.values):
                        if k is not None:
                            yield k, v


def repeated_defaults(root: Path = PKG) -> set[tuple[str, str]]:
    defaults = schema_defaults()
    found = set()
    for f in sorted(root.rglob("*.py")):
        for key, fallback in _fallbacks(ast.parse(f.read_text(), filename=str(f))):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                continue
            value = _literal(fallback)
            if value is Ellipsis or any(value == t and type(value) is type(t) for t in TRIVIAL) \
                    or value in ([], {}):
                continue
            if any(value == d for d in defaults.get(key.value, [])):
                found.add((f.relative_to(root).as_posix(), key.value))
    return found


def _setting_kinds() -> dict[str, list[dict]]:
    """key name -> the schema nodes of the settings of that name that have a default (not null)."""
    out: dict[str, list[dict]] = {}
    for path, node in setting_paths():
        if node.get("default") is not None:
            out.setdefault(path.split(".")[-1], []).append(node)
    return out


def _of_the_settings_kind(value, node: dict) -> bool:
    """``value`` is something the setting could hold: a number for a number, a non-empty list for a
    list, a string among its enum choices (a free-text fallback such as "?" is a placeholder)."""
    d = node["default"]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return isinstance(d, (int, float)) and not isinstance(d, bool)
    if isinstance(value, (list, tuple)):
        return bool(value) and isinstance(d, list)
    return isinstance(value, str) and value in (node.get("enum") or ())


def contradicted_defaults(root: Path = PKG) -> set[tuple[str, str, str]]:
    """(file, key, fallback) of every fallback read beside a setting's name that the setting could
    hold but that is none of the schema's defaults for a setting of that name."""
    kinds = _setting_kinds()
    found = set()
    for f in sorted(root.rglob("*.py")):
        for key, fallback in _get_fallbacks(ast.parse(f.read_text(), filename=str(f))):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                continue
            value = _literal(fallback)
            nodes = kinds.get(key.value, [])
            if value is Ellipsis or not any(_of_the_settings_kind(value, n) for n in nodes):
                continue
            if not any(value == n["default"] or (isinstance(value, tuple) and list(value) == n["default"])
                       for n in nodes):
                found.add((f.relative_to(root).as_posix(), key.value, repr(value)))
    return found


def _get_fallbacks(tree: ast.AST):
    """The reads with a fallback: ``s.get("k") or X``, ``s.get("k", X)``, ``s.setdefault("k", X)``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and len(node.values) == 2:
            get, fallback = node.values
            if isinstance(get, ast.Call) and getattr(get.func, "attr", None) == "get" and len(get.args) == 1:
                yield get.args[0], fallback
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("get", "setdefault") \
                and len(node.args) == 2:
            yield node.args[0], node.args[1]


# the workflow's files are Snakemake, not Python: the two fallback shapes by pattern
_SMK_FALLBACK = re.compile(r'\.get\(\s*"(\w+)"\s*(?:\)\s*or\s+|,\s*)("[^"]*"|-?\d[\d.]*|True|False)')


def repeated_defaults_in_workflow(root: Path = ROOT) -> set[tuple[str, str]]:
    defaults = schema_defaults()
    found = set()
    for f in [root / "Snakefile", *sorted((root / "rules").glob("*.smk"))]:
        for m in _SMK_FALLBACK.finditer(f.read_text() if f.exists() else ""):
            value = ast.literal_eval(m.group(2))
            if not any(value == t and type(value) is type(t) for t in TRIVIAL) \
                    and any(value == d for d in defaults.get(m.group(1), [])):
                found.add((f.relative_to(root).as_posix(), m.group(1)))
    return found


def test_no_schema_default_is_repeated_in_the_workflow_or_its_scripts(tmp_path):
    assert repeated_defaults_in_workflow() == set()
    assert repeated_defaults(ROOT / "scripts") == set()
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "x.smk").write_text('def f(s):\n    return int(s.get("batch_size") or 128)\n'
                                              'def g(c):\n    return c.get("report", True)\n')
    assert repeated_defaults_in_workflow(tmp_path) == {("rules/x.smk", "batch_size"), ("rules/x.smk", "report")}


def test_no_schema_default_is_repeated_in_code():
    found = repeated_defaults()
    assert found == set(), f"defaults repeated in code (use settings_schema): {sorted(found)}"


def test_no_fallback_contradicts_the_schema_default():
    found = contradicted_defaults()
    assert found == set(), f"fallbacks that differ from the schema's default (read it with filled/default): " \
                           f"{sorted(found)}"


@pytest.mark.parametrize("code, found", [
    ('def run(s):\n    return int(s.get("workers") or 1)\n', ("workers", "1")),            # preprocess.workers: 2
    ('def run(s):\n    return list(s.get("metrics") or ["ndcg@10"])\n', ("metrics", "['ndcg@10']")),
    ('def run(s):\n    return s.get("max_attempts", 1)\n', ("max_attempts", "1")),
    ('def run(s):\n    return s.get("mode") or "sync"\n', ("mode", "'sync'")),               # llm.mode: batch
])
def test_the_check_finds_a_contradicting_fallback(tmp_path, code, found):
    (tmp_path / "stage.py").write_text(code)
    assert contradicted_defaults(tmp_path) == {("stage.py", *found)}


def test_placeholders_and_other_meanings_are_no_contradiction(tmp_path):
    """A free-text placeholder, a value outside the setting's choices, a default, a trivial fallback."""
    (tmp_path / "stage.py").write_text(
        'def run(s, img):\n    return (s.get("model", "?"), img.info.get("mode", "RGB"), s.get("workers") or 2,\n'
        '            s.get("metrics") or [], s.get("metrics") or ("ndcg@10", "map", "mrr"))\n')
    assert contradicted_defaults(tmp_path) == set()


def test_the_check_finds_a_repeated_default(tmp_path):
    (tmp_path / "stage.py").write_text('def run(settings):\n    return settings.get("sample_grid") or 24\n')
    (tmp_path / "ok.py").write_text('def run(settings):\n    return settings.get("sample_grid") or 0\n')
    assert repeated_defaults(tmp_path) == {("stage.py", "sample_grid")}


@pytest.mark.parametrize("code", [
    'def run(s):\n    return s.get("batch_size") or 128\n',                 # similarity.batch_size
    'def run(s):\n    return s.get("batch_size", 128)\n',
    'def run(s):\n    s.setdefault("batch_size", 128)\n    return s\n',
    'def embed(images, *, batch_size: int = 128):\n    return images\n',
    'def embed(images, batch_size=128):\n    return images\n',
    'embed = lambda images, batch_size=128: images\n',
    'from dataclasses import dataclass\n\n\n@dataclass\nclass Opts:\n    batch_size: int = 128\n',
    'MY_DEFAULTS = {"clip": {"batch_size": 128, "model": None}}\n',
])
def test_every_shape_of_a_repeated_default_is_found(tmp_path, code):
    (tmp_path / "stage.py").write_text(code)
    assert repeated_defaults(tmp_path) == {("stage.py", "batch_size")}


def test_reading_the_schema_default_is_not_a_repeat(tmp_path):
    (tmp_path / "stage.py").write_text(
        'from benchmaker.settings_schema import default, filled\n\n\n'
        'def embed(images, *, batch_size: int = default("similarity.batch_size")):\n    return images\n\n\n'
        'def run(s):\n    return filled("similarity", s)["batch_size"]\n\n\n'
        'def other(s):\n    return s.get("batch_size") or 7\n')   # not a schema default: not a repeat
    assert repeated_defaults(tmp_path) == set()


def test_default_reads_a_setting_and_a_default_that_is_another_setting():
    from benchmaker.settings_schema import LLM, default, kind_defaults

    assert default("similarity.batch_size") == 128
    assert default(f"{LLM}.retry_max_tries") == 10
    assert default("evaluate.systems.[].depth") == default("evaluate.depth") == 100   # x-default-from
    kinds = kind_defaults("evaluate.systems.[]")
    assert kinds["clip"]["batch_size"] == 128 and kinds["milvus"]["batch_size"] == 1
    with pytest.raises(KeyError, match="no default"):
        default("evaluate.systems.[].name")


def test_a_library_caller_gets_the_schema_defaults():
    """Stage functions called with a partial section fill it from the schema (not from literals)."""
    from benchmaker.evaluate.systems import system_settings
    from benchmaker.providers.retry import RetryPolicy
    from benchmaker.providers.spec import LLMSettings
    from benchmaker.settings_schema import LLM, filled

    llm = filled(LLM, {})
    # prompt_cache_key is derived (on for api.openai.com), every other field is the schema's default
    assert dataclasses.replace(LLMSettings.from_config({}), prompt_cache_key=False) == LLMSettings()
    assert LLMSettings().model == llm["model"] and LLMSettings().image_max_side == llm["image_max_side"]
    p = RetryPolicy.from_settings(None)
    assert (p.max_tries, p.budget_seconds) == (llm["retry_max_tries"], llm["retry_budget_seconds"])
    assert system_settings({"name": "c", "kind": "clip", "model": "m"})["depth"] == filled("evaluate", {})["depth"]
    assert system_settings({"name": "c", "kind": "clip", "model": "m"}, 7)["depth"] == 7


def test_filled_gives_the_schema_defaults_of_a_section():
    from benchmaker.config import filled

    assert filled("summary", {"sample_grid": 3}) == {"sample_grid": 3, "scale_factor": 2.0}
    assert filled("vision.clip", None)["batch_size"] == 64
    assert filled("judge.openai", {})["concurrency"] == 8


def test_an_empty_cutoff_list_is_an_error_not_a_silent_default(tiny_cfg):
    """evaluate.k: [] used to become [10] in code; the schema now says at least one cutoff."""
    from benchmaker.config import ConfigError, validate_config

    with pytest.raises(ConfigError, match=r"evaluate\.k"):
        validate_config({**tiny_cfg, "evaluate": {"k": []}})


def test_a_hybrid_fusion_method_is_valid_and_an_http_method_still_checked(tiny_cfg):
    """The schema declared `method` twice in one mapping (hybrid's and http's): YAML kept http's enum,
    so the documented `method: wsum` of a hybrid system was rejected. One declaration now; the http
    method is still checked, with the key named."""
    from benchmaker.config import ConfigError, validate_config

    fused = [{"name": "a", "kind": "bm25"}, {"name": "b", "kind": "bm25", "k1": 1.2},
             {"name": "f", "kind": "hybrid", "systems": ["a", "b"], "method": "wsum", "weights": [0.5, 0.5]}]
    cfg = validate_config({**tiny_cfg, "evaluate": {"systems": fused}})
    assert cfg["evaluate"]["systems"][2]["method"] == "wsum"
    http = {"name": "h", "kind": "http", "url": "http://127.0.0.1:9/search", "method": "PUT"}
    with pytest.raises(ConfigError, match=r"evaluate\.systems\[0\]\.method"):
        validate_config({**tiny_cfg, "evaluate": {"systems": [http]}})


RERANK_PROBE = r"""
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings, StorageSettings
from benchmaker.evaluate.rerank import make_rerank_runner

root, workdir, cfg = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
modes = {}
with SnakemakeApi(OutputSettings(quiet=None)) as api:
    wf = api.workflow(resource_settings=ResourceSettings(cores=1), config_settings=ConfigSettings(configfiles=[cfg]),
                      storage_settings=StorageSettings(), snakefile=root / "Snakefile", workdir=workdir)
    wf.dag(DAGSettings(targets={"evaluate"})).execute_workflow(executor="local", pseudo_executor="dryrun")
    for job in wf._workflow.dag.jobs:
        system = job.params.get("system")
        if system and system["kind"] == "rerank":
            # the settings its job's rerank run uses (scripts/stage.py hands it the `system` param)
            modes[system["name"]] = make_rerank_runner(system, cache_dir=None).settings["mode"]
print(json.dumps(modes))
"""


def test_a_rerankers_context_default_wins_under_snakemake(tmp_path, tiny_cfg, monkeypatch):
    """A reranker's llm.mode defaults to sync (schema x-default-rerank), under Snakemake as in the
    library: Snakemake's validate(config, schema) used to fill the shared llm default (batch) into a
    reranker's llm section first. Dry run of the real workflow; the mode its job would run."""
    import json
    import subprocess
    import sys

    import support

    from benchmaker.config import validate_config
    from benchmaker.evaluate.rerank import make_rerank_runner
    from benchmaker.evaluate.systems import check_systems

    systems = [{"name": "b", "kind": "bm25"},
               {"name": "unset", "kind": "rerank", "base": "b", "llm": {"model": "gpt-5-mini"}},
               {"name": "bare", "kind": "rerank", "base": "b"},
               {"name": "set", "kind": "rerank", "base": "b", "llm": {"mode": "batch"}}]
    cfg = {**tiny_cfg, "evaluate": {"systems": systems}}
    want = {"unset": "sync", "bare": "sync", "set": "batch"}
    lib = {s["name"]: make_rerank_runner(s, cache_dir=None).settings["mode"]
           for s in check_systems(validate_config(cfg)["evaluate"]) if s["kind"] == "rerank"}
    assert lib == want
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")   # preflight asks for the key a reranker uses
    path = support.write_config(tmp_path / "c.yaml", cfg)
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT / "src"), "PATH": support.no_slurm_path(),
           "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", RERANK_PROBE, str(ROOT), str(tmp_path), str(path)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == want

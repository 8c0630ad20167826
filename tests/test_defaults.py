"""No default is written twice: a config fallback in src/benchmaker that repeats a schema default
(``settings.get("batch_size") or 128``, ``settings.get("split", "test")``) is an error. Stage code
reads a section through ``benchmaker.config.filled(path, section)`` (the schema's defaults filled in)
or from the validated config, never with its own literal.

KNOWN lists the fallbacks that remain (file, key); the test fails on any other, and on a listed one
that is gone, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

from benchmaker.triggers import setting_paths

PKG = Path(__file__).resolve().parents[1] / "src" / "benchmaker"
TRIVIAL = (None, "", 0, False)

KNOWN = {
    # from the branches merged beside the settings core (deepen, compare, milvus, duplicates, estimate)
    ("deepen/label.py", "batch_discount"),
    ("deepen/label.py", "mode"),
    ("deepen/label.py", "poll_seconds"),
    ("deepen/label.py", "wait"),
    ("deepen/merge.py", "depth"),
    ("evaluate/compare.py", "correction"),
    ("evaluate/compare.py", "max_p"),
    ("evaluate/compare.py", "min_delta"),
    ("evaluate/compare.py", "test"),
    ("evaluate/milvus.py", "batch_size"),
    ("evaluate/milvus.py", "device"),
    ("evaluate/milvus.py", "precision"),
    ("plan/__init__.py", "one_per_duplicate_group"),
    ("estimate.py", "name"),
    ("estimate.py", "sample_size"),
    ("estimate.py", "scope"),
    ("evaluate/rerank.py", "poll_seconds"),
    ("evaluate/rerank.py", "wait"),
    ("evaluate/systems.py", "batch_size"),
    ("evaluate/systems.py", "depth"),
    ("evaluate/systems.py", "device"),
    ("evaluate/systems.py", "precision"),
    ("export/card.py", "labels"),
    ("export/card.py", "license"),
    ("judge/openai.py", "poll_seconds"),
    ("judge/openai.py", "wait"),
    ("providers/engine.py", "batch_discount"),
    ("providers/engine.py", "concurrency"),
    ("providers/engine.py", "max_attempts"),
    ("estimate.py", "batch_discount"),
    ("estimate.py", "candidate_image_ids"),
    ("estimate.py", "mode"),
    ("estimate.py", "query_id"),
    ("estimate.py", "seed_image_ids"),
    ("providers/gemini/runner.py", "concurrency"),
    ("providers/gemini/runner.py", "mode"),
    ("providers/gemini/runner.py", "poll_seconds"),
    ("providers/gemini/runner.py", "wait"),
    ("providers/openai/__init__.py", "api_key_env"),
    ("providers/openai/backend.py", "completion_window"),
    ("providers/retry.py", "retry_base_delay"),
    ("providers/retry.py", "retry_budget_seconds"),
    ("providers/retry.py", "retry_max_delay"),
    ("providers/retry.py", "retry_max_tries"),
    ("providers/spec.py", "api"),
    ("providers/spec.py", "image_detail"),
    ("providers/spec.py", "image_max_side"),
    ("providers/spec.py", "image_transport"),
    ("providers/spec.py", "max_output_tokens"),
    ("providers/spec.py", "model"),
    ("providers/spec.py", "reasoning_effort"),
    ("similarity/score.py", "image_id"),
    ("vision/openai.py", "mode"),
    ("vision/openai.py", "poll_seconds"),
    ("vision/openai.py", "wait"),
}


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


def repeated_defaults(root: Path = PKG) -> set[tuple[str, str]]:
    defaults = schema_defaults()
    found = set()
    for f in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
            pairs = []
            if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and len(node.values) == 2:
                get, fallback = node.values
                if isinstance(get, ast.Call) and getattr(get.func, "attr", None) == "get" and len(get.args) == 1:
                    pairs.append((get.args[0], fallback))
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and len(node.args) == 2:
                pairs.append((node.args[0], node.args[1]))
            for key, fallback in pairs:
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    continue
                value = _literal(fallback)
                if value is Ellipsis or any(value == t and type(value) is type(t) for t in TRIVIAL) \
                        or value in ([], {}):
                    continue
                if any(value == d for d in defaults.get(key.value, [])):
                    found.add((f.relative_to(root).as_posix(), key.value))
    return found


def test_no_schema_default_is_repeated_in_code():
    found = repeated_defaults()
    assert found - KNOWN == set(), f"defaults repeated in code (use benchmaker.config.filled): {sorted(found - KNOWN)}"
    assert KNOWN - found == set(), f"gone (remove from KNOWN): {sorted(KNOWN - found)}"


def test_the_check_finds_a_repeated_default(tmp_path):
    (tmp_path / "stage.py").write_text('def run(settings):\n    return settings.get("sample_grid") or 24\n')
    (tmp_path / "ok.py").write_text('def run(settings):\n    return settings.get("sample_grid") or 0\n')
    assert repeated_defaults(tmp_path) == {("stage.py", "sample_grid")}


def test_filled_gives_the_schema_defaults_of_a_section():
    from benchmaker.config import filled

    assert filled("summary", {"sample_grid": 3}) == {"sample_grid": 3, "scale_factor": 2.0}
    assert filled("vision.clip", None)["batch_size"] == 64
    assert filled("judge.openai", {})["concurrency"] == 8


def test_an_empty_cutoff_list_is_an_error_not_a_silent_default(tiny_cfg):
    """evaluate.k: [] used to become [10] in code; the schema now says at least one cutoff."""
    import pytest

    from benchmaker.config import ConfigError, validate_config

    with pytest.raises(ConfigError, match=r"evaluate\.k"):
        validate_config({**tiny_cfg, "evaluate": {"k": []}})

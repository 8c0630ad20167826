"""envs/benchmaker.yaml (the rules' conda environment) pins exactly what pyproject.toml does."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _norm(req: str) -> tuple[str, str]:
    m = re.match(r"^\s*([A-Za-z0-9_.-]+)\s*(.*?)\s*$", req.split(";")[0])
    return re.sub(r"[-_.]+", "-", m.group(1)).lower(), m.group(2).replace(" ", "")


def test_conda_env_pins_the_project_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    want = dict(_norm(d) for d in project["dependencies"])
    env = yaml.safe_load((ROOT / "envs" / "benchmaker.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    got = dict(_norm(d) for d in pip)
    assert got == want, {"only in envs": {k: got[k] for k in got.keys() - want.keys()},
                         "only in pyproject": {k: want[k] for k in want.keys() - got.keys()},
                         "differ": {k: (got[k], want[k]) for k in got.keys() & want.keys() if got[k] != want[k]}}
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    assert f">={python.split('=')[1]}" == project["requires-python"]

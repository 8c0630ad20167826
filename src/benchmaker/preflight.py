"""Checks before anything runs: config files merged like Snakemake merges them, paths, API keys.

Used by ``benchmaker validate-config a.yaml b.yaml`` and by the workflow at parse time
(``rules/common.smk``), so that both say the same thing and ``snakemake -n`` fails at once on, say, a
missing image folder.

* ``read_config_file(path)``: one YAML (or JSON) file; a syntax error names the file, line and column.
* ``merge_config_files(paths)``: merged exactly as ``snakemake --configfile a.yaml b.yaml`` merges them
  (a port of ``snakemake.utils.update_config``: mappings are merged key by key, recursively; any other
  value, lists included, replaces the earlier one). The library never imports Snakemake.
* ``path_problems(cfg)``: every path the config names exists and is readable (folders: listable).
* ``env_problems(cfg)``: the environment variables the configured API adapters read are set.
* ``preflight(cfg)``: all of the above at once, raising one ``ConfigError`` listing every problem.
"""

from __future__ import annotations

import collections.abc
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from .config import ConfigError, validate_config, yaml_error_message
from .settings_schema import LLM, default

__all__ = ["read_config_file", "merge_config_files", "snakemake_update", "path_problems", "env_problems",
           "required_env", "preflight", "load_config_files", "workflow_preflight"]

API_ADAPTERS = ("openai", "gemini")
OPENAI_DEFAULT_KEY_ENV = default(f"{LLM}.api_key_env")
GEMINI_KEY_ENVS = tuple(default(f"{LLM}.api_key_env", under="gemini"))


def read_config_file(path: str | Path) -> dict:
    """A config file as a dict (JSON first, then YAML, as Snakemake reads it)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (PermissionError, IsADirectoryError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text, object_pairs_hook=dict)
    except ValueError:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(yaml_error_message(path, exc)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: the top level must be a mapping of keys (got "
                          f"{type(data).__name__})")
    return data


def snakemake_update(config: dict, overwrite: Mapping[str, Any]) -> dict:
    """``snakemake.utils.update_config``, ported: updates ``config`` in place and returns it."""

    def _update(cfg: Any, over: Mapping[str, Any]) -> Any:
        for key, value in over.items():
            if not isinstance(cfg, collections.abc.Mapping):
                cfg = {}
            if isinstance(value, collections.abc.Mapping):
                cfg[key] = _update(cfg.get(key, {}), value)
            else:
                cfg[key] = value
        return cfg

    _update(config, overwrite)
    return config


def merge_config_files(paths: Iterable[str | Path]) -> dict:
    """Files merged left to right, as ``snakemake --configfile a.yaml b.yaml`` does."""
    merged: dict = {}
    for p in paths:
        snakemake_update(merged, read_config_file(p))
    return merged


def _resolve(path: str, base_dir: Path | None) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() or base_dir is None else base_dir / p


def _named_paths(cfg: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(config key, path, 'dir' | 'file') for every local input the config names: the keys marked
    ``x-path`` in config/schema.yaml (benchmaker.config_paths), except the folders the workflow
    writes (``x-path-use: output``)."""
    from .config_paths import config_paths

    return [(p.key, p.path, p.kind) for p in config_paths(cfg) if p.use != "output"]


def path_problems(cfg: Mapping[str, Any], base_dir: str | Path | None = None, *,
                  models: bool = True) -> list[str]:
    """Every named path that is missing, of the wrong kind or unreadable, with the key to fix.
    ``models=False`` leaves out the CLIP weight paths (similarity.*, vision.clip.*)."""
    base = Path(base_dir) if base_dir is not None else None
    problems = []
    for key, raw, kind in _named_paths(cfg):
        if not models and not key.startswith("paths."):
            continue
        p = _resolve(raw, base)
        shown = f"'{raw}'" + (f" (= {p.resolve()})" if not Path(raw).is_absolute() else "")
        if not p.exists():
            what = {"dir": "folder", "any": "file or folder"}.get(kind, "file")
            hint = ""
            if kind == "dir" and key.endswith(".model"):
                hint = (" (a local-dir: folder holds open_clip_config.json and the weights; for a smoke test "
                        f"`python -m benchmaker.tinyclip {raw}` builds a random tiny one)")
            problems.append(f"{key}: {what} {shown} does not exist; fix the path in your config "
                            f"(relative paths are relative to the directory snakemake runs in){hint}")
        elif kind == "dir" and not p.is_dir():
            problems.append(f"{key}: {shown} is a file, not a folder")
        elif kind == "file" and not p.is_file():
            problems.append(f"{key}: {shown} is a folder, not a file")
        elif not os.access(p, os.R_OK | (os.X_OK if p.is_dir() else 0)):
            problems.append(f"{key}: {shown} is not readable by this user (check its permissions)")
    return problems


def required_env(cfg: Mapping[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """(config key, environment variables of which one must be set) for each configured API adapter."""
    out = []
    for stage in ("vision", "judge"):
        sec = cfg.get(stage, {})
        adapter = sec.get("adapter")
        if adapter not in API_ADAPTERS:
            continue
        env = (sec.get(adapter) or {}).get("api_key_env") or OPENAI_DEFAULT_KEY_ENV
        if adapter == "gemini" and env == OPENAI_DEFAULT_KEY_ENV:
            names = GEMINI_KEY_ENVS      # the shared schema default means Gemini's own variables
        else:
            names = (env,)
        out.append((f"{stage}.{adapter}.api_key_env", names))
    for i, s in enumerate((cfg.get("evaluate") or {}).get("systems") or []):  # live systems' secrets
        for key in ("auth_env", "token_env"):
            if isinstance(s, Mapping) and s.get(key) and s.get("kind") in ("http", "milvus"):
                out.append((f"evaluate.systems[{i}].{key}", (str(s[key]),)))
    return out


def env_problems(cfg: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    environ = os.environ if environ is None else environ
    problems = []
    for key, names in required_env(cfg):
        if not any(environ.get(n) for n in names):
            problems.append(f"{key}: environment variable {' or '.join(names)} is not set; `export "
                            f"{names[0]}=...` before running (the key itself never goes in the config), or "
                            f"set {key} to the variable that holds it")
    return problems


def preflight(cfg: Mapping[str, Any], *, base_dir: str | Path | None = None, paths: bool = True,
              env: bool = True, environ: Mapping[str, str] | None = None) -> None:
    """Raise one ConfigError listing every missing path and unset key of a validated config."""
    problems = (path_problems(cfg, base_dir) if paths else []) + (env_problems(cfg, environ) if env else [])
    if problems:
        raise ConfigError("the configuration names things that are not there:\n  - " + "\n  - ".join(problems))


def load_config_files(paths: Iterable[str | Path], *, check_paths: bool = True, check_env: bool = True,
                      base_dir: str | Path | None = None) -> dict:
    """Merge, validate (schema, defaults, cross-key checks) and preflight: what validate-config runs."""
    paths = list(paths)
    if not paths:
        raise ConfigError("no config file given")
    cfg = validate_config(merge_config_files(paths))
    preflight(cfg, base_dir=base_dir, paths=check_paths, env=check_env)
    return cfg


def workflow_preflight(cfg: Mapping[str, Any], main_process: bool = True, remote_storage: bool = False) -> None:
    """The workflow's parse-time check (rules/common.smk), in Snakemake's main process only.

    Missing or unreadable ``paths.*`` raise ConfigError, so that even ``snakemake -n`` stops at once;
    skipped with ``remote_storage``, a default storage provider (``--profile nrp``: the image folder
    lives on a volume of the pods, not on the controller). Nothing is checked outside the
    ``main_process`` (a job Snakemake spawned: its controller checked). Missing CLIP weight
    folders/files and unset API keys are warnings here (a run of later targets, or a rerun whose model
    and API stages are done, needs neither, and a dry-run should still plan); the stage that needs
    them fails with the same message before doing any work. ``benchmaker validate-config`` treats all of them as errors.
    """
    import sys

    if not main_process:
        return
    remote = remote_storage
    if not remote:
        problems = path_problems(cfg, models=False)
        if problems:
            raise ConfigError("the configuration names things that are not there:\n  - " + "\n  - ".join(problems)
                              + "\n(check a config without running anything: benchmaker validate-config CONFIG...)")
    warnings = [p for p in path_problems(cfg) if not p.startswith("paths.")] if not remote else []
    for problem in warnings + env_problems(cfg):
        print(f"benchmaker: warning: {problem}", file=sys.stderr)

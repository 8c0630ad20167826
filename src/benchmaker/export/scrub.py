"""Keeping secrets out of everything the export writes and the upload sends."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = ["scrub_config", "secret_values", "find_secrets", "REDACTED"]

REDACTED = "<redacted>"
SECRET_KEY = re.compile(r"(^|_)(token|secret|password|passwd|api_?key|access_key|secret_key|credentials?|auth)$",
                        re.IGNORECASE)
TOKEN_LIKE = re.compile(
    r"(hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_\-]{16,}|AIza[0-9A-Za-z_\-]{30,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}|(?i:bearer)\s+[A-Za-z0-9._\-]{8,})")
DEFAULT_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY",
               "NRP_API_KEY")


def _env_names(obj: Any) -> Iterable[str]:
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if str(k).endswith("_env") and isinstance(v, str):
                yield v
            yield from _env_names(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _env_names(v)


def secret_values(config: Any = None, extra_env: Iterable[str] = ()) -> list[str]:
    """Values of the environment variables that hold secrets (named by ``*_env`` keys, or well known)."""
    names = set(DEFAULT_ENV) | set(extra_env) | set(_env_names(config or {}))
    vals = {os.environ.get(n, "") for n in names}
    return sorted(v for v in vals if len(v) >= 8)


def _scrub_str(s: str, secrets: list[str]) -> str:
    for v in secrets:
        if v in s:
            s = s.replace(v, REDACTED)
    return TOKEN_LIKE.sub(REDACTED, s)


def scrub_config(obj: Any, secrets: list[str] | None = None) -> Any:
    """Drop private keys (leading ``_``), redact secret-named keys and token-looking or secret values."""
    secrets = secrets if secrets is not None else secret_values(obj)
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            k = str(k)
            if k.startswith("_"):
                continue
            if SECRET_KEY.search(k) and not k.endswith("_env") and v not in (None, "", {}, []):
                out[k] = REDACTED
            else:
                out[k] = scrub_config(v, secrets)
        return out
    if isinstance(obj, list):
        return [scrub_config(v, secrets) for v in obj]
    if isinstance(obj, str):
        return _scrub_str(obj, secrets)
    return obj


TEXT_SUFFIXES = {".md", ".yaml", ".yml", ".json", ".jsonl", ".csv", ".html", ".txt", ".tsv"}


def find_secrets(folder: str | Path, secrets: list[str]) -> list[str]:
    """Text files under ``folder`` containing one of ``secrets`` (the secrets themselves are never returned)."""
    if not secrets:
        return []
    found = []
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES:
            data = p.read_bytes()
            if any(s.encode() in data for s in secrets):
                found.append(str(p.relative_to(folder)))
    return found

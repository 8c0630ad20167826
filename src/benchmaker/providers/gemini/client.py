"""Gemini settings, API key (environment only), client and price table."""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

from ...logs import get_logger
from ...settings_schema import LLM, default
from ..cost import Price

log = get_logger("providers.gemini")


DEFAULT_MODEL = default(f"{LLM}.model", under="gemini")
OPENAI_DEFAULT_MODEL = default(f"{LLM}.model")          # config/schema.yaml's llm_common default
KEY_ENVS = tuple(default(f"{LLM}.api_key_env", under="gemini"))
OPENAI_DEFAULT_KEY_ENV = default(f"{LLM}.api_key_env")
LONG_CONTEXT_TOKENS = 200_000

# USD per 1M tokens (input, cached input, output incl. thinking), paid tier, prompts <= 200k tokens,
# text/image input, as published by Google when this was written. Override with `prices`.
GEMINI_PRICES: dict[str, tuple[float, float, float]] = {
    "gemini-3-pro": (2.00, 0.20, 12.00),
    "gemini-3-flash": (0.50, 0.05, 3.00),
    "gemini-2.5-pro": (1.25, 0.125, 10.00),
    "gemini-2.5-flash": (0.30, 0.03, 2.50),
    "gemini-2.5-flash-lite": (0.10, 0.01, 0.40),
    "gemini-2.0-flash": (0.10, 0.025, 0.40),
    "gemini-2.0-flash-lite": (0.075, 0.075, 0.30),
}
# prompts of more than 200k tokens
LONG_CONTEXT_PRICES: dict[str, tuple[float, float, float]] = {
    "gemini-3-pro": (4.00, 0.40, 18.00),
    "gemini-2.5-pro": (2.50, 0.25, 15.00),
}

TERMINAL_STATES = {"JOB_STATE_SUCCEEDED": "succeeded", "JOB_STATE_PARTIALLY_SUCCEEDED": "succeeded",
                   "JOB_STATE_FAILED": "failed", "JOB_STATE_CANCELLED": "cancelled",
                   "JOB_STATE_EXPIRED": "expired"}
_OK_FINISH = {None, "", "STOP", "FINISH_REASON_UNSPECIFIED"}
INLINE_BATCH_BYTES = 19_000_000               # the API takes at most 20 MB of inline requests per job


try:  # the same exception the OpenAI client raises, so callers catch one class
    from ..openai import MissingKey
except ImportError:  # pragma: no cover
    class MissingKey(RuntimeError):
        pass


# -- settings, key, client ----------------------------------------------------------------------------
def gemini_settings(settings: Mapping[str, Any]) -> dict:
    """``llm_common`` settings with the OpenAI defaults of the shared schema mapped to Gemini's.

    The schema's default model (``gpt-5-mini``) becomes ``gemini-2.5-flash``; the default
    ``api_key_env`` (``OPENAI_API_KEY``) means: ``GEMINI_API_KEY``, else ``GOOGLE_API_KEY``.
    """
    s = dict(settings)
    if not s.get("model") or s["model"] == OPENAI_DEFAULT_MODEL:
        s["model"] = DEFAULT_MODEL
    s["model"] = str(s["model"]).removeprefix("models/")
    s["api"] = "gemini"   # `api` (responses | chat) means nothing here; fixed so it never splits the cache
    return s


def key_env_names(settings: Mapping[str, Any]) -> tuple[str, ...]:
    env = settings.get("api_key_env")
    if not env or env == OPENAI_DEFAULT_KEY_ENV:
        return KEY_ENVS
    return (str(env),)


def api_key(settings: Mapping[str, Any]) -> tuple[str, str]:
    """(env var name, key); the key only ever comes from the environment."""
    names = key_env_names(settings)
    for env in names:
        key = os.environ.get(env)
        if key:
            return env, key
    raise MissingKey(f"environment variable {' or '.join(names)} is not set (it must hold the Gemini API key; "
                     "the key never goes in the config)")


def split_base_url(base_url: str | None) -> tuple[str | None, str | None]:
    """``https://host/v1beta`` -> (``https://host``, ``v1beta``); a bare host keeps the SDK's version."""
    if not base_url:
        return None, None
    b = base_url.rstrip("/")
    m = re.fullmatch(r"(.*?)/(v1(?:alpha|beta)?\d*)", b)
    if m:
        return m.group(1) + "/", m.group(2)
    return b + "/", None


def make_client(settings: Mapping[str, Any], timeout: float = 300.0):
    """A ``genai.Client`` for the Gemini Developer API (never Vertex), SDK retries off."""
    from google import genai
    from google.genai import types

    _, key = api_key(settings)
    base, version = split_base_url(settings.get("base_url"))
    opts = types.HttpOptions(base_url=base, api_version=version, timeout=int(timeout * 1000),
                             retry_options=types.HttpRetryOptions(attempts=1))
    return genai.Client(api_key=key, vertexai=False, http_options=opts)


# -- prices -------------------------------------------------------------------------------------------
def _lookup(table: Mapping[str, tuple[float, float, float]], model: str) -> tuple[float, float, float] | None:
    model = model.removeprefix("models/")
    if model in table:
        return table[model]
    for name in sorted(table, key=len, reverse=True):
        if model.startswith(name + "-") or model.startswith(name + "."):
            return table[name]
    return None


def gemini_price(model: str, overrides: Mapping[str, float] | None = None, *, long_context: bool = False) -> Price:
    """Price of a Gemini model: config ``prices`` win, then the table (exact name, longest prefix)."""
    base = _lookup(LONG_CONTEXT_PRICES, model) if long_context else None
    base = base or _lookup(GEMINI_PRICES, model)
    ov = dict(overrides or {})
    if base is None and not ov:
        return Price(0.0, 0.0, 0.0, known=False)
    b = base or (0.0, 0.0, 0.0)
    p_in = float(ov.get("input", b[0]))
    return Price(p_in, float(ov.get("cached_input", b[1] if base else p_in)), float(ov.get("output", b[2])))

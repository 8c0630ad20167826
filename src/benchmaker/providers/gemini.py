"""Gemini specifics (Google GenAI SDK, ``google-genai``), on top of the shared provider layer.

What is shared with OpenAI and used unchanged: :class:`~benchmaker.providers.spec.RequestSpec` (the
same prompts, ``{metadata.<col>}`` placeholders and JSON schemas), image reading / downscaling
(:func:`~benchmaker.providers.spec.encode_image`), the response cache, answer validation
(:func:`~benchmaker.providers.parse.validate_answer` + the adapter's check), the attempt loop and
losses of :class:`~benchmaker.providers.engine.Runner`, the bounded-concurrency pool and back-off of
:class:`~benchmaker.providers.transport.SyncTransport`, cost rows
(:func:`~benchmaker.providers.cost.cost_row`), and the chunking of
:mod:`~benchmaker.providers.batch`.

What is Gemini's own, here:

* the client: ``genai.Client`` with the key from ``GEMINI_API_KEY`` (then ``GOOGLE_API_KEY``) unless
  ``api_key_env`` names another variable; the SDK's own retries are off (we retry, and count);
* the request: ``contents`` + ``GenerateContentConfig`` (system instruction, ``response_json_schema``
  = the same JSON schema, thinking from ``reasoning_effort``, media resolution from ``image_detail``);
  images inline (downscaled JPEG/PNG bytes) or, with ``image_transport: url``, as ``file_data`` URIs;
* the answer: ``candidates[0]``; ``finishReason`` other than ``STOP`` (``MAX_TOKENS``, ``SAFETY``,
  ``RECITATION``, …) is ``incomplete``; a blocked prompt is ``refusal``;
* usage (``usageMetadata``) and the Gemini price table (long-context tier of the Pro models);
* rate limits: ``429 RESOURCE_EXHAUSTED`` waits ``Retry-After`` or the ``RetryInfo.retryDelay`` of the
  error, else exponential back-off; 408 / 5xx / network errors back off too;
* batch mode (:meth:`GeminiRunner.run_batch`): inline-request batch jobs, with a per-chunk state file
  written before and after every create call, so an interrupted run resumes without resubmitting.
"""

from __future__ import annotations

import base64
import json
import mimetypes
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..io import atomic_path, dumps, iter_jsonl
from ..logs import get_logger
from ..losses import Losses
from .cache import content_key
from .cost import Price, Usage, cost_row
from .engine import Item, Runner
from .parse import RETRYABLE, Outcome, parse_json_answer, validate_answer
from .spec import ImageRef, LLMSettings, RequestSpec, Text, encode_image, request_key
from .retry import PermanentAPIError
from .transport import SyncTransport

__all__ = ["GEMINI_PRICES", "LONG_CONTEXT_PRICES", "DEFAULT_MODEL", "KEY_ENVS", "gemini_price", "api_key",
           "make_client", "split_base_url", "gemini_settings", "uses_json_schema", "to_openapi_schema",
           "thinking_config", "media_resolution", "render_request", "request_to_sdk", "gemini_request_key",
           "usage_from_response", "parse_response", "response_dict", "GeminiTransport", "GeminiRunner",
           "TERMINAL_STATES", "MissingKey"]

log = get_logger("providers.gemini")

DEFAULT_MODEL = "gemini-2.5-flash"
OPENAI_DEFAULT_MODEL = "gpt-5-mini"           # config/schema.yaml's llm_common default
KEY_ENVS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
OPENAI_DEFAULT_KEY_ENV = "OPENAI_API_KEY"
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
    from .openai import MissingKey
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


# -- requests -----------------------------------------------------------------------------------------
def uses_json_schema(model: str) -> bool:
    """Gemini 2.5 and later take a plain JSON schema (``response_json_schema``); 1.x / 2.0 need the
    OpenAPI-subset ``response_schema``."""
    m = model.removeprefix("models/")
    return not (m.startswith("gemini-1.") or m.startswith("gemini-2.0") or m.startswith("gemini-pro"))


def to_openapi_schema(schema: Mapping[str, Any]) -> dict:
    """The OpenAPI-subset form of a strict JSON schema (for models without JSON-schema support):
    no ``additionalProperties``, upper-case types, ``propertyOrdering``, integer enums as a range.
    Answers are still validated against the original JSON schema."""
    out: dict[str, Any] = {}
    t = schema.get("type")
    if isinstance(t, list):
        nullable = "null" in t
        t = next((x for x in t if x != "null"), "string")
        if nullable:
            out["nullable"] = True
    if t:
        out["type"] = str(t).upper()
    if "description" in schema:
        out["description"] = schema["description"]
    if "enum" in schema:
        vals = list(schema["enum"])
        if t in ("integer", "number"):
            out["minimum"], out["maximum"] = min(vals), max(vals)
        else:
            out["enum"] = [str(v) for v in vals]
            out["format"] = "enum"
    for k in ("minimum", "maximum"):
        if k in schema:
            out[k] = schema[k]
    if "minItems" in schema:
        out["min_items"] = schema["minItems"]
    if "maxItems" in schema:
        out["max_items"] = schema["maxItems"]
    if t == "object":
        props = schema.get("properties") or {}
        out["properties"] = {k: to_openapi_schema(v) for k, v in props.items()}
        out["required"] = list(schema.get("required") or [])
        out["property_ordering"] = list(props)
    if t == "array" and "items" in schema:
        out["items"] = to_openapi_schema(schema["items"])
    return out


_BUDGET = {"minimal": 0, "low": 1024, "medium": 8192, "high": 24576}


def thinking_config(model: str, effort: str | None) -> dict | None:
    """``reasoning_effort`` as Gemini thinking: a level for Gemini 3, a token budget for 2.5."""
    if not effort:
        return None
    m = model.removeprefix("models/")
    if m.startswith("gemini-3"):
        if "flash" in m:
            return {"thinking_level": effort}
        return {"thinking_level": "low" if effort in ("minimal", "low") else "high"}
    if m.startswith("gemini-2.5"):
        budget = _BUDGET[effort]
        if budget == 0 and "pro" in m:
            budget = 128              # 2.5 Pro cannot switch thinking off; 128 is its minimum
        return {"thinking_budget": budget}
    return None                       # 2.0 / 1.5 do not think


def media_resolution(detail: str | None) -> str | None:
    return {"low": "MEDIA_RESOLUTION_LOW", "high": "MEDIA_RESOLUTION_HIGH"}.get(detail or "")


def _image_part(ref: ImageRef, s: LLMSettings) -> dict:
    if s.image_transport == "url":
        if not ref.url:
            raise ValueError(f"image {ref.sha256[:12]}: image_transport 'url' but the image has no image_url")
        mime = mimetypes.guess_type(ref.url.split("?")[0])[0] or "image/jpeg"
        return {"file_data": {"file_uri": ref.url, "mime_type": mime}}
    mime, b64 = encode_image(ref, s.image_max_side)
    return {"inline_data": {"mime_type": mime, "data": b64}}


def render_request(spec: RequestSpec, s: LLMSettings) -> dict:
    """The request as JSON-able SDK arguments: ``{"model", "contents", "config"}``.

    Image bytes are standard base64 strings here (so the request can be written to a batch chunk
    file); :func:`request_to_sdk` turns them into bytes (the SDK sends them URL-safe encoded).
    Static text first (system instruction, prompt), per-item parts (metadata, images) last.
    """
    parts: list[dict] = []
    for p in spec.parts:
        parts.append({"text": p.text} if isinstance(p, Text) else _image_part(p, s))
    cfg: dict[str, Any] = {"system_instruction": spec.system, "response_mime_type": "application/json",
                           "max_output_tokens": s.max_output_tokens}
    if uses_json_schema(s.model):
        cfg["response_json_schema"] = spec.schema
    else:
        cfg["response_schema"] = to_openapi_schema(spec.schema)
    if s.temperature is not None:
        cfg["temperature"] = s.temperature
    th = thinking_config(s.model, s.reasoning_effort)
    if th is not None:
        cfg["thinking_config"] = th
    mr = media_resolution(s.image_detail) if any(not isinstance(p, Text) for p in spec.parts) else None
    if mr:
        cfg["media_resolution"] = mr
    return {"model": s.model, "contents": [{"role": "user", "parts": parts}], "config": cfg}


def request_to_sdk(req: Mapping[str, Any]) -> dict:
    """A rendered request with inline image data decoded to bytes (what the SDK expects)."""
    contents = []
    for c in req["contents"]:
        parts = []
        for p in c["parts"]:
            if "inline_data" in p and isinstance(p["inline_data"].get("data"), str):
                p = {"inline_data": {**p["inline_data"], "data": base64.b64decode(p["inline_data"]["data"])}}
            parts.append(p)
        contents.append({**c, "parts": parts})
    return {**req, "contents": contents}


def gemini_request_key(spec: RequestSpec, s: LLMSettings) -> str:
    """The shared content key plus what only shapes a Gemini request (provider, schema form, thinking,
    media resolution); never the key, a path or a file name."""
    return content_key({"provider": "gemini", "v": 1, "base": request_key(spec, s),
                        "json_schema": uses_json_schema(s.model),
                        "thinking": thinking_config(s.model, s.reasoning_effort),
                        "media": media_resolution(s.image_detail)})


# -- responses ----------------------------------------------------------------------------------------
def _get(d: Mapping[str, Any] | None, snake: str, default: Any = None) -> Any:
    """A field by its snake_case (SDK dump) or camelCase (REST) name."""
    if not d:
        return default
    if snake in d:
        return d[snake]
    camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), snake)
    return d.get(camel, default)


def _int(x: Any) -> int:
    try:
        return int(x or 0)
    except (TypeError, ValueError):
        return 0


def usage_from_response(d: Mapping[str, Any] | None) -> Usage:
    """Usage of one response: prompt tokens (cached ones included, as the API counts them), output =
    candidate + thinking tokens (thinking is billed as output), reasoning = thinking tokens."""
    u = _get(d, "usage_metadata") or {}
    prompt = _int(_get(u, "prompt_token_count")) + _int(_get(u, "tool_use_prompt_token_count"))
    thoughts = _int(_get(u, "thoughts_token_count"))
    return Usage(prompt, _int(_get(u, "cached_content_token_count")),
                 _int(_get(u, "candidates_token_count")) + thoughts, thoughts)


def response_dict(resp: Any) -> dict:
    if isinstance(resp, Mapping):
        return dict(resp)
    d = resp.model_dump(mode="json", exclude_none=True)
    d.pop("sdk_http_response", None)
    d.pop("parsed", None)
    d.pop("automatic_function_calling_history", None)
    return d


def _enum(v: Any) -> str | None:
    if v is None:
        return None
    v = getattr(v, "value", v)
    return str(v)


def parse_response(d: Mapping[str, Any] | None) -> Outcome:
    """Extract the JSON answer of one GenerateContentResponse (not yet validated against a schema)."""
    if not d:
        return Outcome(False, reason="no_response", detail="empty response")
    usage = usage_from_response(d)
    paid = bool(usage.input_tokens or usage.output_tokens)
    fb = _get(d, "prompt_feedback") or {}
    block = _enum(_get(fb, "block_reason"))
    if block and block != "BLOCK_REASON_UNSPECIFIED":
        msg = _get(fb, "block_reason_message") or ""
        return Outcome(False, usage=usage, reason="refusal", detail=f"prompt blocked: {block} {msg}".strip()[:500],
                       paid=paid)
    cands = _get(d, "candidates") or []
    if not cands:
        return Outcome(False, usage=usage, reason="api_error", detail="no candidates in response", paid=paid)
    c = cands[0]
    finish = _enum(_get(c, "finish_reason"))
    parts = (_get(c, "content") or {}).get("parts") or []
    text = "".join(p.get("text") or "" for p in parts if not p.get("thought"))
    if finish not in _OK_FINISH:
        detail = f"finishReason {finish}"
        if finish == "MAX_TOKENS":
            detail += " (max_output_tokens reached)"
        flagged = [_enum(_get(r, "category")) for r in (_get(c, "safety_ratings") or []) if _get(r, "blocked")]
        if flagged:
            detail += f"; blocked: {', '.join(str(x) for x in flagged)}"
        fm = _get(c, "finish_message")
        if fm:
            detail += f"; {fm}"
        return Outcome(False, text=text or None, usage=usage, reason="incomplete", detail=detail[:500], paid=paid)
    return parse_json_answer(text, usage=usage, paid=paid)


# -- sync transport -----------------------------------------------------------------------------------
class GeminiTransport(SyncTransport):
    """:class:`SyncTransport` (thread pool, back-off, counters) sending ``generate_content`` calls."""

    name = "gemini"

    def __init__(self, client: Any = None, *, client_factory: Any = None, concurrency: int = 8, **kw: Any):
        super().__init__(client, "gemini", concurrency=concurrency, **kw)
        self._factory = client_factory

    def _get_client(self):
        with self._lock:
            if self.client is None:
                self.client = self._factory()
            return self.client

    def _call(self, body: dict) -> Any:
        req = request_to_sdk(body)
        return self._get_client().models.generate_content(
            model=req["model"], contents=req["contents"],
            config={**req["config"], "automatic_function_calling": {"disable": True}})

    def _parse(self, resp: Any) -> Outcome:
        return parse_response(response_dict(resp))


# -- the runner ---------------------------------------------------------------------------------------
class GeminiRunner(Runner):
    """:class:`Runner` with Gemini's client, request rendering, cache key, prices and batch jobs."""

    def __init__(self, *, stage: str, item_type: str, settings: Mapping[str, Any], cache_dir: str | None,
                 client: Any = None):
        s = gemini_settings(settings)
        price = gemini_price(s["model"], s.get("prices") or {})
        # hand the shared runner a known price so that it neither warns nor looks in OpenAI's table
        shared = {**s, "prices": {"input": price.input, "cached_input": price.cached_input,
                                  "output": price.output}} if price.known else s
        super().__init__(stage=stage, item_type=item_type, settings=shared, cache_dir=cache_dir, client=client)
        self.settings = s
        self.price = price
        self.long_price = (gemini_price(s["model"], s.get("prices") or {}, long_context=True)
                           if not s.get("prices") and _lookup(LONG_CONTEXT_PRICES, s["model"]) else None)
        self.cache_dir = cache_dir
        if not price.known:
            log.warning("%s: no price known for Gemini model %r and no `prices` configured; costs are reported "
                        "as 0", stage, s["model"])

    def make_client(self):
        return make_client(self.settings)

    def request_key(self, spec) -> str:
        return gemini_request_key(spec, self.llm)

    def render(self, item: Item) -> dict:
        return render_request(item.spec, self.llm)

    def price_of(self, usage: Usage) -> Price:
        if self.long_price is not None and usage.input_tokens > LONG_CONTEXT_TOKENS:
            return self.long_price
        return self.price

    def settle(self, item: Item, outcome: Outcome, *, attempt: int, mode: str, **kw: Any) -> dict | None:
        base = self.price
        self.price = self.price_of(outcome.usage)     # settle runs on the calling thread only
        try:
            return super().settle(item, outcome, attempt=attempt, mode=mode, **kw)
        finally:
            self.price = base

    def run_sync(self, items: Iterable[Item], losses: Losses, *, transport=None) -> dict[str, dict]:
        if transport is None:
            # the client (and so the key) is only needed when something is actually sent
            transport = GeminiTransport(self._client, client_factory=lambda: self.client,
                                        concurrency=int(self.settings.get("concurrency", 8)))
        return super().run_sync(items, losses, transport=transport)

    # -- batch mode -------------------------------------------------------------------------------
    def run(self, items: list[Item], losses: Losses) -> dict[str, dict]:
        """``mode: batch`` (default) or ``mode: sync``, as configured."""
        if self.settings.get("mode", "batch") == "batch":
            return self.run_batch(items, losses, wait=bool(self.settings.get("wait", True)),
                                  poll_seconds=float(self.settings.get("poll_seconds", 30)))
        return self.run_sync(items, losses)

    def run_batch(self, items: Iterable[Item], losses: Losses, *, state_dir: str | None = None,
                  wait: bool = True, poll_seconds: float = 30.0) -> dict[str, dict]:
        """Inline-request batch jobs (see :class:`_BatchJobs`); returns item_id -> answer."""
        if state_dir is None:
            if self.cache_dir:
                state_dir = str(Path(self.cache_dir) / "gemini-batches")
            else:
                state_dir = tempfile.mkdtemp(prefix="bm-gemini-batches-")
                log.warning("%s: batch mode without a cache dir: batch state in %s, an interrupted run cannot "
                            "resume", self.stage, state_dir)
        with self.cache.bulk():        # answers go to a pack segment, published before any wait
            return _BatchJobs(self, Path(state_dir), wait=wait, poll_seconds=poll_seconds).run(list(items), losses)


# -- batch mode ---------------------------------------------------------------------------------------
@dataclass
class _Job:
    digest: str
    path: Path
    data: dict

    @property
    def status(self) -> str:
        return self.data.get("status", "intent")

    @property
    def ids(self) -> list[str]:
        return self.data["ids"]


def _rid(key: str, attempt: int) -> str:
    return f"{key}-a{attempt}"


def _split_rid(rid: str) -> tuple[str, int]:
    k, _, a = rid.rpartition("-a")
    return k, int(a)


def _write_json_durable(path: Path, obj: Any) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(dumps(obj))
            fh.flush()
            os.fsync(fh.fileno())


def _state_name(state: Any) -> str:
    return str(getattr(state, "value", state) or "")


class _BatchJobs:
    """Inline-request batch jobs with resumable state in ``state_dir``.

    Requests that the cache cannot answer are rendered (one ``{"id": <content key>-a<attempt>,
    "request": …}`` line each) into content-addressed chunk files (at most ``max_requests_per_batch``
    requests and 19 MB each: the inline limit). Per chunk, ``jobs/<digest>.json`` is written (fsynced)
    *before* ``batches.create`` (status ``intent``) and right after it (the job name), so a rerun polls
    the job instead of creating it again; a chunk left at ``intent`` is first looked up on the server by
    its display name. A terminal job's responses are saved (``results/<digest>.json``) before the
    job is marked ``done``; answers are validated and cached, failures (``finishReason`` not STOP,
    invalid JSON, schema violations, error rows, requests of failed / expired jobs) are sent again in
    a new job with the next attempt number, up to ``max_attempts``. Cancelled jobs are not retried
    (someone cancelled them): their unanswered requests are lost with ``batch_cancelled``. State is
    per request (content key + attempt), so shards share the state dir safely, and items answered or
    attempted in an earlier run are never paid again.
    """

    def __init__(self, runner: GeminiRunner, state_dir: Path, *, wait: bool, poll_seconds: float):
        self.r, self.sd = runner, state_dir
        self.wait, self.poll_seconds = wait, poll_seconds
        s = runner.settings
        self.max_requests = int(s.get("max_requests_per_batch", 50000))
        self.max_bytes = min(int(s.get("max_bytes_per_batch", INLINE_BATCH_BYTES)), INLINE_BATCH_BYTES)
        self.jobs: dict[str, _Job] = {}
        self.by_rid: dict[str, str] = {}          # request id -> chunk digest
        self._load()

    # -- state ---------------------------------------------------------------------------------
    def _job_path(self, digest: str) -> Path:
        return self.sd / "jobs" / f"{digest}.json"

    def _load(self) -> None:
        d = self.sd / "jobs"
        if not d.is_dir():
            return
        for p in sorted(d.glob("*.json")):
            try:
                data = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                log.warning("gemini batch: unreadable state file %s ignored", p)
                continue
            job = _Job(data["digest"], p, data)
            self.jobs[job.digest] = job
            for rid in job.ids:
                self.by_rid[rid] = job.digest

    def _save(self, job: _Job, **changes: Any) -> None:
        job.data.update(changes, t=round(time.time(), 3))
        _write_json_durable(job.path, job.data)

    def _latest(self, key: str, max_attempts: int) -> tuple[int, _Job | None]:
        for a in range(max_attempts + 5, 0, -1):
            dg = self.by_rid.get(_rid(key, a))
            if dg:
                return a, self.jobs[dg]
        return 0, None

    # -- the loop ------------------------------------------------------------------------------
    def run(self, items: list[Item], losses: Losses) -> dict[str, dict]:
        r = self.r
        items = r.keyed(items)
        results: dict[str, dict] = {}
        by_key: dict[str, list[Item]] = {}
        for it in items:
            if it.key in by_key:                   # same request content as an earlier item
                by_key[it.key].append(it)
                continue
            obj = r.from_cache(it, "batch")
            if obj is not None:
                results[it.item_id] = obj
            else:
                by_key[it.key] = [it]
        for k, its in by_key.items():              # duplicates of cached items
            if its[0].item_id in results:
                for it in its[1:]:
                    results[it.item_id] = results[its[0].item_id]
        pending = {k for k, its in by_key.items() if its[0].item_id not in results}
        log.info("%s: %d items, %d from cache, %d to answer by batch jobs (state in %s)", r.stage, len(items),
                 len(items) - sum(len(by_key[k]) for k in pending), len(pending), self.sd)
        last: dict[str, Outcome] = {}
        attempts: dict[str, int] = {}
        final: set[str] = set()
        bad: dict[str, str] = {}
        while True:
            waiting: dict[str, _Job] = {}
            to_send: list[tuple[str, int]] = []
            for k in sorted(pending - final):
                a, job = self._latest(k, r.max_attempts)
                attempts[k] = a
                if job is None:
                    to_send.append((k, 1))
                    continue
                if job.status != "done" and not job.data.get("name"):
                    self._resume_intent(job)
                if job.status != "done":
                    waiting[job.digest] = job
                    continue
                oc = self._outcome(job, _rid(k, a))
                obj = self._accept(by_key[k][0], oc)
                if obj is not None:
                    for it in by_key[k]:
                        results[it.item_id] = obj
                    pending.discard(k)
                    continue
                last[k] = oc
                if oc.reason in RETRYABLE and a < r.max_attempts:
                    to_send.append((k, a + 1))
                else:
                    final.add(k)
            if waiting:
                r.cache.flush()
                self._wait(list(waiting.values()))
                continue
            if not to_send:
                break
            sent = self._submit(to_send, by_key, bad)
            for k in bad:
                final.add(k)
            if not sent and not any(k not in bad for k, _ in to_send):
                break
        self._report_costs(by_key, items)
        for k in sorted(pending):
            its = by_key[k]
            if its[0].item_id in results:
                continue
            if k in bad:
                oc = Outcome(False, reason="bad_input", detail=bad[k])
            else:
                oc = last.get(k) or Outcome(False, reason="no_response", detail="no answer")
            for it in its:
                losses.add(r.item_type, it.item_id, oc.reason or "api_error", oc.detail,
                           attempts=max(1, attempts.get(k, 1)))
        log.info("%s batch: %d answers, %d lost, %d paid requests, $%.4f", r.stage, len(results),
                 sum(len(by_key[k]) for k in pending if by_key[k][0].item_id not in results),
                 r.cost_count, r.cost_total)
        return results

    def _accept(self, item: Item, oc: Outcome) -> dict | None:
        """Validate and cache a batch answer (its cost is reported from the job's saved usage)."""
        if not oc.ok:
            return None
        problem = validate_answer(oc.obj, item.spec.schema, item.check)
        if problem is not None:
            oc.ok, oc.reason, oc.detail = False, "schema_violation", problem
            return None
        u = oc.usage
        self.r.cache.put(item.key, {"answer": oc.obj, "model": self.r.llm.model, "usage": {
            "input_tokens": u.input_tokens, "cached_input_tokens": u.cached_input_tokens,
            "output_tokens": u.output_tokens, "reasoning_tokens": u.reasoning_tokens}})
        return oc.obj

    # -- submit --------------------------------------------------------------------------------
    def _submit(self, to_send: Sequence[tuple[str, int]], by_key: Mapping[str, list[Item]],
                bad: dict[str, str]) -> int:
        from .batch import ordered_map, split_requests

        def line(arg: tuple[str, int]) -> tuple[str, str | None, str | None]:
            k, a = arg
            try:
                req = render_request(by_key[k][0].spec, self.r.llm)
            except Exception as exc:  # an unreadable image: a loss, not a crash
                return k, None, f"{type(exc).__name__}: {exc}"
            return k, dumps({"id": _rid(k, a), "request": {"contents": req["contents"], "config": req["config"]}}) \
                + "\n", None

        lines = []
        for k, ln, err in ordered_map(line, to_send, int(self.r.settings.get("concurrency", 4))):
            if err is not None:
                bad[k] = err
            else:
                lines.append(ln)
        if not lines:
            return 0
        chunks = split_requests(lines, self.sd / "chunks", max_requests=self.max_requests, max_bytes=self.max_bytes)
        for ch in chunks:
            self._ensure(ch)
        return len(lines)

    def _resume_intent(self, job: _Job) -> None:
        """A chunk whose create call may or may not have gone through (an earlier run stopped)."""
        path = self.sd / "chunks" / f"{job.digest}.jsonl"
        if path.exists():
            self._ensure({"digest": job.digest, "path": str(path), "n": job.data["n"], "bytes": job.data["bytes"]})
            return
        found = self._find(job.data["display_name"])
        if found:
            self._save(job, status="submitted", name=found, found_by="display_name")
        else:   # never created and its requests are gone: those attempts count as unanswered
            self._save(job, status="done", outcome="missing", error="chunk file missing, job never created",
                       reported=True)
            _write_json_durable(self.sd / "results" / f"{job.digest}.json",
                                {"status": "missing", "error": "never submitted", "responses": {}, "costs": []})

    def _display_name(self, digest: str) -> str:
        return f"bm-{self.r.stage}-{digest[:40]}"

    def _ensure(self, chunk: dict) -> _Job:
        digest = chunk["digest"]
        job = self.jobs.get(digest)
        if job is not None and job.data.get("name"):
            return job
        dn = self._display_name(digest)
        if job is not None:                     # intent recorded, name not: did the create go through?
            found = self._find(dn)
            if found:
                self._save(job, status="submitted", name=found, found_by="display_name")
                log.info("resume: found batch job %s for chunk %s by its display name", found, digest[:12])
                return job
        else:
            ids = [json.loads(x)["id"] for x in Path(chunk["path"]).read_text(encoding="utf-8").splitlines() if x]
            job = _Job(digest, self._job_path(digest), {"digest": digest, "ids": ids, "n": chunk["n"],
                                                       "bytes": chunk["bytes"], "display_name": dn,
                                                       "model": self.r.llm.model})
            self._save(job, status="intent")
            self.jobs[digest] = job
            for rid in ids:
                self.by_rid[rid] = digest
        src = []
        for row in iter_jsonl(chunk["path"]):
            req = request_to_sdk(row["request"])
            src.append({"contents": req["contents"], "config": req["config"], "metadata": {"key": row["id"]}})
        name = self._create(src, dn)
        self._save(job, status="submitted", name=name)
        log.info("submitted Gemini batch job %s: %d requests, %.1f MB (chunk %s)", name, chunk["n"],
                 chunk["bytes"] / 1e6, digest[:12])
        return job

    def _create(self, src: list[dict], dn: str) -> str:
        """``batches.create``; after a transient failure the job may exist anyway: look it up by its
        display name before trying again (never two jobs for one chunk)."""
        return self.r.policy.call(
            lambda: self.r.client.batches.create(model=self.r.llm.model, src=src, config={"display_name": dn}).name,
            "create Gemini batch job", on_retry=lambda exc: self._find(dn))

    def _find(self, display_name: str, max_scan: int = 2000) -> str | None:
        pager = self._call(lambda: self.r.client.batches.list(config={"page_size": 100}))
        for i, b in enumerate(pager):
            if getattr(b, "display_name", None) == display_name:
                return b.name
            if i >= max_scan:
                break
        return None

    def _call(self, fn, what: str = "Gemini batch API call"):
        """An API call through the runner's retry policy."""
        return self.r.policy.call(fn, what)

    # -- wait and read ---------------------------------------------------------------------------
    def _wait(self, jobs: list[_Job]) -> None:
        from .batch import BatchPending

        open_ = list(jobs)
        last_log = 0.0
        while open_:
            still = []
            for job in open_:
                try:
                    b = self._call(lambda: self.r.client.batches.get(name=job.data["name"]))
                except PermanentAPIError as exc:
                    if exc.status == 404:
                        self._finish(job, None, "missing", f"batch job {job.data['name']} not found (deleted?)")
                        continue
                    raise
                state = _state_name(b.state)
                if state in TERMINAL_STATES:
                    err = getattr(b, "error", None)
                    msg = getattr(err, "message", None) if err is not None else None
                    self._finish(job, b, TERMINAL_STATES[state], msg)
                else:
                    if job.data.get("state") != state:
                        self._save(job, state=state)
                    still.append(job)
            open_ = still
            if not open_:
                return
            if not self.wait:
                states = ", ".join(f"{j.data['name']}: {j.data.get('state')}" for j in open_[:10])
                raise BatchPending(f"{self.r.stage}: {len(open_)} Gemini batch job(s) still running ({states}); "
                                   "wait is false: run the workflow again later to collect")
            if time.monotonic() - last_log > 300:
                log.info("%s: waiting for %d Gemini batch job(s): %s", self.r.stage, len(open_),
                         ", ".join(f"{j.data['name']}={j.data.get('state')}" for j in open_[:5]))
                last_log = time.monotonic()
            time.sleep(self.poll_seconds)

    def _finish(self, job: _Job, b: Any, status: str, error: str | None) -> None:
        """Save a terminal job's responses and their cost rows, then mark it done."""
        rows: dict[str, dict] = {}
        dest = getattr(b, "dest", None) if b is not None else None
        for ir in (getattr(dest, "inlined_responses", None) or []):
            md = getattr(ir, "metadata", None) or {}
            rid = md.get("key")
            if not rid or rid in rows:
                continue
            resp = getattr(ir, "response", None)
            err = getattr(ir, "error", None)
            rows[rid] = {"response": response_dict(resp) if resp is not None else None,
                         "error": err.model_dump(mode="json", exclude_none=True) if err is not None else None}
        costs = []
        for rid, row in rows.items():
            if row["response"] is None:
                continue
            u = usage_from_response(row["response"])
            if not (u.input_tokens or u.output_tokens):
                continue
            k, a = _split_rid(rid)
            costs.append({"key": k, "attempt": a, "usage": [u.input_tokens, u.cached_input_tokens,
                                                             u.output_tokens, u.reasoning_tokens]})
        _write_json_durable(self.sd / "results" / f"{job.digest}.json",
                            {"status": status, "error": error, "responses": rows, "costs": costs})
        self._save(job, status="done", outcome=status, error=error, reported=False)
        n_ok = sum(1 for x in rows.values() if x["response"] is not None)
        if status != "succeeded" or n_ok < len(job.ids):
            log.warning("%s: Gemini batch job %s %s: %d of %d request(s) answered%s", self.r.stage,
                        job.data.get("name"), status, n_ok, len(job.ids), f" ({error})" if error else "")

    def _results(self, job: _Job) -> dict:
        cache = getattr(self, "_res_cache", None)
        if cache is None:
            cache = self._res_cache = {}
        if job.digest not in cache:
            cache[job.digest] = json.loads((self.sd / "results" / f"{job.digest}.json").read_text(encoding="utf-8"))
        return cache[job.digest]

    def _outcome(self, job: _Job, rid: str) -> Outcome:
        res = self._results(job)
        row = res["responses"].get(rid)
        if row is None:
            status = res["status"]
            reason = {"failed": "batch_failed", "expired": "batch_expired",
                      "cancelled": "batch_cancelled"}.get(status, "no_response")
            detail = f"batch job {job.data.get('name')} {status}" + (f": {res['error']}" if res.get("error") else "")
            return Outcome(False, reason=reason, detail=detail)
        if row.get("error"):
            e = row["error"]
            return Outcome(False, reason="api_error", detail=f"{e.get('code', '')}: {e.get('message', '')}"[:500])
        return parse_response(row["response"])

    def _report_costs(self, by_key: Mapping[str, list[Item]], items: Sequence[Item]) -> None:
        """Cost rows of every finished job not yet reported whose requests belong to these items;
        a cached row is dropped for an item that has a paid row here (answered by a job of an
        earlier, unfinished run)."""
        r = self.r
        keys = {it.key: it for it in items}
        paid_items: set[str] = set()
        for job in self.jobs.values():
            rows = []
            if job.status != "done" or job.data.get("reported"):
                continue
            mine = [c for c in self._results(job)["costs"] if c["key"] in keys]
            if not mine:
                continue
            for c in mine:
                u = Usage(*c["usage"])
                it = keys[c["key"]]
                rows.append((cost_row(stage=r.stage, item_id=it.item_id, model=r.llm.model, mode="batch", usage=u,
                                      price=r.price_of(u), batch_discount=r.batch_discount, attempt=c["attempt"]),
                             f"{job.data.get('name') or job.digest}/{_rid(c['key'], c['attempt'])}"))
                paid_items.add(it.item_id)
            for row, rid in rows:          # on record (the ledger) before the job is marked reported
                r._cost(row, rid)
            self._save(job, reported=True)
        r.cost_rows[:] = [c for c in r.cost_rows if not (c["cached"] and c["item_id"] in paid_items)]

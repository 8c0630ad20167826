"""Gemini wire format: request bodies (schema, thinking, media resolution, images), cache keys,
responses (answer text, finish reason, usage)."""

from __future__ import annotations

import base64
import mimetypes
import re
from typing import Any, Mapping

from ...logs import get_logger
from ..cache import content_key
from ..cost import Usage
from ..parse import Outcome, parse_json_answer
from ..spec import ImageRef, LLMSettings, RequestSpec, Text, encode_image, request_key
from .client import _OK_FINISH

log = get_logger("providers.gemini")


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

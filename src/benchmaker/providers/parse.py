"""Turn a provider response body into an answer object or a classified failure.

Failure reasons (the ``reason`` column of the losses file):
``api_error`` (an error row or HTTP status), ``incomplete`` (e.g. max_output_tokens), ``refusal``,
``invalid_json``, ``schema_violation`` (the answer does not match the request's schema, or the
adapter's own checks, e.g. the judge's candidate keys).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from jsonschema import Draft202012Validator

from .cost import Usage, usage_from_body
from .fastjson import loads

__all__ = ["Outcome", "parse_body", "validate_answer", "RETRYABLE"]

RETRYABLE = {"api_error", "incomplete", "refusal", "invalid_json", "schema_violation", "batch_failed",
             "batch_expired", "no_response"}


@dataclass
class Outcome:
    ok: bool
    obj: dict | None = None
    text: str | None = None
    usage: Usage = Usage()
    reason: str | None = None
    detail: str | None = None
    paid: bool = False               # usage was reported: the request was billed


def _responses_text(body: Mapping[str, Any]) -> tuple[str | None, str | None]:
    texts, refusal = [], None
    for item in body.get("output") or []:
        if item.get("type") != "message":
            continue
        for c in item.get("content") or []:
            if c.get("type") == "output_text":
                texts.append(c.get("text") or "")
            elif c.get("type") == "refusal":
                refusal = c.get("refusal") or "refused"
    return ("".join(texts) if texts else None), refusal


def parse_body(body: Mapping[str, Any] | None, api: str) -> Outcome:
    """Extract the JSON answer of one response body (not yet validated against a schema)."""
    if not body:
        return Outcome(False, reason="no_response", detail="empty response body")
    usage = usage_from_body(body)
    paid = bool(usage.input_tokens or usage.output_tokens)
    if api == "chat":
        choices = body.get("choices") or []
        if not choices:
            return Outcome(False, usage=usage, reason="api_error", detail="no choices in response", paid=paid)
        ch = choices[0]
        msg = ch.get("message") or {}
        if msg.get("refusal"):
            return Outcome(False, usage=usage, reason="refusal", detail=str(msg["refusal"])[:500], paid=paid)
        if ch.get("finish_reason") == "length":
            return Outcome(False, usage=usage, reason="incomplete", detail="max_output_tokens reached", paid=paid)
        text = msg.get("content")
    else:
        status = body.get("status")
        if status == "incomplete":
            why = (body.get("incomplete_details") or {}).get("reason") or "incomplete"
            return Outcome(False, usage=usage, reason="incomplete", detail=str(why), paid=paid)
        if status == "failed":
            err = body.get("error") or {}
            return Outcome(False, usage=usage, reason="api_error", detail=str(err.get("message") or err)[:500],
                           paid=paid)
        text, refusal = _responses_text(body)
        if refusal and not text:
            return Outcome(False, usage=usage, reason="refusal", detail=str(refusal)[:500], paid=paid)
    return parse_json_answer(text, usage=usage, paid=paid)


def parse_json_answer(text: str | None, *, usage: Any = None, paid: bool = True) -> Outcome:
    """The answer text of a completed response -> Outcome: empty / invalid JSON / not an object / ok.
    Shared by every provider, so all of them report the same reasons for the same failures."""
    if text is None or not str(text).strip():
        return Outcome(False, usage=usage, reason="invalid_json", detail="empty answer", paid=paid)
    try:
        obj = loads(text)
    except json.JSONDecodeError as exc:
        return Outcome(False, text=text, usage=usage, reason="invalid_json",
                       detail=f"{exc.msg} at char {exc.pos}: {text[:200]!r}", paid=paid)
    if not isinstance(obj, dict):
        return Outcome(False, text=text, usage=usage, reason="schema_violation", detail="answer is not an object",
                       paid=paid)
    return Outcome(True, obj=obj, text=text, usage=usage, paid=paid)


_VALIDATORS: dict[int, tuple[dict, Callable[[Any], bool], Draft202012Validator | None]] = {}


def _compile(schema: dict) -> Callable[[Any], bool]:
    """A fast yes/no checker for the strict-schema subset we generate (object, array, enum, string,
    integer, number, boolean, required, additionalProperties, min/maxItems, minimum/maximum).
    Anything else falls back to jsonschema. The error message always comes from jsonschema."""
    keys = set(schema) - {"description", "title"}
    t = schema.get("type")
    if keys - {"type", "enum", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
               "minimum", "maximum"}:
        v = Draft202012Validator(schema)
        return v.is_valid
    if "enum" in schema:
        allowed = set(schema["enum"]) if t != "integer" else None
        vals = schema["enum"]
        if allowed is not None:
            return lambda x: isinstance(x, str) and x in allowed
        return lambda x: type(x) is int and x in vals
    if t == "object":
        props = {k: _compile(v) for k, v in schema.get("properties", {}).items()}
        req = tuple(schema.get("required", ()))
        closed = schema.get("additionalProperties") is False

        def obj(x: Any) -> bool:
            if not isinstance(x, dict):
                return False
            for k in req:
                if k not in x:
                    return False
            for k, v in x.items():
                c = props.get(k)
                if c is None:
                    if closed:
                        return False
                elif not c(v):
                    return False
            return True
        return obj
    if t == "array":
        item = _compile(schema.get("items", {}))
        lo, hi = schema.get("minItems", 0), schema.get("maxItems", 1 << 62)
        return lambda x: isinstance(x, list) and lo <= len(x) <= hi and all(item(e) for e in x)
    if t == "string":
        return lambda x: isinstance(x, str)
    if t == "boolean":
        return lambda x: isinstance(x, bool)
    if t in ("integer", "number"):
        lo, hi = schema.get("minimum", float("-inf")), schema.get("maximum", float("inf"))
        ok = (int,) if t == "integer" else (int, float)
        return lambda x: isinstance(x, ok) and not isinstance(x, bool) and lo <= x <= hi
    v = Draft202012Validator(schema)
    return v.is_valid


def validate_answer(obj: dict, schema: dict, check: Callable[[dict], str | None] | None = None) -> str | None:
    """None if ``obj`` matches ``schema`` (and ``check``); else a message naming the first problem."""
    entry = _VALIDATORS.get(id(schema))
    if entry is None or entry[0] is not schema:
        if len(_VALIDATORS) > 4096:
            _VALIDATORS.clear()
        entry = _VALIDATORS[id(schema)] = (schema, _compile(schema), None)  # holds schema: id stays unique
    if not entry[1](obj):
        err = next(iter(Draft202012Validator(schema).iter_errors(obj)), None)
        if err is not None:
            where = "/".join(str(p) for p in err.absolute_path) or "<answer>"
            return f"{where}: {err.message[:300]}"
    return check(obj) if check else None

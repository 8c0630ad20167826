"""Provider-neutral request specs, their cache keys and their OpenAI wire bodies.

A :class:`RequestSpec` is what an adapter wants to ask: system instructions, user parts (text and
image references) and the JSON schema of the answer. :func:`render_body` turns it into the body of a
Responses-API or Chat-Completions request. The static part of every request (instructions, then the
fixed prompt text) comes first so that the provider's prompt caching applies; what varies per item
(metadata, annotations, images) comes last.

Images are references (:class:`ImageRef`) until a request is actually sent: the cache key uses the
image's sha256 and the transport settings, so deciding what is cached never reads an image, and only
the requests that will be sent pay for reading, downscaling and base64-encoding.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..settings_schema import LLM, default, filled
from .cache import content_key
from .fastjson import dumps as fast_dumps

__all__ = ["ImageRef", "Text", "RequestSpec", "LLMSettings", "render_body", "request_key",
           "render_line", "request_key_reference", "encode_image", "fill_metadata", "METADATA_RE",
           "with_own_instructions",
           "estimate_input_tokens", "gemini_image_tokens"]

METADATA_RE = re.compile(r"\{metadata\.([A-Za-z0-9_]+)\}")
_NON_REASONING = ("gpt-4", "gpt-3.5", "chatgpt-")


@dataclass(frozen=True)
class ImageRef:
    sha256: str
    path: str | None = None          # local file (base64 transport)
    url: str | None = None           # public URL (url transport)
    width: int = 0
    height: int = 0


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class RequestSpec:
    system: str
    parts: tuple[Any, ...]            # Text | ImageRef, in order
    schema: dict
    schema_name: str


@dataclass(frozen=True)
class LLMSettings:
    """The subset of ``llm_common`` that shapes a request (and so its cache key)."""

    # the defaults are llm_common's (config/schema.yaml)
    model: str = default(f"{LLM}.model")
    api: str = default(f"{LLM}.api")
    base_url: str | None = default(f"{LLM}.base_url")
    max_output_tokens: int = default(f"{LLM}.max_output_tokens")
    reasoning_effort: str | None = default(f"{LLM}.reasoning_effort")
    temperature: float | None = default(f"{LLM}.temperature")
    image_detail: str = default(f"{LLM}.image_detail")
    image_transport: str = default(f"{LLM}.image_transport")
    image_max_side: int = default(f"{LLM}.image_max_side")
    # send ``prompt_cache_key`` (a digest of the stable prefix: system prompt and schema) so that the
    # requests of a stage land on the same prompt cache; default: on for api.openai.com (no base_url)
    prompt_cache_key: bool = False
    extra: dict = field(default_factory=dict)
    sends_reasoning: bool = field(default=False, init=False, compare=False)

    @classmethod
    def from_config(cls, s: Mapping[str, Any]) -> "LLMSettings":
        s = filled(LLM, s)
        return cls(
            model=s["model"], api=s["api"], base_url=s.get("base_url"),
            max_output_tokens=int(s["max_output_tokens"]),
            reasoning_effort=s["reasoning_effort"], temperature=s.get("temperature"),
            image_detail=s["image_detail"], image_transport=s["image_transport"],
            image_max_side=int(s["image_max_side"]),
            prompt_cache_key=(not s.get("base_url")) if s.get("prompt_cache_key") is None
            else bool(s["prompt_cache_key"]),
        )

    def __post_init__(self) -> None:
        object.__setattr__(self, "sends_reasoning",
                           bool(self.reasoning_effort) and not self.model.startswith(_NON_REASONING))


def fill_metadata(template: str, row: Mapping[str, Any], allowed: Sequence[str] | None = None) -> str:
    """Replace ``{metadata.<column>}`` with the row's value (missing/null -> 'unknown')."""

    def sub(m: re.Match) -> str:
        col = m.group(1)
        if allowed and col not in allowed:
            raise KeyError(f"prompt placeholder {{metadata.{col}}}: '{col}' is not in metadata_columns {list(allowed)}")
        v = row.get(col)
        if v is None or (isinstance(v, str) and not v.strip()):
            return "unknown"
        if isinstance(v, (list, tuple)):
            return ", ".join(map(str, v))
        return str(v)

    return METADATA_RE.sub(sub, template)


OWN_INSTRUCTIONS = "Further instructions for this benchmark (they refine the above, never the answer format):"


def with_own_instructions(built_in: str, own: str | None) -> str:
    """The system prompt: the built-in instructions (the task, the facet definitions, the column
    meanings: the fixed, cacheable prefix that every request shares) first, then the configured or
    imported ``prompts.system``, added after them instead of replacing them."""
    own = (own or "").strip()
    return f"{built_in}\n\n{OWN_INSTRUCTIONS}\n{own}" if own else built_in


def encode_image(ref: ImageRef, max_side: int) -> tuple[str, str]:
    """Read, downscale (longest side <= max_side) and encode an image; returns (mime, base64)."""
    from PIL import Image

    from ..imaging import decode

    if not ref.path:
        raise ValueError(f"image {ref.sha256[:12]}: base64 transport needs a local path")
    im = decode(ref.path)   # upright RGB, first frame, 16-bit scaled, transparency composited on white
    if max(im.size) > max_side:
        im.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=85)
    return "image/jpeg", base64.b64encode(buf.getvalue()).decode("ascii")


def _image_url(ref: ImageRef, s: LLMSettings) -> str:
    if s.image_transport == "url":
        if not ref.url:
            raise ValueError(f"image {ref.sha256[:12]}: image_transport 'url' but the image has no image_url")
        return ref.url
    mime, b64 = encode_image(ref, s.image_max_side)
    return f"data:{mime};base64,{b64}"


def _key_part(p: Any, s: LLMSettings) -> Any:
    if isinstance(p, Text):
        return ["t", p.text]
    # the image's content and how it is sent; never its path or name
    how = ["url", p.url] if s.image_transport == "url" else ["b64", s.image_max_side]
    return ["i", p.sha256, s.image_detail, *how]


_SCHEMA_MEMO: dict[int, tuple[dict, str, str]] = {}


def _schema_memo(schema: dict) -> tuple[str, str]:
    """(digest, JSON text) of a schema, computed once per schema object (schemas are shared)."""
    e = _SCHEMA_MEMO.get(id(schema))
    if e is None or e[0] is not schema:
        if len(_SCHEMA_MEMO) > 4096:
            _SCHEMA_MEMO.clear()
        text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
        e = _SCHEMA_MEMO[id(schema)] = (schema, content_key(schema), text)
    return e[1], e[2]


def _j(x: Any) -> str:
    """JSON exactly as :func:`content_key` writes a value (sorted keys, compact, unicode kept)."""
    return json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


# (id(settings), id(schema), system) -> (settings, schema, sha256 of the text before the parts, text after)
_KEY_MEMO: dict[tuple, tuple] = {}


def _key_frame(spec: RequestSpec, s: LLMSettings) -> tuple[Any, bytes]:
    """The constant text around ``parts`` in a request key's canonical JSON, hashed once per
    (settings, schema, system prompt): only the small per-item parts are serialised per request."""
    mk = (id(s), id(spec.schema), spec.schema_name, spec.system)
    e = _KEY_MEMO.get(mk)
    if e is None or e[0] is not s or e[1] is not spec.schema:
        if len(_KEY_MEMO) > 1024:
            _KEY_MEMO.clear()
        # the keys of the canonical object, sorted: api, base_url, max_output_tokens, model, parts,
        # reasoning, schema, schema_name, system, temperature, v
        head = (f'{{"api":{_j(s.api)},"base_url":{_j(s.base_url or "")},'
                f'"max_output_tokens":{_j(s.max_output_tokens)},"model":{_j(s.model)},"parts":')
        tail = (f',"reasoning":{_j(s.reasoning_effort if s.sends_reasoning else None)},'
                f'"schema":{_j(_schema_memo(spec.schema)[0])},"schema_name":{_j(spec.schema_name)},'
                f'"system":{_j(spec.system)},"temperature":{_j(s.temperature)},"v":1}}')
        e = _KEY_MEMO[mk] = (s, spec.schema, hashlib.sha256(head.encode("utf-8")), tail.encode("utf-8"))
    return e[2], e[3]


def request_key(spec: RequestSpec, s: LLMSettings) -> str:
    """Content key of a request: model, server, sampling, prompts, schema, image digests.

    Equal to ``content_key({"v": 1, "api": …, "parts": […], …})`` (the canonical JSON of those
    fields, see :func:`request_key_reference`), computed without re-serialising the static fields."""
    h0, tail = _key_frame(spec, s)
    h = h0.copy()
    h.update(_j([_key_part(p, s) for p in spec.parts]).encode("utf-8"))
    h.update(tail)
    return h.hexdigest()


def request_key_reference(spec: RequestSpec, s: LLMSettings) -> str:
    """The definition of :func:`request_key` (slow; tests check that both agree)."""
    return content_key({
        "v": 1, "api": s.api, "base_url": s.base_url or "", "model": s.model,
        "max_output_tokens": s.max_output_tokens,
        "reasoning": s.reasoning_effort if s.sends_reasoning else None, "temperature": s.temperature,
        "system": spec.system, "parts": [_key_part(p, s) for p in spec.parts],
        "schema_name": spec.schema_name, "schema": _schema_memo(spec.schema)[0],
    })


_SENTINEL = "\u0000schema\u0000"
_CONTENT = "\u0000content\u0000"
# (id(settings), id(schema), schema_name, system) -> (settings, schema, body text before / after the content)
_LINE_MEMO: dict[tuple, tuple] = {}


def _line_frame(spec: RequestSpec, s: LLMSettings) -> tuple[str | None, str | None]:
    mk = (id(s), id(spec.schema), spec.schema_name, spec.system)
    e = _LINE_MEMO.get(mk)
    if e is None or e[0] is not s or e[1] is not spec.schema:
        if len(_LINE_MEMO) > 1024:
            _LINE_MEMO.clear()
        from ..io import dumps

        frame = RequestSpec(system=spec.system, parts=(), schema=spec.schema, schema_name=spec.schema_name)
        text = dumps(render_body(frame, s, schema=_SENTINEL, content=_CONTENT))
        sen, con = json.dumps(_SENTINEL), json.dumps(_CONTENT)
        if text.count(sen) == 1 and text.count(con) == 1:     # (a prompt holding a sentinel: no frame)
            before, after = text.replace(sen, _schema_memo(spec.schema)[1], 1).split(con, 1)
            e = _LINE_MEMO[mk] = (s, spec.schema, before, after)
        else:
            e = _LINE_MEMO[mk] = (s, spec.schema, None, None)
    return e[2], e[3]


def render_line(spec: RequestSpec, s: LLMSettings, head: str) -> str:
    """``head`` + the JSON body + ``}\n``: the static body (instructions, schema, settings) is
    serialised once per (settings, schema, system prompt); per request only the user content is."""
    from ..io import dumps

    before, after = _line_frame(spec, s)
    if before is None:
        return head + dumps(render_body(spec, s)) + "}\n"
    return head + before + fast_dumps(_content(spec, s)) + after + "}\n"


def _content(spec: RequestSpec, s: LLMSettings) -> list[dict]:
    content: list[dict] = []
    if s.api == "chat":
        for p in spec.parts:
            if isinstance(p, Text):
                content.append({"type": "text", "text": p.text})
            else:
                content.append({"type": "image_url", "image_url": {"url": _image_url(p, s), "detail": s.image_detail}})
    else:
        for p in spec.parts:
            if isinstance(p, Text):
                content.append({"type": "input_text", "text": p.text})
            else:
                content.append({"type": "input_image", "image_url": _image_url(p, s), "detail": s.image_detail})
    return content


def render_body(spec: RequestSpec, s: LLMSettings, schema: Any = None, content: Any = None) -> dict:
    """The request body for ``s.api`` (reads and encodes images when the transport is base64)."""
    schema = spec.schema if schema is None else schema
    content = _content(spec, s) if content is None else content
    if s.api == "chat":
        body: dict[str, Any] = {
            "model": s.model,
            "messages": [{"role": "system", "content": spec.system}, {"role": "user", "content": content}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": spec.schema_name, "schema": schema, "strict": True}},
            "max_completion_tokens": s.max_output_tokens,
        }
        if s.sends_reasoning:
            body["reasoning_effort"] = s.reasoning_effort
    else:
        body = {
            "model": s.model,
            "instructions": spec.system,
            "input": [{"role": "user", "content": content}],
            "text": {"format": {"type": "json_schema", "name": spec.schema_name, "schema": schema,
                                "strict": True}},
            "max_output_tokens": s.max_output_tokens,
            "store": False,
        }
        if s.sends_reasoning:
            body["reasoning"] = {"effort": s.reasoning_effort}
    if s.temperature is not None:
        body["temperature"] = s.temperature
    if s.prompt_cache_key:
        body["prompt_cache_key"] = cache_key_of(spec)
    return body


def cache_key_of(spec: RequestSpec) -> str:
    """``prompt_cache_key``: the stage's schema name and a digest of what leads every request (the
    schema and the system prompt); the same for every request that shares that prefix."""
    digest, _ = _schema_memo(spec.schema)
    return f"bm-{spec.schema_name}-" + hashlib.sha256((digest + spec.system).encode("utf-8")).hexdigest()[:20]


def _image_tokens(ref: ImageRef, s: LLMSettings) -> int:
    """OpenAI's tile rule: low = 85; high = 85 + 170 per 512-px tile after fitting 2048 / 768."""
    if s.image_detail == "low":
        return 85
    w, h = ref.width or s.image_max_side, ref.height or s.image_max_side
    if s.image_transport != "url" and max(w, h) > s.image_max_side:
        f = s.image_max_side / max(w, h)
        w, h = w * f, h * f
    if max(w, h) > 2048:
        f = 2048 / max(w, h)
        w, h = w * f, h * f
    if min(w, h) > 768:
        f = 768 / min(w, h)
        w, h = w * f, h * f
    tiles = -(-int(w) // 512) * -(-int(h) // 512)
    return 85 + 170 * tiles


def gemini_image_tokens(ref: ImageRef, s: LLMSettings) -> int:
    """Gemini's rule. ``image_detail`` is sent as the request's ``media_resolution``
    (providers/gemini/wire.py), and that decides first: before Gemini 3, ``MEDIA_RESOLUTION_LOW`` is
    64 tokens per image and ``MEDIA_RESOLUTION_MEDIUM`` / ``_HIGH`` 256 (the API reference's
    ``MediaResolution``, https://ai.google.dev/api/generate-content#MediaResolution); Gemini 3
    counts a fixed budget per media resolution (https://ai.google.dev/gemini-api/docs/media-resolution):
    low 280, medium 560, high (their default for images) 1,120. With no media resolution sent
    (``image_detail: auto``), https://ai.google.dev/gemini-api/docs/tokens ("Image"): an image with
    both sides <= 384 px is 258 tokens, a larger one is cut into 768 x 768 tiles of 258 tokens each
    (after the downscale to ``image_max_side`` when it is sent inline)."""
    if s.model.removeprefix("models/").startswith("gemini-3"):
        return {"low": 280, "medium": 560}.get(s.image_detail or "", 1120)
    fixed = {"low": 64, "high": 256}.get(s.image_detail or "")
    if fixed is not None:
        return fixed
    w, h = ref.width or s.image_max_side, ref.height or s.image_max_side
    if s.image_transport != "url" and max(w, h) > s.image_max_side:
        f = s.image_max_side / max(w, h)
        w, h = w * f, h * f
    if w <= 384 and h <= 384:
        return 258
    return -(-int(w) // 768) * -(-int(h) // 768) * 258


def estimate_input_tokens(spec: RequestSpec, s: LLMSettings, provider: str = "openai") -> int:
    """A rough input-token count: 4 characters per text token, and each provider's own rule for
    images (OpenAI's tiles of 512 px; Gemini's 258-token tiles of 768 px)."""
    chars = len(spec.system) + len(_schema_memo(spec.schema)[1]) + 40
    img = 0
    per_image = gemini_image_tokens if provider == "gemini" else _image_tokens
    for p in spec.parts:
        if isinstance(p, Text):
            chars += len(p.text)
        else:
            img += per_image(p, s)
    return chars // 4 + img

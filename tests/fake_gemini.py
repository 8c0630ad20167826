"""A fake Gemini API (stdlib ThreadingHTTPServer on 127.0.0.1) for the real google-genai SDK.

Routes (under ``/v1/`` and ``/v1beta/``): ``POST models/{model}:generateContent``,
``POST models/{model}:batchGenerateContent`` (inline requests), ``GET batches/{id}``,
``GET batches`` (list), ``POST batches/{id}:cancel``. Every request must carry the key in
``x-goog-api-key``. Answers are generated from the request's ``responseJsonSchema`` (or OpenAPI-style
``responseSchema``); ``answer(body, schema)`` overrides. Batch jobs go PENDING -> RUNNING ->
SUCCEEDED, one step per ``GET`` (``steps``). Failure injection: ``fail(body) -> kind`` with kinds
``invalid_json``, ``schema``, ``max_tokens``, ``safety``, ``blocked``, ``http_400``, ``http_500``,
``http_503``; ``rate_limit`` (the next N generateContent calls answer 429 RESOURCE_EXHAUSTED with a
``RetryInfo`` delay of ``retry_delay``); ``batch_end`` (the next job to finish ends ``EXPIRED`` /
``FAILED`` / ``CANCELLED`` with only its first ``batch_keep`` requests processed). As the Batch API
page says (https://ai.google.dev/gemini-api/docs/batch-api, "Job status": an expired job "will not
have any results to retrieve"), an ``EXPIRED`` job returns no output, though the requests it processed
are billed; its ``batchStats`` say how many. ``log`` holds (method, path, json body) of every request,
``headers`` the headers; ``bill`` every billed model call (usage and USD at the list price, half for
batch rows), which tests compare with the cost files.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import support

KEY = "gm-test-key-0123456789"
USAGE = {"promptTokenCount": 1000, "cachedContentTokenCount": 200, "candidatesTokenCount": 100,
         "thoughtsTokenCount": 50}
# the provider's list prices, USD per 1M tokens (input, cached input, output); batch rows cost half
PRICES = {"gemini-2.5-flash": (0.30, 0.03, 2.50)}


def instance(schema: dict, path: str = "") -> Any:
    """A deterministic valid instance of a strict JSON schema (or an OpenAPI-style one)."""
    t = str(schema.get("type", "")).lower()
    if "enum" in schema:
        vals = schema["enum"]
        return vals[len(path) % len(vals)] if t != "integer" else vals[-1]
    if t == "object":
        return {k: instance(v, f"{path}/{k}") for k, v in (schema.get("properties") or {}).items()}
    if t == "array":
        n = max(int(schema.get("minItems", schema.get("min_items", 1))), 1)
        items = schema.get("items", {"type": "string"})
        if "enum" in items:
            return items["enum"][:n]
        if str(items.get("type", "string")).lower() != "string":
            return [instance(items, f"{path}/{i}") for i in range(n)]
        return [f"tag{i}" for i in range(n)]
    if t == "boolean":
        return len(path) % 2 == 0
    if t == "integer":
        return int(schema.get("maximum", 1))
    if t == "number":
        return 0.9
    return f"text for {path.strip('/') or 'answer'}"


def request_schema(req: dict) -> dict:
    gc = req.get("generationConfig") or {}
    return gc.get("responseJsonSchema") or gc.get("responseSchema") or {}


def request_text(req: dict) -> str:
    return " ".join(p.get("text", "") for c in req.get("contents", []) for p in c.get("parts", []))


def data_keys(text: str) -> list[str]:
    """The candidate keys of a judge request, read from its ``DATA (JSON):`` part (as a model would)."""
    i = text.find("CANDIDATES:")
    if i >= 0:                                # benchmaker's table: one "cNN | …" row per candidate
        return re.findall(r"^(c\d+) \|", text[i:], flags=re.M)
    i = text.find("DATA (JSON):")
    if i < 0:
        return []
    try:
        data = json.JSONDecoder().raw_decode(text[i + len("DATA (JSON):"):].lstrip())[0]
    except ValueError:
        return []
    return list((data.get("candidates") or {}).keys())


def answer_for(text: str, schema: dict) -> Any:
    """A valid answer: :func:`instance` (a judge's ``judgments`` object names the candidate keys in its
    schema), or, for a ``judgments`` list, one entry per candidate key of the request's DATA."""
    obj = instance(schema)
    j = (schema.get("properties") or {}).get("judgments")
    if isinstance(obj, dict) and j and str(j.get("type", "")).lower() == "array":
        obj["judgments"] = [{**instance(j["items"], "/judgments"), "key": k} for k in data_keys(text)]
    return obj


def inline_images(req: dict) -> list[bytes]:
    out = []
    for c in req.get("contents", []):
        for p in c.get("parts", []):
            d = p.get("inlineData") or p.get("inline_data")
            if d:
                out.append(base64.urlsafe_b64decode(d["data"]))
    return out


def gemini_image_tokens(model: str, media_resolution: str | None, data: bytes | None) -> int:
    """Input tokens of one image, Gemini's documented rule. Gemini 3 by media resolution
    (https://ai.google.dev/gemini-api/docs/media-resolution): low 280, medium 560, else 1,120. Earlier
    models: ``MEDIA_RESOLUTION_LOW`` 64, ``_MEDIUM`` / ``_HIGH`` 256 (the API reference's
    ``MediaResolution``, https://ai.google.dev/api/generate-content#MediaResolution); none set:
    https://ai.google.dev/gemini-api/docs/tokens ("Image"), 258 when both sides are <= 384 px, else
    258 per 768 x 768 tile. The size is read from the inline image itself; an image by URI (not
    fetched here) counts as one tile."""
    mr = (media_resolution or "").removeprefix("MEDIA_RESOLUTION_").lower()
    if model.removeprefix("models/").startswith("gemini-3"):
        return {"low": 280, "medium": 560}.get(mr, 1120)
    if mr in ("low", "medium", "high"):
        return 64 if mr == "low" else 256
    if data is None:
        return 258
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        w, h = im.size
    if w <= 384 and h <= 384:
        return 258
    return -(-w // 768) * -(-h // 768) * 258


class Fake:
    def __init__(self, steps: int = 2):
        self.steps = steps
        self.log: list[tuple[str, str, Any]] = []
        self.headers: list[dict] = []
        self.batches: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.answer: Callable[[dict, dict], Any] = self._default_answer
        self.fail: Callable[[dict], str | None] = lambda req: None
        self.rate_limit = 0
        self.retry_delay = "0.05s"
        self.batch_end: str | None = None
        self.batch_keep = 0
        self.usage = dict(USAGE)
        # count_tokens: usage from the request (tokens_of) and answers of a model's typical length
        # (support.typical_answer) instead of USAGE; thoughts_tokens per answer
        self.count_tokens = False
        self.thoughts_tokens: int | Callable[[dict], int] = 64      # per answer, or a function of the request
        # a model's answer and thinking lengths (support.LengthModel: seeded, unknown to benchmaker);
        # when set, it decides them instead of ``thoughts_tokens``
        self.lengths: support.LengthModel | None = None
        self.prefixes: dict[str, set] = {}
        self.bill: list[dict] = []
        self.server: ThreadingHTTPServer | None = None

    @staticmethod
    def _default_answer(req: dict, schema: dict) -> Any:
        return answer_for(request_text(req), schema)

    def tokens_of(self, req: dict, model: str) -> tuple[int, int]:
        """(prompt tokens, cached tokens) of a request, counted as Gemini bills them: ~4 characters
        per text token (https://ai.google.dev/gemini-api/docs/tokens), images by
        :func:`gemini_image_tokens`; the response schema, the system instruction, then the parts in
        order. Implicit caching (https://ai.google.dev/gemini-api/docs/caching, "Implicit caching"):
        the longest run of leading parts seen before under the same model, once it has at least
        1,024 tokens (the minimum for Flash models) is billed as cached."""
        gc = req.get("generationConfig") or {}
        si = req.get("systemInstruction") or {}
        units = [len(json.dumps(request_schema(req), separators=(",", ":"))) / 4,
                 len(" ".join(p.get("text", "") for p in si.get("parts", []))) / 4]
        keys = [json.dumps(request_schema(req), sort_keys=True), json.dumps(si, sort_keys=True)]
        for c in req.get("contents", []):
            for p in c.get("parts", []):
                d = p.get("inlineData") or p.get("inline_data")
                if d:
                    units.append(gemini_image_tokens(model, gc.get("mediaResolution"),
                                                     base64.urlsafe_b64decode(d["data"])))
                elif p.get("fileData") or p.get("file_data"):
                    units.append(gemini_image_tokens(model, gc.get("mediaResolution"), None))
                else:
                    units.append(len(p.get("text", "")) / 4)
                keys.append(json.dumps(p, sort_keys=True))
        total = round(sum(units))
        seen = self.prefixes.setdefault(model, set())
        cached = acc = 0.0
        h = ""
        for n, k in zip(units, keys):
            h = hashlib.sha1((h + k).encode()).hexdigest()
            acc += n
            if h in seen and acc >= 1024:
                cached = acc
            seen.add(h)
        return total, round(cached)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def count(self, method: str, path_re: str) -> int:
        return sum(1 for m, p, _ in self.log if m == method and re.fullmatch(path_re, p))

    def generate_calls(self) -> list[dict]:
        return [b for m, p, b in self.log if m == "POST" and p.endswith(":generateContent")]

    def billed_usd(self) -> float:
        return sum(b["usd"] for b in self.bill)

    def _charge(self, model: str, mode: str) -> None:
        u = self.usage
        p_in, p_cached, p_out = PRICES.get(model.removeprefix("models/"), (0.0, 0.0, 0.0))
        usd = ((u["promptTokenCount"] - u["cachedContentTokenCount"]) * p_in + u["cachedContentTokenCount"] * p_cached
               + (u["candidatesTokenCount"] + u["thoughtsTokenCount"]) * p_out) / 1e6
        self.bill.append({"model": model, "mode": mode, "usd": usd * (0.5 if mode == "batch" else 1.0)})

    def respond(self, req: dict, model: str = "", mode: str = "sync") -> tuple[int, dict]:
        """(status, body) of one model call, honouring ``fail``; a 200 is billed."""
        kind = self.fail(req)
        if kind in ("http_400", "http_500", "http_503"):
            code = int(kind[5:])
            status = {400: "INVALID_ARGUMENT", 500: "INTERNAL", 503: "UNAVAILABLE"}[code]
            return code, {"error": {"code": code, "message": f"fake {status.lower()}", "status": status}}
        text = None
        if self.count_tokens:
            n_in, n_cached = self.tokens_of(req, model)
            th = self.thoughts_tokens
            digest = hashlib.sha1(json.dumps(req, sort_keys=True).encode()).hexdigest()
            keys = data_keys(request_text(req))
            if self.answer is self._default_answer:
                obj = support.typical_answer(request_schema(req), digest, keys,
                                             wordiness=self.lengths.wordiness if self.lengths else 1.0)
                text = json.dumps(obj)
            else:
                text = json.dumps(self.answer(req, request_schema(req)))
            if self.lengths is not None:     # the model reasons by its thinking budget, as the fake's model does
                tc = (req.get("generationConfig") or {}).get("thinkingConfig") or {}
                budget = tc.get("thinkingBudget", tc.get("thinking_budget"))
                n_th = self.lengths.reasoning(None if budget is None else f"budget {budget}", digest, len(keys))
            else:
                n_th = int(th(req) if callable(th) else th)
            self.usage = {"promptTokenCount": n_in, "cachedContentTokenCount": n_cached,
                          "candidatesTokenCount": -(-len(text) // 4), "thoughtsTokenCount": n_th}
        self._charge(model, mode)
        usage = dict(self.usage)
        usage["totalTokenCount"] = usage["promptTokenCount"] + usage["candidatesTokenCount"] + usage[
            "thoughtsTokenCount"]
        if kind == "blocked":
            return 200, {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": usage}
        if text is None:
            text = json.dumps(self.answer(req, request_schema(req)))
        finish = "STOP"
        if kind == "invalid_json":
            text = text[: len(text) // 2]
        elif kind == "schema":
            obj = json.loads(text)
            obj.pop(next(iter(obj)))
            text = json.dumps(obj)
        elif kind == "max_tokens":
            text, finish = text[:10], "MAX_TOKENS"
        elif kind == "safety":
            text, finish = "", "SAFETY"
        cand: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}] if text else []},
                                "finishReason": finish, "index": 0}
        if kind == "safety":
            cand["safetyRatings"] = [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH",
                                      "blocked": True}]
        return 200, {"candidates": [cand], "usageMetadata": usage, "modelVersion": "fake-gemini",
                     "responseId": f"r{next(self.ids)}"}

    # -- batches -----------------------------------------------------------------------------
    def op(self, b: dict) -> dict:
        md = {"@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
              "model": b["model"], "displayName": b["displayName"], "state": b["state"],
              "createTime": b["createTime"], "name": b["name"]}
        out: dict[str, Any] = {"name": b["name"], "metadata": md}
        if "stats" in b:
            md["batchStats"] = b["stats"]
        if "output" in b:
            md["output"] = b["output"]
            out["done"] = True
        if b.get("error"):
            out["error"] = b["error"]
            out["done"] = True
        return out

    def advance(self, b: dict) -> None:
        if b["state"] in ("BATCH_STATE_SUCCEEDED", "BATCH_STATE_FAILED", "BATCH_STATE_CANCELLED",
                          "BATCH_STATE_EXPIRED"):
            return
        b["_polls"] += 1
        if b["_polls"] >= self.steps:
            end = self.batch_end
            self.batch_end = None
            self._finish(b, {"expired": "BATCH_STATE_EXPIRED", "failed": "BATCH_STATE_FAILED",
                             "cancelled": "BATCH_STATE_CANCELLED"}.get(end or "", "BATCH_STATE_SUCCEEDED"))
        else:
            b["state"] = "BATCH_STATE_RUNNING"

    def _finish(self, b: dict, state: str) -> None:
        reqs = b["_requests"]
        if state != "BATCH_STATE_SUCCEEDED":
            reqs = reqs[: self.batch_keep]
        rows = []
        for r in reqs:
            code, body = self.respond(r["request"], b["model"], "batch")
            if code == 200:
                rows.append({"response": body, "metadata": r.get("metadata") or {}})
            else:
                rows.append({"error": body["error"], "metadata": r.get("metadata") or {}})
        ok = sum("response" in r for r in rows)
        b["stats"] = {"requestCount": str(len(b["_requests"])), "successfulRequestCount": str(ok),
                      "failedRequestCount": str(len(rows) - ok),
                      "pendingRequestCount": str(len(b["_requests"]) - len(rows))}
        if state == "BATCH_STATE_EXPIRED":
            rows = []                       # processed and billed, but an expired job returns nothing
        b["output"] = {"inlinedResponses": {"inlinedResponses": rows}}
        if state == "BATCH_STATE_FAILED":
            b["error"] = {"code": 13, "message": "fake batch failure"}
        b["state"] = state


def _handler(fake: Fake):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _send(self, code: int, obj: Any, headers: dict | None = None):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _auth(self) -> bool:
            if self.headers.get("x-goog-api-key") != KEY:
                self._send(400, {"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT"}})
                return False
            return True

        def _route(self, method: str):
            path = self.path.split("?")[0]
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            body = json.loads(raw) if raw else None
            with fake.lock:
                fake.log.append((method, path, body))
                fake.headers.append(dict(self.headers))
            if not self._auth():
                return
            m = re.fullmatch(r"/v1(?:beta)?/models/([^/:]+):(generateContent|batchGenerateContent)", path)
            if method == "POST" and m and m.group(2) == "generateContent":
                with fake.lock:
                    if fake.rate_limit > 0:
                        fake.rate_limit -= 1
                        return self._send(429, {"error": {
                            "code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                            "status": "RESOURCE_EXHAUSTED",
                            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                         "retryDelay": fake.retry_delay}]}})
                code, out = fake.respond(body, m.group(1), "sync")
                return self._send(code, out)
            if method == "POST" and m:
                batch = body["batch"]
                reqs = batch["inputConfig"]["requests"]["requests"]
                with fake.lock:
                    bid = f"batches/fake{next(fake.ids)}"
                    b = {"name": bid, "model": f"models/{m.group(1)}", "displayName": batch.get("displayName", ""),
                         "state": "BATCH_STATE_PENDING", "createTime": "2026-01-01T00:00:00Z", "_polls": 0,
                         "_requests": reqs}
                    fake.batches[bid] = b
                    return self._send(200, fake.op(b))
            m = re.fullmatch(r"/v1(?:beta)?/(batches/[^/:]+)(:cancel)?", path)
            if m:
                with fake.lock:
                    b = fake.batches.get(m.group(1))
                    if b is None:
                        return self._send(404, {"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}})
                    if method == "POST" and m.group(2):
                        fake._finish(b, "BATCH_STATE_CANCELLED")
                        return self._send(200, {})
                    fake.advance(b)
                    return self._send(200, fake.op(b))
            if method == "GET" and re.fullmatch(r"/v1(?:beta)?/batches", path):
                with fake.lock:
                    ops = [fake.op(b) for b in reversed(list(fake.batches.values()))]
                return self._send(200, {"operations": ops})
            return self._send(404, {"error": {"code": 404, "message": f"no route {path}", "status": "NOT_FOUND"}})

        def do_GET(self):
            self._route("GET")

        def do_POST(self):
            self._route("POST")

    return H


def start(steps: int = 2) -> Fake:
    fake = Fake(steps=steps)
    fake.server = support.serve(_handler(fake))
    return fake


def stop(fake: Fake) -> None:
    support.shutdown(fake.server)

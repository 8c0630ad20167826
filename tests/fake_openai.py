"""A fake OpenAI server (stdlib ThreadingHTTPServer on 127.0.0.1) for the real openai SDK.

Implements: POST /v1/responses, POST /v1/chat/completions, POST /v1/files (multipart), GET /v1/files,
GET /v1/files/{id}/content, POST /v1/batches, GET /v1/batches, GET /v1/batches/{id},
POST /v1/batches/{id}/cancel. Answers are generated from the request's JSON schema (``answer`` hook to
override). Batches progress validating -> in_progress -> finalizing -> completed, one step per
retrieve (``steps``). Knobs for failure injection: ``fail`` (custom_id / request predicate -> error
kind), ``rate_limit`` (next N sync calls answer 429 with Retry-After), ``expire_after`` (a batch
expires with only its first K requests answered), ``faults`` (a list of (method, path regex, status)
consumed in order: the next matching call of *any* endpoint answers that status, 429 with
Retry-After), ``drop_after_billing`` (the next N sync calls are billed, then the connection is
closed without an answer), ``hold_after`` (sync calls billed after the first N wait for ``release``:
requests in flight, for kill tests). Every request is logged in ``log``; every answered model call is billed
in ``bill`` (usage and USD at the model's list price, half for batch rows), which tests compare
with the cost files.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import itertools
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import support

# a model's structured output is compact JSON, no space after ':' or ',' (as api.openai.com writes
# output_text, e.g. '{"name":"Science Fair","participants":["Alice","Bob"]}'): output tokens are counted on that
COMPACT = (",", ":")
USAGE = {"input_tokens": 1000, "cached_tokens": 200, "output_tokens": 150, "reasoning_tokens": 50}
# the provider's list prices, USD per 1M tokens (input, cached input, output); batch rows cost half
PRICES = {"gpt-5-mini": (0.25, 0.025, 2.00), "gpt-4.1-mini": (0.40, 0.10, 1.60)}


def instance(schema: dict, path: str = "") -> Any:
    """A deterministic valid instance of a (strict) JSON schema."""
    t = schema.get("type")
    if "enum" in schema:
        vals = schema["enum"]
        return vals[len(path) % len(vals)] if t != "integer" else vals[-1]
    if t == "object":
        return {k: instance(v, f"{path}/{k}") for k, v in schema.get("properties", {}).items()}
    if t == "array":
        n = max(schema.get("minItems", 1), 1)
        items = schema.get("items", {"type": "string"})
        if "enum" in items:
            return items["enum"][:n]
        if str(items.get("type", "string")).lower() != "string":
            return [instance(items, f"{path}/{i}") for i in range(n)]
        return [f"tag{i}" for i in range(n)]
    if t == "boolean":
        return len(path) % 2 == 0
    if t == "integer":
        return 1
    if t == "number":
        return 0.9
    return f"text for {path.strip('/') or 'answer'}"


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
    cands = data.get("candidates") or {} if isinstance(data, dict) else {}
    if isinstance(cands, list):               # upstream's layout: a list of {image_id, ...} rows
        return [str(c.get("image_id")) for c in cands if isinstance(c, dict) and c.get("image_id") is not None]
    return list(cands.keys())


def answer_for(text: str, schema: dict) -> Any:
    """A valid answer: :func:`instance` (a judge's ``judgments`` object names the candidate keys in its
    schema), or, for a ``judgments`` list, one entry per candidate key of the request's DATA."""
    obj = instance(schema)
    j = (schema.get("properties") or {}).get("judgments")
    if isinstance(obj, dict) and j and str(j.get("type", "")).lower() == "array":
        obj["judgments"] = [{**instance(j["items"], "/judgments"), "key": k} for k in data_keys(text)]
    return obj


def request_text(body: dict) -> str:
    """Every text of a Responses or Chat Completions body (instructions / system, then the input)."""
    out = [str(body.get("instructions") or "")]
    for m in body.get("input") or body.get("messages") or []:
        c = m.get("content")
        if isinstance(c, str):
            out.append(c)
            continue
        for part in c or []:
            if part.get("type") in ("input_text", "text"):
                out.append(part.get("text", ""))
    return "\n".join(out)


def request_schema(body: dict) -> tuple[dict, str]:
    if "text" in body:
        f = body["text"]["format"]
        return f["schema"], "responses"
    return body["response_format"]["json_schema"]["schema"], "chat"


def openai_image_tokens(url: str, detail: str | None) -> int:
    """Input tokens of one image, OpenAI's documented rule (https://platform.openai.com/docs/guides/images-vision,
    "Calculating costs"): 85 at ``detail: low``; otherwise the image is fitted within 2048 x 2048, then
    its shortest side scaled to 768 px (when larger), and it costs 85 + 170 per 512-px tile. The size is
    read from the image itself (a data URL); an image sent by URL (not fetched here) counts as 768 x 768."""
    if detail == "low":
        return 85
    w = h = 768
    if url.startswith("data:"):
        import base64
        import io

        from PIL import Image

        with Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) as im:
            w, h = im.size
    if max(w, h) > 2048:
        w, h = w * 2048 / max(w, h), h * 2048 / max(w, h)
    if min(w, h) > 768:
        w, h = w * 768 / min(w, h), h * 768 / min(w, h)
    return 85 + 170 * (-(-int(w) // 512)) * (-(-int(h) // 512))


class Fake:
    def __init__(self, steps: int = 3):
        self.steps = steps
        self.log: list[tuple[str, str, Any]] = []
        self.files: dict[str, dict] = {}
        self.batches: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.answer: Callable[[dict, dict], Any] = self._default_answer
        self.fail: Callable[[str, dict], str | None] = lambda custom_id, body: None
        self.rate_limit = 0
        self.retry_after = "0.05"
        self.expire_after: int | None = None
        self.usage = dict(USAGE)
        self.faults: list[tuple[str, str, int]] = []
        self.drop_after_billing = 0
        self.bill: list[dict] = []
        self.delay = 0.0                     # seconds each sync call takes
        # sync calls billed after the first ``hold_after`` are held (not answered) until ``release`` is
        # set: a deterministic "in flight" for kill tests
        self.hold_after: int | None = None
        self.release = threading.Event()
        # kill tests: ``kill_at = (kind, k, callback)``: at the k-th event of that kind the server calls
        # ``callback()`` (which kills the client) and answers nothing. Kinds: "upload" (a batch input
        # file, stored first), "create" (a batch, created first: the client never hears of it),
        # "poll_done" (a poll that finds a batch terminal), "download" (an output file), "sync" (a
        # model call, before it is billed)
        self.kill_at: tuple[str, int, Callable[[], None]] | None = None
        self.killed: list[str] = []
        self.count_tokens = False            # usage from the request (tokens_of) instead of USAGE
        self.reasoning_tokens: int | Callable[[dict], int] = 64      # per answer, or a function of the body
        # a model's answer and reasoning lengths (support.LengthModel: seeded, unknown to benchmaker);
        # when set, it decides them instead of ``reasoning_tokens``
        self.lengths: support.LengthModel | None = None
        self.prefixes: dict[tuple, set] = {}
        self.server: ThreadingHTTPServer | None = None

    @staticmethod
    def _default_answer(body: dict, schema: dict) -> Any:
        return answer_for(request_text(body), schema)

    # -- helpers ---------------------------------------------------------------------------------
    def count(self, method: str, path_re: str) -> int:
        return sum(1 for m, p, _ in self.log if m == method and re.fullmatch(path_re, p))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def _usage(self, api: str) -> dict:
        u = self.usage
        if api == "chat":
            return {"prompt_tokens": u["input_tokens"], "completion_tokens": u["output_tokens"],
                    "total_tokens": u["input_tokens"] + u["output_tokens"],
                    "prompt_tokens_details": {"cached_tokens": u["cached_tokens"]},
                    "completion_tokens_details": {"reasoning_tokens": u["reasoning_tokens"]}}
        return {"input_tokens": u["input_tokens"], "output_tokens": u["output_tokens"],
                "total_tokens": u["input_tokens"] + u["output_tokens"],
                "input_tokens_details": {"cached_tokens": u["cached_tokens"]},
                "output_tokens_details": {"reasoning_tokens": u["reasoning_tokens"]}}

    def billed_usd(self) -> float:
        return sum(b["usd"] for b in self.bill)

    def _charge(self, model: str, mode: str, custom_id: str) -> None:
        u = self.usage
        p_in, p_cached, p_out = PRICES.get(model, (0.0, 0.0, 0.0))
        usd = ((u["input_tokens"] - u["cached_tokens"]) * p_in + u["cached_tokens"] * p_cached
               + u["output_tokens"] * p_out) / 1e6
        self.bill.append({"model": model, "mode": mode, "custom_id": custom_id,
                          "usd": usd * (0.5 if mode == "batch" else 1.0)})

    @staticmethod
    def check_batch_create(body: dict | None) -> str | None:
        """What the Batch API rejects at create (https://platform.openai.com/docs/api-reference/batch)."""
        if not isinstance(body, dict) or not body.get("input_file_id"):
            return "input_file_id is required"
        if body.get("endpoint") not in ("/v1/responses", "/v1/chat/completions", "/v1/embeddings",
                                        "/v1/completions"):
            return f"invalid endpoint {body.get('endpoint')!r}"
        if body.get("completion_window") != "24h":
            return "completion_window must be '24h'"
        md = body.get("metadata") or {}
        if len(md) > 16 or any(len(k) > 64 or not isinstance(v, str) or len(v) > 512 for k, v in md.items()):
            return "metadata: at most 16 pairs, keys <= 64 characters, string values <= 512 characters"
        return None

    @staticmethod
    def check_batch_file(content: bytes, endpoint: str) -> str | None:
        """Each line: a unique custom_id, method POST, the batch's url, a body naming a model."""
        ids = set()
        for n, line in enumerate(content.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                return f"line {n}: not valid JSON"
            cid = row.get("custom_id")
            if not isinstance(cid, str) or not cid or cid in ids:
                return f"line {n}: custom_id missing or not unique"
            ids.add(cid)
            if row.get("method") != "POST" or row.get("url") != endpoint:
                return f"line {n}: method must be POST and url must be the batch's endpoint {endpoint}"
            if not isinstance(row.get("body"), dict) or not row["body"].get("model"):
                return f"line {n}: body with a model is required"
        return None if ids else "the input file has no requests"

    def kill_point(self, kind: str) -> bool:
        """True (and the client killed) when this event is the armed kill point."""
        if self.kill_at is None or self.kill_at[0] != kind:
            return False
        k, cb = self.kill_at[1] - 1, self.kill_at[2]
        if k > 0:
            self.kill_at = (kind, k, cb)
            return False
        self.kill_at = None
        self.killed.append(kind)
        cb()
        return True

    def fault(self, method: str, path: str) -> int | None:
        for i, (m, rx, status) in enumerate(self.faults):
            if m == method and re.fullmatch(rx, path):
                del self.faults[i]
                return status
        return None

    # -- token counting as the provider does it (count_tokens = True) ------------------------------
    def tokens_of(self, body: dict) -> tuple[int, int, str]:
        """(input tokens, cached input tokens, prompt stream) of a request, counted the way OpenAI
        bills them: ~4 characters per text token, images by :func:`openai_image_tokens`; the structured-output
        schema is a prefix to the system message, then the instructions, then the input in order. The
        cached part is the longest prefix seen before under the same model and ``prompt_cache_key``,
        once the prompt has at least 1,024 tokens, in steps of 128 tokens."""
        schema, api = request_schema(body)
        units = [json.dumps(schema, separators=(",", ":")), str(body.get("instructions") or "")]
        for m in body.get("input") or body.get("messages") or []:
            c = m.get("content")
            for part in ([{"type": "text", "text": c}] if isinstance(c, str) else c or []):
                if part.get("type") in ("input_text", "text"):
                    units.append(part.get("text", ""))
                elif part.get("type") in ("input_image", "image_url"):
                    url = part.get("image_url")
                    detail = part.get("detail") or (url.get("detail") if isinstance(url, dict) else None)
                    url = url.get("url") if isinstance(url, dict) else url
                    tag = hashlib.sha1(str(url).encode()).hexdigest()
                    units.append(("<img " + tag + ">").ljust(openai_image_tokens(str(url), detail) * 4, "."))
        stream = "\x1e".join(units)
        n = -(-len(stream) // 4)
        space = (body.get("model"), body.get("prompt_cache_key") or "")
        seen = self.prefixes.setdefault(space, set())
        cached = 0
        b = 1024
        while b <= n:
            h = hashlib.sha1(stream[: 4 * b].encode()).digest()
            if h not in seen:
                break
            cached = b
            b += 128
        b = 1024
        while b <= n:
            seen.add(hashlib.sha1(stream[: 4 * b].encode()).digest())
            b += 128
        return n, cached, stream

    def respond(self, body: dict, custom_id: str = "", mode: str = "sync") -> tuple[int, dict]:
        """(status, body) of one model call, honouring ``fail``; a 200 is billed."""
        schema, api = request_schema(body)
        kind = self.fail(custom_id, body)
        if kind == "http_500":
            return 500, {"error": {"message": "server error", "type": "server_error"}}
        if kind == "http_400":
            return 400, {"error": {"message": "bad request", "type": "invalid_request_error"}}
        digest = hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()
        keys = data_keys(request_text(body))
        if self.count_tokens and self.answer is self._default_answer:
            # a model's typical answer length (support.typical_answer), varying per request
            obj = support.typical_answer(schema, digest, keys,
                                         wordiness=self.lengths.wordiness if self.lengths else 1.0)
            text = json.dumps(obj, separators=COMPACT)
        else:
            text = json.dumps(self.answer(body, schema), separators=COMPACT)
        if self.count_tokens:
            n_in, n_cached, _ = self.tokens_of(body)
            r = self.reasoning_tokens
            if self.lengths is not None:
                effort = (body.get("reasoning") or {}).get("effort") or body.get("reasoning_effort")
                n_reason = self.lengths.reasoning(effort, digest, len(keys))
            else:
                n_reason = int(r(body) if callable(r) else r)
            self.usage = {"input_tokens": n_in, "cached_tokens": n_cached,
                          "output_tokens": -(-len(text) // 4) + n_reason, "reasoning_tokens": n_reason}
        self._charge(body["model"], mode, custom_id)
        status = "completed"
        if kind == "invalid_json":
            text = text[: len(text) // 2]
        elif kind == "schema":
            obj = json.loads(text)
            obj.pop(next(iter(obj)))
            text = json.dumps(obj, separators=COMPACT)
        elif kind == "incomplete":
            text, status = text[:10], "incomplete"
        if api == "chat":
            return 200, {"id": f"chatcmpl-{next(self.ids)}", "object": "chat.completion", "created": int(time.time()),
                         "model": body["model"], "usage": self._usage(api),
                         "choices": [{"index": 0, "finish_reason": "length" if status == "incomplete" else "stop",
                                      "message": {"role": "assistant", "content": text}}]}
        out = {"id": f"resp_{next(self.ids)}", "object": "response", "created_at": int(time.time()),
               "model": body["model"], "status": status, "usage": self._usage(api),
               "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]}]}
        if status == "incomplete":
            out["incomplete_details"] = {"reason": "max_output_tokens"}
        return 200, out

    def advance(self, b: dict) -> None:
        order = ["validating", "in_progress", "finalizing", "completed"]
        if b["status"] in ("completed", "failed", "expired", "cancelled"):
            return
        if b["status"] == "cancelling":
            self._finish(b, "cancelled")
            return
        b["_polls"] += 1
        if b["_polls"] >= self.steps:
            self._finish(b, "expired" if self.expire_after is not None else "completed")
        else:
            b["status"] = order[min(b["_polls"], 2)]

    def _finish(self, b: dict, status: str) -> None:
        lines = [json.loads(x) for x in self.files[b["input_file_id"]]["content"].decode().splitlines() if x.strip()]
        if status in ("expired", "cancelled"):
            keep = self.expire_after if status == "expired" else len(lines) // 2
            lines = lines[: keep or 0]
            if status == "expired":
                self.expire_after = None  # only the first batch to finish expires
        out, err = [], []
        for ln in lines:
            code, body = self.respond(ln["body"], ln["custom_id"], mode="batch")
            row = {"id": f"batch_req_{next(self.ids)}", "custom_id": ln["custom_id"],
                   "response": {"status_code": code, "request_id": "req", "body": body}, "error": None}
            (out if code == 200 else err).append(row)
        for name, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                fid = f"file-{next(self.ids)}"
                self.files[fid] = {"id": fid, "filename": f"{b['id']}_{name}.jsonl", "purpose": "batch_output",
                                   "content": "".join(json.dumps(r) + "\n" for r in rows).encode()}
                b[name] = fid
        b["status"] = status
        b["request_counts"] = {"total": b["request_counts"]["total"], "completed": len(out), "failed": len(err)}

    def public(self, b: dict) -> dict:
        return {k: v for k, v in b.items() if not k.startswith("_")}


def _handler(fake: Fake):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _send(self, code: int, obj: Any = None, raw: bytes | None = None, headers: dict | None = None):
            data = raw if raw is not None else json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/octet-stream" if raw is not None else "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _drop(self):
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass

        def _fault(self, status: int):
            if status == 429:
                return self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}},
                                  headers={"Retry-After": fake.retry_after})
            return self._send(status, {"error": {"message": f"injected {status}", "type": "server_error"}})

        def _body(self) -> bytes:
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def do_GET(self):
            path = self.path.split("?")[0]
            with fake.lock:
                fake.log.append(("GET", path, None))
                if self.headers.get("Authorization") != "Bearer sk-test":
                    return self._send(401, {"error": {"message": "bad key"}})
                if (st := fake.fault("GET", path)) is not None:
                    return self._fault(st)
                m = re.fullmatch(r"/v1/batches/([^/]+)", path)
                if m:
                    b = fake.batches.get(m.group(1))
                    if not b:
                        return self._send(404, {"error": {"message": "no such batch"}})
                    fake.advance(b)
                    if b["status"] == "completed" and fake.kill_point("poll_done"):
                        return self._drop()
                    return self._send(200, fake.public(b))
                if path == "/v1/batches":
                    data = [fake.public(b) for b in reversed(list(fake.batches.values()))]
                    return self._send(200, {"object": "list", "data": data, "has_more": False,
                                            "first_id": data[0]["id"] if data else None,
                                            "last_id": data[-1]["id"] if data else None})
                m = re.fullmatch(r"/v1/files/([^/]+)/content", path)
                if m and fake.kill_point("download"):
                    return self._drop()
                if m:
                    f = fake.files.get(m.group(1))
                    return self._send(200, raw=f["content"]) if f else self._send(404, {"error": {"message": "nf"}})
                if path == "/v1/files":
                    data = [{k: v for k, v in f.items() if k != "content"} | {"object": "file", "status": "processed",
                                                                              "bytes": len(f["content"]),
                                                                              "created_at": 0}
                            for f in reversed(list(fake.files.values()))]
                    return self._send(200, {"object": "list", "data": data, "has_more": False})
            return self._send(404, {"error": {"message": f"no route {path}"}})

        def do_POST(self):
            path = self.path.split("?")[0]
            raw = self._body()
            ctype = self.headers.get("Content-Type", "")
            body = json.loads(raw) if raw and ctype.startswith("application/json") else None
            with fake.lock:
                fake.log.append(("POST", path, body))
                if self.headers.get("Authorization") != "Bearer sk-test":
                    return self._send(401, {"error": {"message": "bad key"}})
                if (st := fake.fault("POST", path)) is not None:
                    return self._fault(st)
                if path in ("/v1/responses", "/v1/chat/completions"):
                    if fake.rate_limit > 0:
                        fake.rate_limit -= 1
                        return self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}},
                                          headers={"Retry-After": fake.retry_after})
                    if fake.kill_point("sync"):
                        return self._drop()
                    pck = body.get("prompt_cache_key")
                    if pck is not None and (not isinstance(pck, str) or len(pck) > 64):
                        return self._send(400, {"error": {"message": "prompt_cache_key: a string of at most 64 "
                                                          "characters", "type": "invalid_request_error"}})
                    code, out = fake.respond(body)
                    if code == 200 and fake.drop_after_billing > 0:
                        fake.drop_after_billing -= 1       # billed, but the answer never arrives
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return None
                    held = fake.hold_after is not None and len(fake.bill) > fake.hold_after
                    if fake.delay or held:
                        fake.lock.release()
                        try:
                            time.sleep(fake.delay)
                            if held:
                                fake.release.wait()
                        finally:
                            fake.lock.acquire()
                    return self._send(code, out)
                if path == "/v1/files":
                    msg = email.message_from_bytes(b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + raw,
                                                   policy=email.policy.HTTP)
                    content, filename = b"", "upload"
                    for part in msg.iter_parts():
                        if part.get_param("name", header="content-disposition") == "file":
                            content = part.get_payload(decode=True)
                            filename = part.get_filename()
                    fid = f"file-{next(fake.ids)}"
                    fake.files[fid] = {"id": fid, "filename": filename, "purpose": "batch", "content": content}
                    if fake.kill_point("upload"):
                        return self._drop()
                    return self._send(200, {"id": fid, "object": "file", "bytes": len(content), "created_at": 0,
                                            "filename": filename, "purpose": "batch", "status": "processed"})
                if path == "/v1/batches":
                    problem = fake.check_batch_create(body)
                    if problem:
                        return self._send(400, {"error": {"message": problem, "type": "invalid_request_error"}})
                    f = fake.files.get(body["input_file_id"])
                    if not f:
                        return self._send(404, {"error": {"message": "no such file"}})
                    problem = fake.check_batch_file(f["content"], body["endpoint"])
                    if problem:
                        return self._send(400, {"error": {"message": problem, "type": "invalid_request_error"}})
                    n = sum(1 for x in f["content"].splitlines() if x.strip())
                    bid = f"batch_{next(fake.ids)}"
                    b = {"id": bid, "object": "batch", "endpoint": body["endpoint"],
                         "input_file_id": body["input_file_id"], "completion_window": body["completion_window"],
                         "status": "validating", "created_at": int(time.time()), "output_file_id": None,
                         "error_file_id": None, "metadata": body.get("metadata") or {},
                         "request_counts": {"total": n, "completed": 0, "failed": 0}, "_polls": 0}
                    fake.batches[bid] = b
                    if fake.kill_point("create"):
                        return self._drop()
                    return self._send(200, fake.public(b))
                m = re.fullmatch(r"/v1/batches/([^/]+)/cancel", path)
                if m and m.group(1) in fake.batches:
                    b = fake.batches[m.group(1)]
                    if b["status"] not in ("completed", "failed", "expired", "cancelled"):
                        b["status"] = "cancelling"
                    return self._send(200, fake.public(b))
            return self._send(404, {"error": {"message": f"no route {path}"}})

    return H


def start(steps: int = 3) -> Fake:
    fake = Fake(steps=steps)
    fake.server = support.serve(_handler(fake))
    return fake


def stop(fake: Fake) -> None:
    fake.release.set()
    support.shutdown(fake.server)

"""A minimal fake Hugging Face Hub (stdlib HTTP server on 127.0.0.1) for upload tests.

Implements the calls `HfApi.create_repo` and `HfApi.upload_folder` make for "regular" (non-LFS)
uploads: repos/create, validate-yaml, preupload, commit (see shared reference env.md section 5).
Every request is recorded (method, path, headers, body); committed files are kept in memory.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


class FakeHub:
    def __init__(self):
        self.requests: list[dict] = []
        self.repos: dict[str, dict] = {}
        self.files: dict[str, dict[str, bytes]] = {}
        self.commits: list[dict] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _reply(self, code: int, obj: dict, headers: dict | None = None):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = unquote(urlparse(self.path).path)
                hub.requests.append({"method": self.command, "path": path, "headers": dict(self.headers),
                                     "body": body})
                base = f"http://{self.headers.get('Host')}"
                if path == "/api/repos/create" and self.command == "POST":
                    req = json.loads(body)
                    repo = f"{req.get('organization')}/{req['name']}" if req.get("organization") else req["name"]
                    hub.repos[repo] = req
                    return self._reply(200, {"url": f"{base}/datasets/{repo}", "name": repo, "id": repo})
                if path == "/api/validate-yaml":
                    return self._reply(200, {"errors": [], "warnings": []})
                m = re.match(r"^/api/(\w+)s/(.+?)/(preupload|commit)/(.+)$", path)
                if m and self.command == "POST":
                    _, repo, action, rev = m.groups()
                    if repo not in hub.repos:
                        return self._reply(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                    if action == "preupload":
                        files = json.loads(body)["files"]
                        return self._reply(200, {"files": [{"path": f["path"], "uploadMode": "regular",
                                                            "shouldIgnore": False} for f in files]})
                    store = hub.files.setdefault(repo, {})
                    header = None
                    for line in body.decode().splitlines():
                        if not line.strip():
                            continue
                        item = json.loads(line)
                        if item["key"] == "header":
                            header = item["value"]
                        elif item["key"] == "file":
                            store[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                        elif item["key"] == "deletedFile":
                            store.pop(item["value"]["path"], None)
                    oid = hashlib.sha1(body).hexdigest()
                    hub.commits.append({"repo": repo, "rev": rev, "header": header, "oid": oid})
                    return self._reply(200, {"commitUrl": f"{base}/datasets/{repo}/commit/{oid}", "commitOid": oid})
                return self._reply(404, {"error": f"fake hub: no route for {self.command} {path}"})

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

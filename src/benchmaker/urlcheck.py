"""Check that every image_url in images.jsonl answers (upstream's `check-urls`).

Needed before a vision run with ``image_transport: url``: the provider fetches each image itself, and a
dead link becomes a paid failure. HEAD first, GET (first byte only) where HEAD is refused; bounded
concurrency; a per-request timeout. Standard library only.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable

__all__ = ["UrlResult", "check_urls"]


@dataclass(frozen=True)
class UrlResult:
    image_id: str
    url: str | None
    ok: bool
    status: int | None
    detail: str | None


def _probe(image_id: str, url: str | None, timeout: float) -> UrlResult:
    if not url:
        return UrlResult(image_id, url, False, None, "no image_url (set preprocess.image_base_url)")
    last: str | None = None
    for method in ("HEAD", "GET"):
        req = urllib.request.Request(url, method=method,
                                     headers={"User-Agent": "benchmaker-check-urls",
                                              **({"Range": "bytes=0-0"} if method == "GET" else {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                ctype = resp.headers.get("Content-Type", "")
                if ctype and not ctype.startswith(("image/", "application/octet-stream", "binary/")):
                    return UrlResult(image_id, url, False, resp.status, f"content type {ctype!r} is not an image")
                return UrlResult(image_id, url, True, resp.status, None)
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
            if method == "HEAD" and exc.code in (403, 405, 501):
                continue  # some servers refuse HEAD
            return UrlResult(image_id, url, False, exc.code, last)
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            return UrlResult(image_id, url, False, None, f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}")
    return UrlResult(image_id, url, False, None, last)


def check_urls(items: Iterable[tuple[str, str | None]], *, workers: int = 16, timeout: float = 10.0) -> list[UrlResult]:
    items = list(items)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda it: _probe(it[0], it[1], timeout), items))

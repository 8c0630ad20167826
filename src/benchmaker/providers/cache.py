"""Response cache keyed by the request's content.

The key is a digest of everything that determines the answer: API flavour, server, model, sampling
settings, prompts, schema and, for images, the image's sha256 plus how it is sent (never the API
key). Only valid answers are stored, one small JSON file per key under ``<dir>/<k[:2]>/<k>.json``,
written atomically, so parallel jobs and interrupted runs never see half an entry. A plain rerun
therefore pays nothing, and after a config change only requests whose content changed are sent.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..io import atomic_write_text, dumps

__all__ = ["ResponseCache", "content_key"]


def content_key(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    def __init__(self, directory: str | Path | None):
        self.dir = Path(directory) if directory else None
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> Path:
        assert self.dir is not None
        return self.dir / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        if self.dir is None:
            self.misses += 1
            return None
        p = self._path(key)
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            self.misses += 1
            return None
        self.hits += 1
        return rec

    def contains(self, key: str) -> bool:
        return self.dir is not None and self._path(key).exists()

    def put(self, key: str, record: dict) -> None:
        if self.dir is None:
            return
        atomic_write_text(self._path(key), dumps(record))

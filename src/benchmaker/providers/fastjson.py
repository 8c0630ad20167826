"""JSON for the hot per-request paths (request lines, output lines, answers, cache entries, cost
rows): orjson when it is installed (it comes with ``ranx``), else the standard library.

Both produce compact UTF-8 JSON with non-ASCII kept; they are used only where the exact bytes do
not matter (the cache *key* is always computed with :mod:`json`, see ``spec.request_key``).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["dumps", "dumpb", "loads", "JSONDecodeError"]

JSONDecodeError = json.JSONDecodeError

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a dependency
    _orjson = None


def _default(o: Any):
    from ..io import _default as io_default

    return io_default(o)


if _orjson is not None:
    _OPT = _orjson.OPT_SERIALIZE_NUMPY | _orjson.OPT_NON_STR_KEYS

    def dumpb(obj: Any) -> bytes:
        return _orjson.dumps(obj, default=_default, option=_OPT)

    def dumps(obj: Any) -> str:
        return _orjson.dumps(obj, default=_default, option=_OPT).decode("utf-8")

    def loads(data: str | bytes) -> Any:
        """Parse JSON; raises :class:`json.JSONDecodeError` (orjson's error is a subclass)."""
        return _orjson.loads(data)
else:  # pragma: no cover
    def dumps(obj: Any) -> str:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=_default)

    def dumpb(obj: Any) -> bytes:
        return dumps(obj).encode("utf-8")

    def loads(data: str | bytes) -> Any:
        return json.loads(data)

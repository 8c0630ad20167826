"""Identifiers that are safe in whitespace-separated formats (TREC qrels and run files, BEIR ids).

An ``image_id`` is a relative path (``cats/my cat.jpg``, ``café/été.png``). TREC tools split lines on
whitespace, so such ids break ``qrels.txt`` and run files. ``trec_id`` percent-encodes every byte that is
not an unreserved URL character or ``/`` (RFC 3986, UTF-8): ids made only of ``A-Za-z0-9-._~/`` are
unchanged, every other id maps to a unique token with no whitespace, and ``from_trec_id`` reverses it
exactly. No id map file is needed; docs/formats.md documents the rule.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

__all__ = ["trec_id", "from_trec_id"]

_SAFE = "/-._~"


def trec_id(image_id: str) -> str:
    """The whitespace-free, reversible form of an id (``cats/my cat.jpg`` -> ``cats/my%20cat.jpg``)."""
    return quote(image_id, safe=_SAFE, encoding="utf-8", errors="strict")


def from_trec_id(token: str) -> str:
    """Inverse of :func:`trec_id`."""
    return unquote(token, encoding="utf-8", errors="strict")

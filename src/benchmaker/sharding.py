"""Stable assignment of images to shards.

``shard_of(image_id, n)`` = first 8 bytes of BLAKE2b(image_id, UTF-8) as a big-endian integer, modulo n.
It depends only on the id and n (never on Python's randomised ``hash``, file order or polars versions),
so the same image always lands in the same shard on every machine.
"""

from __future__ import annotations

import hashlib

__all__ = ["shard_of", "shard_names", "shard_name"]


def shard_of(image_id: str, n_shards: int) -> int:
    if n_shards < 1:
        raise ValueError("n_shards must be >= 1")
    digest = hashlib.blake2b(image_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % n_shards


def shard_name(index: int) -> str:
    return f"{index:05d}"


def shard_names(n_shards: int) -> list[str]:
    return [shard_name(i) for i in range(n_shards)]


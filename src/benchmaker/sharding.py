"""Stable assignment of images to shards.

``shard_of(image_id, n)`` = first 8 bytes of BLAKE2b(image_id, UTF-8) as a big-endian integer, modulo n.
It depends only on the id and n (never on Python's randomised ``hash``, file order or polars versions),
so the same image always lands in the same shard on every machine.
"""

from __future__ import annotations

import hashlib

__all__ = ["shard_of", "shard_names", "shard_name", "shard_groups"]


def shard_of(image_id: str, n_shards: int) -> int:
    if n_shards < 1:
        raise ValueError("n_shards must be >= 1")
    digest = hashlib.blake2b(image_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % n_shards


def shard_name(index: int) -> str:
    return f"{index:05d}"


def shard_names(n_shards: int) -> list[str]:
    return [shard_name(i) for i in range(n_shards)]



def shard_groups(shards: list[str], jobs: int) -> dict[str, list[str]]:
    """Consecutive shards split into at most ``jobs`` groups of ``ceil(len / jobs)`` shards: group
    name -> its shards. A group of one shard is named like the shard (``00003``), a larger one by its
    first and last shard (``00000-00015``), so the names depend only on the shard count and ``jobs``."""
    if jobs < 1:
        raise ValueError("jobs must be >= 1")
    size = max(1, -(-len(shards) // jobs))
    groups = [shards[i:i + size] for i in range(0, len(shards), size)]
    return {(g[0] if len(g) == 1 else f"{g[0]}-{g[-1]}"): g for g in groups}

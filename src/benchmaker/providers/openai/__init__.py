"""OpenAI specifics: the client (key from the environment only), sync calls, Files and Batch API.

Works with any OpenAI-compatible server (vLLM, the NRP LLM gateway) through ``base_url``; ``api:
chat`` uses Chat Completions for servers without ``/v1/responses``.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Mapping

from ...settings_schema import LLM, default

__all__ = ["make_client", "ENDPOINTS", "call", "upload_batch_file", "create_batch", "retrieve_batch",
           "iter_batches", "find_batch", "find_file", "cancel_batch", "download_file", "MissingKey",
           "batch_dict"]

ENDPOINTS = {"responses": "/v1/responses", "chat": "/v1/chat/completions"}


class MissingKey(RuntimeError):
    pass


def make_client(settings: Mapping[str, Any], timeout: float = 120.0):
    """An ``openai.OpenAI`` client; the key is read from the env var named by ``api_key_env`` only."""
    import openai

    env = settings.get("api_key_env") or default(f"{LLM}.api_key_env")
    key = os.environ.get(env)
    if not key:
        raise MissingKey(f"environment variable {env} is not set (it must hold the API key; "
                         f"the key never goes in the config)")
    return openai.OpenAI(api_key=key, base_url=settings.get("base_url") or None, max_retries=0, timeout=timeout)


def call(client, api: str, body: Mapping[str, Any]) -> dict:
    """One synchronous request; returns the response body as a plain dict (raises openai errors)."""
    if api == "chat":
        raw = client.chat.completions.with_raw_response.create(**body)
    else:
        raw = client.responses.with_raw_response.create(**body)
    return raw.http_response.json()


def batch_dict(b: Any) -> dict:
    return b.to_dict() if hasattr(b, "to_dict") else dict(b)


def upload_batch_file(client, path: str, name: str) -> str:
    with open(path, "rb") as fh:
        f = client.files.create(file=(name, fh), purpose="batch")
    return f.id


def create_batch(client, *, file_id: str, api: str, completion_window: str, metadata: Mapping[str, str]) -> dict:
    b = client.batches.create(input_file_id=file_id, endpoint=ENDPOINTS[api], completion_window=completion_window,
                              metadata=dict(metadata))
    return batch_dict(b)


def retrieve_batch(client, batch_id: str) -> dict:
    return batch_dict(client.batches.retrieve(batch_id))


def iter_batches(client, limit: int = 100) -> Iterator[dict]:
    """Every batch of the account, newest first (the SDK follows the pagination)."""
    for b in client.batches.list(limit=limit):
        yield batch_dict(b)


def find_batch(client, metadata: Mapping[str, str], max_scan: int = 2000) -> dict | None:
    """The newest batch whose metadata contains ``metadata`` (resume after an interrupted submit)."""
    for i, b in enumerate(iter_batches(client)):
        md = b.get("metadata") or {}
        if all(md.get(k) == v for k, v in metadata.items()):
            return b
        if i >= max_scan:
            break
    return None


def find_file(client, filename: str, max_scan: int = 2000) -> str | None:
    """The id of an uploaded batch input file with this exact name, if any."""
    for i, f in enumerate(client.files.list(purpose="batch")):
        if getattr(f, "filename", None) == filename and getattr(f, "status", "processed") != "error":
            return f.id
        if i >= max_scan:
            break
    return None


def cancel_batch(client, batch_id: str, policy=None) -> dict:
    """Cancel a batch, through the retry policy (``benchmaker batches cancel`` too)."""
    from ..retry import RetryPolicy

    return (policy or RetryPolicy()).call(lambda: batch_dict(client.batches.cancel(batch_id)),
                                          f"cancel batch {batch_id}")


def download_file(client, file_id: str, dest: str, *, compress: bool = False) -> None:
    """Download a file to ``dest`` atomically; ``compress``: gzip it (level 1: the batch output's
    JSON shrinks several fold, for little CPU), streamed in 1 MB pieces when the SDK allows."""
    import gzip

    from ...io import atomic_path

    with atomic_path(dest) as tmp:
        out = gzip.open(tmp, "wb", compresslevel=1) if compress else open(tmp, "wb")
        with out:
            with client.files.with_streaming_response.content(file_id) as resp:
                for piece in resp.iter_bytes(1 << 20):
                    out.write(piece)

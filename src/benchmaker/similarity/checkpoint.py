"""A model checkpoint's two costs in a model job, kept off its critical path: its sha256 (part of the
model identity, :func:`file_digest`), computed once per process and started beside the imports
(:func:`prefetch_digest`); and open_clip's build of the model the checkpoint then overwrites, done
without the random initialisation (:func:`build`; bit-identical weights, tests/test_similarity.py)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import threading
from pathlib import Path
from typing import Any

from ..logs import get_logger

__all__ = ["build", "file_digest", "prefetch_digest"]

log = get_logger("similarity.model")

_DIGESTS: dict[tuple[str, int, int], Any] = {}  # (path, size, mtime) -> Future of the hex digest
_DIGEST_LOCK = threading.Lock()


def _digest_future(path: str | os.PathLike, background: bool):
    """The memoised Future of ``path``'s sha256; the first asker computes it (here, or in a
    background thread with ``background``), later askers wait for that one computation."""
    from concurrent.futures import Future

    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    with _DIGEST_LOCK:
        fut = _DIGESTS.get(key)
        if fut is not None:
            return fut
        fut = _DIGESTS[key] = Future()

    def compute() -> None:
        try:
            with open(p, "rb") as fh:
                fut.set_result(hashlib.file_digest(fh, "sha256").hexdigest())  # the GIL released meanwhile
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for the digest
            with _DIGEST_LOCK:
                _DIGESTS.pop(key, None)
            fut.set_exception(exc)

    if background:
        threading.Thread(target=compute, name="checkpoint-digest", daemon=True).start()
    else:
        compute()
    return fut


def file_digest(path: str | os.PathLike, length: int = 16) -> str:
    """sha256 of a file (memoised per process by path, size and mtime; one computation per file even
    when asked from several threads or prefetched by :func:`prefetch_digest`)."""
    return _digest_future(path, background=False).result()[:length]


def prefetch_digest(path: str | os.PathLike) -> None:
    """Start hashing ``path`` in a background thread (a checkpoint's model identity): a model load
    hashes its checkpoint while it imports open_clip and builds the model, not after. Errors are
    raised by the :func:`file_digest` call that needs the digest."""
    try:
        _digest_future(path, background=True)
    except OSError:
        pass


# one model build at a time in a process: _checkpoint_only swaps torch.nn.init's functions meanwhile
_BUILD_LOCK = threading.Lock()


def _load_state_dict_in_place(net, state_dict, strict: bool = True, assign: bool = False):
    """``net.load_state_dict`` that takes the checkpoint's tensors as they are (``assign=True``: no
    copy into the module's own, never-initialised memory) when every one has the dtype, shape and
    device of the tensor it replaces; otherwise copies (a fp16 checkpoint into a fp32 model stays fp32)."""
    own = net.state_dict(keep_vars=True)
    same = all(k in own and v.dtype == own[k].dtype and v.shape == own[k].shape and v.device == own[k].device
               for k, v in state_dict.items())
    return type(net).load_state_dict(net, state_dict, strict=strict, assign=assign or same)


@contextlib.contextmanager
def _checkpoint_only(torch):
    """While open_clip builds a model whose checkpoint it then loads, skip the random initialisation
    that the checkpoint overwrites: ``torch.nn.init``'s in-place initialisers return their tensor
    untouched (ViT-B-32: 0.8 s of CPU and the first touch of 600 MB saved), and open_clip's strict
    checkpoint load takes the checkpoint's tensors in place (:func:`_load_state_dict_in_place`).
    Yields a dict whose ``loaded`` says whether a strict load replaced every weight; when it did not,
    the caller must not use the model (its memory was never initialised)."""
    import open_clip.factory as factory

    init = torch.nn.init
    saved = {n: f for n, f in vars(init).items() if n.endswith("_") and not n.startswith("_") and callable(f)}
    load_checkpoint = factory.load_checkpoint
    seen = {"loaded": False}

    def strict_load(model, checkpoint_path, strict=True, *args, **kwargs):
        whole = bool(strict) and Path(str(checkpoint_path)).suffix not in (".npz", ".npy")
        if whole:
            model.load_state_dict = functools.partial(_load_state_dict_in_place, model)
        try:
            out = load_checkpoint(model, checkpoint_path, strict, *args, **kwargs)
        finally:
            if whole:
                del model.load_state_dict
        seen["loaded"] = whole
        return out

    try:
        for name in saved:
            setattr(init, name, lambda tensor, *a, **k: tensor)
        factory.load_checkpoint = strict_load
        yield seen
    finally:
        factory.load_checkpoint = load_checkpoint
        for name, fn in saved.items():
            setattr(init, name, fn)


def build(oc, torch, model_arg: str, pretrained_arg: str | None, random_init: bool):
    """open_clip's model and eval transform; a model with a checkpoint is built without random init."""
    with _BUILD_LOCK:
        if not random_init:
            with _checkpoint_only(torch) as seen:
                net, _, preprocess = oc.create_model_and_transforms(model_arg, pretrained=pretrained_arg,
                                                                    device="cpu")
            if seen["loaded"]:
                return net, preprocess
            log.info("%s: open_clip loaded no whole checkpoint; building it again with initialised weights",
                     model_arg)
        net, _, preprocess = oc.create_model_and_transforms(model_arg, pretrained=pretrained_arg, device="cpu")
        return net, preprocess



"""Make ``import torchvision`` (and so ``import open_clip``) work on CPU-only torch.

The PyPI torchvision wheel pinned beside torch 2.13 CPU is a CUDA build whose C extension cannot load
on CPU torch; importing it then fails with ``operator torchvision::nms does not exist``. When the real
extension loads (GPU machines, matching builds) this does nothing. Otherwise it defines the two op
schemas torchvision's meta registrations expect. open_clip uses none of torchvision's C ops.
Call :func:`install` before the first torchvision import (``similarity.model`` does).
"""

from __future__ import annotations

import importlib.util
import os

_LIB = None
_DONE = False


def install() -> None:
    global _LIB, _DONE
    if _DONE:
        return
    _DONE = True
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return
    import torch

    try:
        torch.ops.load_library(os.path.join(os.path.dirname(spec.origin), "_C.so"))
        return
    except (OSError, ImportError, RuntimeError):
        pass
    try:
        _LIB = torch.library.Library("torchvision", "DEF")
        _LIB.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _LIB.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
    except RuntimeError:  # already defined by someone else
        pass

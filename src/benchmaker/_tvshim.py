"""Make ``import torchvision`` (and so ``import open_clip``) work on CPU-only torch.

The PyPI torchvision wheel pinned beside torch 2.13 CPU is a CUDA build whose C extension cannot load
on CPU torch; importing it then fails with ``operator torchvision::nms does not exist``. When the real
extension loads (GPU machines, matching builds) this does nothing. Otherwise it defines the two op
schemas torchvision's meta registrations expect. open_clip uses none of torchvision's C ops.
Call :func:`install` before the first torchvision import (``similarity.model`` does).

:func:`dynamo_deferred` keeps that first import from importing torch._dynamo (~1.2 s of CPU per
model job), which torchvision's roi_align imports for a name it only calls when run.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.util
import os
import sys
import types
from typing import Callable, Iterator

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


# --- torch._dynamo, deferred ------------------------------------------------------------------------
# torchvision/ops/roi_align.py (0.2x) starts with ``from torch._dynamo.utils import is_compile_supported``,
# a name it only calls inside ``roi_align()``. That one line makes every ``import torchvision`` (and so
# ``import open_clip``: open_clip.utils imports torchvision.ops.misc) import torch._dynamo, ~1.2 s of
# CPU per model job (issue #33). The same file's ``lazy_compile`` exists "to avoid eagerly importing
# dynamo" (pytorch/vision#8436: "importing dynamo has undesirable side effects for eager mode only
# users"); this line undid it.
_ROI_ALIGN = "torchvision.ops.roi_align"
_DYNAMO_UTILS = "torch._dynamo.utils"
_NAME = "is_compile_supported"


def _forwarder(namespace: dict) -> Callable[[str], bool]:
    """A stand-in for torch._dynamo.utils.is_compile_supported in ``namespace`` (roi_align's
    globals): its first call imports the real function, puts it in its place and returns its answer."""

    def is_compile_supported(device_type):
        from torch._dynamo.utils import is_compile_supported as real

        if namespace.get(_NAME) is is_compile_supported:
            namespace[_NAME] = real
        return real(device_type)

    return is_compile_supported


class _Loader:
    """Runs roi_align's module code with its original loader, except that its one
    ``from torch._dynamo.utils import is_compile_supported`` binds a :func:`_forwarder`; then
    gives the module back its original loader."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        real_import = builtins.__import__
        namespace = module.__dict__

        def hooked(name, globals=None, locals=None, fromlist=(), level=0):
            if (globals is namespace and name == _DYNAMO_UTILS and level == 0
                    and tuple(fromlist or ()) == (_NAME,) and "torch._dynamo" not in sys.modules):
                return types.SimpleNamespace(**{_NAME: _forwarder(namespace)})
            return real_import(name, globals, locals, fromlist, level)

        builtins.__import__ = hooked
        try:
            self.loader.exec_module(module)
        finally:
            if builtins.__import__ is hooked:
                builtins.__import__ = real_import
            module.__loader__ = self.loader
            if module.__spec__ is not None:
                module.__spec__.loader = self.loader


class _RoiAlignFinder:
    """Finds torchvision.ops.roi_align as the other finders do and hands it to a :class:`_Loader`."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _ROI_ALIGN or "torch._dynamo" in sys.modules:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


@contextlib.contextmanager
def dynamo_deferred() -> Iterator[None]:
    """While torchvision is first imported inside this block, torchvision.ops.roi_align binds an
    ``is_compile_supported`` that imports torch._dynamo when ``roi_align()`` first calls it, not at
    import (see above). Nothing else changes: no other module or name, and nothing is left behind
    (the finder leaves ``sys.meta_path``, ``builtins.__import__`` is restored, the module's loader is
    its own); a later ``import torch._dynamo`` or ``torch.compile`` is the usual one. Does nothing when
    torchvision or torch._dynamo is already imported, and nothing when a torchvision's roi_align
    no longer has that line (its import then runs as written)."""
    if "torchvision" in sys.modules or "torch._dynamo" in sys.modules:
        yield
        return
    finder = _RoiAlignFinder()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)

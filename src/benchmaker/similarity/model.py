"""Loading an open_clip model and naming it: the model identity used by every embedding and cache.

``load_clip(model, pretrained, device, precision)`` accepts, like open_clip:

* an architecture with a pretrained tag: ``model="ViT-B-32", pretrained="laion2b_s34b_b79k"``;
* an architecture with a local checkpoint file: ``pretrained="/path/open_clip_model.safetensors"``;
* a Hugging Face repo: ``model="hf-hub:org/repo"`` (``pretrained`` ignored);
* a local folder: ``model="local-dir:/path"`` holding ``open_clip_config.json`` and the weights;
* an architecture with ``pretrained=None``: random weights (tests only; a loud warning is logged).

The **model identity** (``ClipModel.model_id``) names the architecture, the weights (pretrained tag,
checkpoint-file digest or hub snapshot) and the preprocessing (input size, interpolation, resize
mode, mean/std and how images are decoded), so that any change to weights or preprocessing changes
the embedding cache key (``ClipModel.cache_key``).

**Same inputs, same bits.** A forward pass's result for one image depends on the tensor shape it
runs in (CPU and GPU kernels block and reduce differently for other batch sizes, ~1e-8), not on the
other rows nor on their position nor on the thread count (measured: ``tests/test_determinism.py``).
So every forward pass runs on exactly ``ClipModel.encode_batch`` rows, the value of the device kind
in ``ENCODE_BATCH`` (the *pass size*): ``encode_images`` / ``encode_texts`` split their input into
chunks of that size and pad the last one with copies of its last row. An image's embedding is then
the same bits whichever job, batch size, shard or cache state produced it, on one device kind.
What still changes the bits is the *numerics* (``ClipModel.numerics``): device kind (CPU ISA or CUDA
device name), autocast precision, the pass size and the torch version. They are part of the cache
key next to the model identity, so an embedding computed with other numerics is never reused (fp16
and fp32 embeddings differ at the 1e-3 level; CPU and GPU at ~1e-6). ``model_id`` itself names
only the model, so annotations and embedding files name the same model on every device.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..imaging import IMAGING_VERSION
from ..logs import get_logger
from ..settings_schema import default
from .checkpoint import build, file_digest, prefetch_digest

__all__ = [
    "ClipModel", "ModelLoadError", "load_clip", "resolve_device", "resolve_precision", "file_digest",
    "PREPROCESS_VERSION", "DECODE", "ENCODE_BATCH", "encode_batch", "numerics",
]

log = get_logger("similarity.model")

# bump when the image decoding / preprocessing code changes what pixels reach the model
PREPROCESS_VERSION = 1
# how images are decoded before open_clip's transforms (part of the model identity)
DECODE = f"pil-draft-imaging{IMAGING_VERSION}"
# rows of every forward pass (images and texts) per device kind, the "pass size"; part of the
# numerics, so of the cache key: changing a value starts a new embedding cache for that device kind.
# cpu: 16, measured (docs/performance.md, "Pass size"): as many rows per CPU-second as 32 or 64 for
# ViT-B-32 and the tiny model, and the padding of a job's last pass is at most 15 rows instead of 63.
# cuda: 256, measured on an H100 (docs/performance.md, "GPU"; benchmarks/clip_gpu.py --pass-rows):
# ViT-B-32 fp16 runs 1.4-2.2x faster than at 64 rows, +4-6 % more at 512/1024; bit-identical per pass size.
# mps: 64, not measured.
ENCODE_BATCH: dict[str, int] = {"cpu": 16, "mps": 64, "cuda": 256}
_LOCAL_DIR = "local-dir:"
_HF_HUB = "hf-hub:"


class ModelLoadError(RuntimeError):
    """The CLIP model or its weights could not be loaded; the message says how to fix it."""


def _torch():
    import torch

    return torch


def _open_clip(hf_text: bool = True, timm_vision: bool = True, hf_hub: bool = True):
    """``import open_clip``. With ``hf_text=False`` (the model to load has no Hugging Face text tower)
    and open_clip not yet imported, its optional ``import transformers`` is skipped: ~0.7 s of CPU
    per model load that only HF text towers use (CoCa and hf-hub models always get it). Likewise
    ``timm_vision=False`` (no timm vision tower) skips its optional ``import timm`` (~0.3 s of CPU),
    and ``hf_hub=False`` (weights from a local file or folder: nothing to download) its optional
    ``from huggingface_hub import hf_hub_download`` (~0.13 s of CPU in a job). Each is an optional
    dependency that open_clip imports in a ``try``/``except ImportError`` and works without; when
    open_clip was imported earlier in this process without a part asked for now, :func:`_enable_tower`
    gives it that part (the flags hold on every call, not only the first). The first import
    of torchvision (open_clip imports it) does not import torch._dynamo (~1.2 s of CPU), which no
    eager model needs: see :func:`benchmaker._tvshim.dynamo_deferred`."""
    import sys

    from .. import _tvshim

    _tvshim.install()
    parts = (("hf_text", "transformers", hf_text), ("timm", "timm", timm_vision),
             ("hf_hub", "huggingface_hub", hf_hub))
    if "open_clip" in sys.modules:
        import open_clip as oc
    else:
        with _tvshim.dynamo_deferred():
            oc = _import_open_clip_without([library for _, library, needed in parts if not needed])
    for tower in (tower for tower, _, needed in parts if needed):
        _enable_tower(tower)
    return oc


def _import_open_clip_without(skip: list[str]):
    """``import open_clip`` with the optional libraries ``skip`` hidden (see :func:`_open_clip`)."""
    import sys

    if not skip:
        import open_clip

        return open_clip
    # hidden even when already imported: a lazy package (huggingface_hub, which benchmaker.logs
    # imports for its logger) costs little until open_clip imports its download client from it
    hidden = {name: sys.modules.get(name) for name in skip}
    for name in skip:  # `import <name>` raises ImportError: open_clip's fallback for optional towers
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import open_clip
    finally:
        for name, module in hidden.items():
            if module is None:
                del sys.modules[name]
            else:
                sys.modules[name] = module
    return open_clip


# the optional parts open_clip can be imported without (see _open_clip): its module, the name that
# module binds when the library is there, and the class open_clip.model takes from it (None: none)
_TOWERS = {"hf_text": ("open_clip.hf_model", "transformers", "HFTextEncoder"),
           "timm": ("open_clip.timm_model", "timm", "TimmModel"),
           "hf_hub": ("open_clip.pretrained", "hf_hub_download", None)}


def _enable_tower(tower: str) -> None:
    """Give open_clip the ``tower`` ("hf_text", "timm" or "hf_hub") it was imported without (see
    _open_clip): its module is executed again in place, now that the library imports."""
    import importlib

    module, name, cls = _TOWERS[tower]
    mod = importlib.import_module(module)
    if getattr(mod, name, None) is not None:
        return
    mod = importlib.reload(mod)
    if cls is not None:
        setattr(importlib.import_module("open_clip.model"), cls, getattr(mod, cls))


def _needs_hf_hub(model: str, pretrained: str | None) -> bool:
    """Whether loading ``model`` / ``pretrained`` may ask the Hugging Face Hub for files: an
    ``hf-hub:`` model or a pretrained tag (its weights come from the Hub or its cache); not a
    ``local-dir:`` folder, a checkpoint file or random weights."""
    if model.startswith(_LOCAL_DIR):
        return False
    if model.startswith(_HF_HUB):
        return True
    return bool(pretrained) and not Path(str(pretrained)).expanduser().is_file()


def _model_config(model: str) -> dict | None:
    """``model``'s open_clip config, read from its file without importing open_clip; None when it
    cannot be told (hf-hub models, a missing or unreadable file)."""
    import importlib.util

    if model.startswith(_HF_HUB):
        return None
    if model.startswith(_LOCAL_DIR):
        cfg_file = Path(model[len(_LOCAL_DIR):]).expanduser() / "open_clip_config.json"
    else:
        spec = importlib.util.find_spec("open_clip")
        if spec is None or not spec.submodule_search_locations:
            return None
        cfg_file = Path(list(spec.submodule_search_locations)[0]) / "model_configs" / f"{model.replace('/', '-')}.json"
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def _needs_hf_text(model: str) -> bool:
    """Whether ``model``'s open_clip config has a Hugging Face text tower or tokenizer, read from the
    config file without importing open_clip; True when it cannot be told (hf-hub models, CoCa)."""
    cfg = _model_config(model)
    if cfg is None or "coca" in model.lower():
        return True
    text = (cfg.get("model_cfg", cfg) or {}).get("text_cfg") or {}
    return bool(text.get("hf_model_name") or text.get("hf_tokenizer_name") or "multimodal_cfg" in cfg)


def _needs_timm(model: str) -> bool:
    """Whether ``model``'s open_clip config has a timm vision tower (``vision_cfg.timm_model_name``),
    read as :func:`_needs_hf_text` does; True when it cannot be told."""
    cfg = _model_config(model)
    if cfg is None:
        return True
    vision = (cfg.get("model_cfg", cfg) or {}).get("vision_cfg") or {}
    return bool(vision.get("timm_model_name"))


def resolve_device(device: str | None = default("similarity.device")) -> str:
    """``auto`` → ``cuda`` if available, else ``mps``, else ``cpu``; explicit values are checked."""
    torch = _torch()
    device = (device or "auto").strip().lower()
    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return "mps"
        return "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"similarity device {device!r} requested but CUDA is not available "
                             "(use device: auto or cpu)")
    if device == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ModelLoadError("similarity device 'mps' requested but MPS is not available (use auto or cpu)")
    return device


def resolve_precision(precision: str | None, device: str):
    """``auto`` → fp16 autocast on CUDA, fp32 elsewhere (mps and cpu: autocast there is slower or lossy).

    Returns the autocast dtype, or None for plain fp32.
    """
    torch = _torch()
    precision = (precision or "auto").lower()
    kind = device.split(":")[0]
    if precision == "auto":
        return torch.float16 if kind in ("cuda",) else None
    if precision == "fp32":
        return None
    if precision == "fp16":
        if kind == "cpu":
            log.warning("precision fp16 is slow or unsupported on CPU; using bf16 autocast instead")
            return torch.bfloat16
        return torch.float16
    if precision == "bf16":
        return torch.bfloat16
    raise ModelLoadError(f"unknown precision {precision!r} (auto, fp32, fp16, bf16)")


def _short(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:8]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:48] or "model"


@dataclass
class ClipModel:
    """A loaded open_clip model plus everything needed to embed images and texts consistently."""

    model: Any  # open_clip CLIP module, eval mode, on ``device``
    preprocess: Callable  # open_clip's eval transform (PIL -> normalised tensor)
    make_tokenizer: Callable  # builds open_clip's tokenizer (``tokenizer``, on first use)
    device: str
    autocast_dtype: Any  # torch dtype or None
    model_id: str
    arch: str
    weights: str
    preprocess_cfg: dict
    context_length: int
    logit_scale: float
    embed_dim: int
    precision: str
    numerics: str = ""  # what else decides the bits: device kind, precision, pass size, torch
    encode_batch: int = 16  # rows of every forward pass: ENCODE_BATCH of the device kind (set at load)
    encode_image_calls: int = 0
    encode_text_calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _tokenizer: Any = field(default=None, repr=False)

    @property
    def tokenizer(self) -> Callable:
        """open_clip's tokenizer, built on first use: a job that encodes no text (``embed_images``)
        never reads the BPE vocabulary (0.2-0.8 s of CPU)."""
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = self.make_tokenizer()
            return self._tokenizer

    @property
    def cache_key(self) -> str:
        """Directory-safe key of the model identity and numerics:
        ``<arch slug>-<sha256(model_id | numerics)[:16]>``."""
        key = f"{self.model_id}|{self.numerics}" if self.numerics else self.model_id
        return f"{_slug(self.arch)}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"

    @property
    def image_size(self) -> tuple[int, int]:
        size = self.preprocess_cfg.get("size", 224)
        if isinstance(size, int):
            return (size, size)
        return (int(size[0]), int(size[1]))

    def _autocast(self):
        torch = _torch()
        if self.autocast_dtype is None:
            import contextlib

            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.split(":")[0], dtype=self.autocast_dtype)

    def _fixed_batches(self, rows, forward):
        """``forward`` over ``rows`` in chunks of exactly ``encode_batch`` rows (the last padded with
        copies of its last row); returns the concatenated results of the real rows."""
        torch = _torch()
        n = int(rows.shape[0])
        size = self.encode_batch
        out = []
        for start in range(0, n, size):
            chunk = rows[start:start + size]
            k = int(chunk.shape[0])
            if k < size:
                chunk = torch.cat([chunk, chunk[-1:].expand(size - k, *chunk.shape[1:])])
            out.append(forward(chunk)[:k])
        return torch.cat(out) if out else None

    def encode_images(self, pixels) -> "Any":
        """Float pixel batch [n,3,H,W] (already normalised) → L2-normalised float32 embeddings (CPU tensor).

        Runs in fixed-size forward passes (``encode_batch`` rows, see module doc), so a row's result
        does not depend on ``n`` or on the other rows.
        """
        torch = _torch()

        def forward(x):
            self.encode_image_calls += 1
            with torch.inference_mode(), self._autocast():
                feats = self.model.encode_image(x.to(self.device, non_blocking=True))
            return torch.nn.functional.normalize(feats.float(), dim=-1).cpu()

        if pixels.shape[0] == 0:
            return torch.zeros((0, self.embed_dim), dtype=torch.float32)
        return self._fixed_batches(pixels, forward)

    def tokenize(self, texts: Sequence[str]):
        return self.tokenizer(list(texts))

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` including start/end tokens, before truncation."""
        tok = self.tokenizer
        enc = getattr(tok, "encode", None)
        inner = getattr(tok, "tokenizer", None)
        if enc is not None and hasattr(tok, "sot_token_id"):  # open_clip SimpleTokenizer
            return len(enc(text)) + 2
        if inner is not None and callable(inner):  # HFTokenizer wraps a transformers tokenizer
            try:
                return len(inner(text, add_special_tokens=True, truncation=False)["input_ids"])
            except Exception:  # pragma: no cover - exotic tokenizers
                pass
        ids = tok([text])[0]  # fallback: a full row means it may have been cut
        nonpad = int((ids != 0).sum())
        return nonpad + (1 if nonpad >= self.context_length else 0)

    def encode_texts(self, texts: Sequence[str]):
        """Texts → (L2-normalised float32 embeddings [n,d] as numpy, truncated flags list).

        Fixed-size forward passes like ``encode_images``: a text's embedding does not depend on the
        other texts encoded with it.
        """
        import numpy as np

        torch = _torch()
        texts = list(texts)
        truncated = [self.count_tokens(t) > self.context_length for t in texts]
        if not texts:
            return np.zeros((0, self.embed_dim), dtype=np.float32), truncated

        def forward(tokens):
            self.encode_text_calls += 1
            with torch.inference_mode(), self._autocast():
                feats = self.model.encode_text(tokens.to(self.device))
            return torch.nn.functional.normalize(feats.float(), dim=-1).cpu()

        out = self._fixed_batches(self.tokenize(texts), forward)
        return out.numpy().astype(np.float32, copy=False), truncated


def _describe_preprocess(cfg: dict) -> str:
    size = cfg.get("size", 224)
    size = f"{size[0]}x{size[1]}" if isinstance(size, (tuple, list)) else f"{size}x{size}"
    norm = _short({"mean": [round(float(v), 6) for v in cfg.get("mean", ())],
                   "std": [round(float(v), 6) for v in cfg.get("std", ())],
                   "fill": cfg.get("fill_color", 0), "mode": cfg.get("mode", "RGB")})
    return (f"{size}-{cfg.get('interpolation', 'bicubic')}-{cfg.get('resize_mode', 'shortest')}"
            f"-norm{norm}-{DECODE}-v{PREPROCESS_VERSION}")


def _hf_weights(repo: str) -> str:
    """Resolve (download or find in the HF cache) the weights of an hf-hub repo; name its snapshot."""
    _open_clip(hf_text=False, timm_vision=False)  # the Hub client (a model's towers: its _load's call)
    from open_clip.pretrained import download_pretrained_from_hf

    path = download_pretrained_from_hf(repo)
    m = re.search(r"snapshots[/\\]([0-9a-f]{40})[/\\]", str(path))
    return f"hf-hub:{repo}@{m.group(1)[:12]}" if m else f"hf-hub:{repo}@sha256:{file_digest(path)}"


def _local_dir_weights(folder: Path) -> tuple[str, Callable[[], str]]:
    """(architecture label, weights label as a callable: the checkpoint's digest) for a local-dir
    folder; raises if it holds no weights."""
    cfg_file = folder / "open_clip_config.json"
    if not folder.is_dir():
        raise FileNotFoundError(f"local-dir folder not found: {folder}")
    if not cfg_file.is_file():
        raise FileNotFoundError(f"local-dir folder {folder} has no open_clip_config.json")
    try:
        from open_clip.factory import _find_checkpoint_in_dir

        ckpt = _find_checkpoint_in_dir(folder)
    except ImportError:  # pragma: no cover - open_clip internals moved
        cands = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")) + sorted(folder.glob("*.pth"))
        ckpt = str(cands[0]) if cands else None
    if not ckpt:
        raise FileNotFoundError(f"local-dir folder {folder} holds no weights (*.safetensors, *.bin, *.pth); "
                                "refusing to run with random weights")
    cfg_digest = hashlib.sha256(cfg_file.read_bytes()).hexdigest()[:8]
    return f"local-dir:cfg-{cfg_digest}", lambda: f"sha256:{file_digest(ckpt)}"


def _load_error(model: str, pretrained: str | None, exc: BaseException) -> ModelLoadError:
    offline = os.environ.get("HF_HUB_OFFLINE", "")
    hint_offline = (f"HF_HUB_OFFLINE={offline} is set, so nothing is downloaded" if offline not in ("", "0")
                    else "no network access (or a blocked Hugging Face Hub) may be why; with HF_HUB_OFFLINE=1 "
                         "this fails at once instead of after the Hub client's retries")
    what = f"model={model!r}" + ("" if model.startswith((_LOCAL_DIR, _HF_HUB)) else f", pretrained={pretrained!r}")
    # the cause's first sentence (open_clip's runs to 400 characters of Hub advice; the log has all of it)
    cause = (str(exc).strip().splitlines() or [""])[0].split(". ")[0][:240]
    return ModelLoadError(
        f"could not load the CLIP weights for {what}: {type(exc).__name__}: {cause}\n"
        f"  {hint_offline}.\n"
        "  To use weights already on disk, set either\n"
        "    similarity.pretrained: /path/to/open_clip_model.safetensors   (with similarity.model: <architecture>)\n"
        "  or\n"
        "    similarity.model: local-dir:/path/to/folder   "
        "(a folder with open_clip_config.json + open_clip_model.safetensors)\n"
        "  (the same keys exist under vision.clip for the clip vision adapter).\n"
        "  To try the pipeline with no download at all: `make example-offline` (random tiny CLIP, a smoke test)."
    )


_CACHE: dict[tuple, ClipModel] = {}
_CACHE_LOCK = threading.Lock()


def load_clip(model: str, pretrained: str | None = None, *, device: str | None = default("similarity.device"),
              precision: str | None = default("similarity.precision"), seed: int = 0, reuse: bool = True) -> ClipModel:
    """Load an open_clip model (see module doc); memoised per process unless ``reuse=False``."""
    _prefetch_checkpoint_digest(model, pretrained or None)  # before torch's import: hashed beside it
    device = resolve_device(device)
    key = (model, pretrained, device, precision or "auto", seed)
    if reuse:
        with _CACHE_LOCK:
            if key in _CACHE:
                return _CACHE[key]
    clip = _load(model, pretrained, device=device, precision=precision, seed=seed)
    if reuse:
        with _CACHE_LOCK:
            _CACHE[key] = clip
    return clip


def _prefetch_checkpoint_digest(model: str, pretrained: str | None) -> None:
    """Start hashing the checkpoint file the model identity will name (a ``pretrained`` file, or the
    single weights file of a ``local-dir:`` folder), so that it runs beside the imports and the build.
    Never raises: a missing or unreadable file is reported by the load itself."""
    try:
        if model.startswith(_HF_HUB):
            return
        if model.startswith(_LOCAL_DIR):
            folder = Path(model[len(_LOCAL_DIR):]).expanduser()
            found = [f for pat in ("*.safetensors", "*.bin", "*.pth") for f in folder.glob(pat)]
            if len(found) == 1:  # several: open_clip's choice decides which one is hashed (_local_dir_weights)
                prefetch_digest(found[0])
        elif pretrained and Path(pretrained).expanduser().is_file():
            prefetch_digest(Path(pretrained).expanduser())
    except (OSError, ValueError):
        pass


def _resolve(oc, model: str, pretrained: str | None, seed: int) -> tuple[str, Callable[[], str], str, str | None]:
    """(architecture label, weights label (a callable: a checkpoint's digest may still be computing),
    open_clip's model name, open_clip's pretrained) of a model spec; raises when it names no weights."""
    if model.startswith(_LOCAL_DIR):
        folder = Path(model[len(_LOCAL_DIR):]).expanduser()
        arch, weights = _local_dir_weights(folder)
        return arch, weights, f"{_LOCAL_DIR}{folder}", None
    if model.startswith(_HF_HUB):
        label = _hf_weights(model[len(_HF_HUB):])
        return model, lambda: label, model, None
    arch = model.replace("/", "-")
    if arch not in oc.list_models():
        raise ModelLoadError(
            f"unknown open_clip architecture {model!r}. Use one of open_clip.list_models() "
            f"(e.g. ViT-B-32, ViT-L-14, ViT-SO400M-14-SigLIP), hf-hub:org/repo or local-dir:/path")
    if pretrained is None:
        return arch, lambda: f"random-init-seed{seed}", arch, None
    if Path(pretrained).expanduser().is_file():
        path = str(Path(pretrained).expanduser().resolve())
        return arch, lambda: f"file:sha256:{file_digest(path)}", arch, path
    if pretrained.lower() in {t.lower() for t in oc.list_pretrained_tags_by_model(arch)}:
        return arch, lambda: pretrained, arch, pretrained
    if "/" in pretrained or pretrained.endswith((".pt", ".pth", ".bin", ".safetensors")):
        raise FileNotFoundError(f"checkpoint file not found: {pretrained}")
    tags = ", ".join(oc.list_pretrained_tags_by_model(arch)) or "none"
    raise ModelLoadError(f"{pretrained!r} is neither a pretrained tag of {arch} (known: {tags}) "
                         "nor an existing checkpoint file")


def _tokenizer_context(model: str) -> int | None:
    """The context length open_clip's ``get_tokenizer`` gives ``model``'s tokenizer (its config's
    ``text_cfg.context_length``, else 77), when that tokenizer is open_clip's own BPE one and the config
    is readable here; None otherwise (Hugging Face and SigLIP tokenizers are built at load time)."""
    cfg = _model_config(model) if model.startswith(_LOCAL_DIR) or model == model.replace("/", "-") else None
    if cfg is None or _needs_hf_text(model) or "siglip" in model.lower():
        return None
    text = (cfg.get("model_cfg", cfg) or {}).get("text_cfg") or {}
    return int(text.get("context_length") or 77)


def _load(model: str, pretrained: str | None, *, device: str, precision: str | None, seed: int) -> ClipModel:
    torch = _torch()
    if not model:
        raise ModelLoadError("similarity.model is empty: name an open_clip architecture, hf-hub:org/repo or "
                             "local-dir:/path")
    pretrained = pretrained or None
    oc = _open_clip(_needs_hf_text(model), _needs_timm(model), _needs_hf_hub(model, pretrained))
    try:
        arch, weights_of, model_arg, pretrained_arg = _resolve(oc, model, pretrained, seed)
        random_init = pretrained_arg is None and not model.startswith((_LOCAL_DIR, _HF_HUB))
        if random_init:
            log.warning("#" * 78)
            log.warning("# similarity: %s with pretrained=null -> RANDOM WEIGHTS. Scores are meaningless;", arch)
            log.warning("# use this for tests only. Set similarity.pretrained to a tag or a checkpoint file.")
            log.warning("#" * 78)
            torch.manual_seed(seed)
        net, preprocess = build(oc, torch, model_arg, pretrained_arg, random_init)
        context_length = _tokenizer_context(model)
        tokenizer = None if context_length else oc.get_tokenizer(model_arg)
        weights = weights_of()
    except ModelLoadError:
        raise
    except Exception as exc:  # open_clip / huggingface_hub raise many kinds; all mean 'cannot load'
        raise _load_error(model, pretrained, exc) from exc
    if tokenizer is not None:
        context_length = int(getattr(tokenizer, "context_length", None) or getattr(net, "context_length", 77))
    return _finish(net, preprocess, functools.partial(oc.get_tokenizer, model_arg), tokenizer, device=device,
                   precision=precision, arch=arch, weights=weights, context_length=int(context_length))


def _finish(net, preprocess, make_tokenizer, tokenizer, *, device: str, precision: str | None, arch: str,
            weights: str, context_length: int) -> ClipModel:
    """The loaded module on its device, named and measured: the :class:`ClipModel`."""
    net.eval()
    net.to(device)
    pp_cfg = dict(getattr(net.visual, "preprocess_cfg", None) or {})
    if not pp_cfg:  # older open_clip: rebuild from the transform
        pp_cfg = {"size": getattr(net.visual, "image_size", 224)}
    model_id = f"{arch}|{weights}|{_describe_preprocess(pp_cfg)}"
    logit_scale = float(net.logit_scale.exp().item()) if hasattr(net, "logit_scale") else 100.0
    embed_dim = _embed_dim(net, preprocess, device)
    dtype = resolve_precision(precision, device)
    clip = ClipModel(
        model=net, preprocess=preprocess, make_tokenizer=make_tokenizer, device=device, autocast_dtype=dtype,
        model_id=model_id, arch=arch, weights=weights, preprocess_cfg=pp_cfg, context_length=context_length,
        logit_scale=logit_scale, embed_dim=embed_dim,
        precision={None: "fp32"}.get(dtype, str(dtype).replace("torch.", "")),
        _tokenizer=tokenizer,
    )
    clip.encode_batch = encode_batch(device)
    clip.numerics = numerics(device, clip.precision, clip.encode_batch)
    log.info("loaded CLIP %s on %s (%s, dim %d, context %d)", model_id, device, clip.precision, embed_dim,
             context_length)
    return clip


def encode_batch(device: str) -> int:
    """The pass size of a device (``cuda:1`` → ``ENCODE_BATCH["cuda"]``); unknown kinds get the CPU's."""
    kind = device.split(":")[0]
    return int(ENCODE_BATCH.get(kind, ENCODE_BATCH["cpu"]))


def numerics(device: str, precision: str, batch: int | None = None) -> str:
    """What besides the model decides an embedding's bits: ``cpu-AVX512`` / ``cuda-<device name>``,
    the autocast precision, the pass size (``encode_batch(device)`` unless given) and the torch
    version (see module doc)."""
    torch = _torch()
    kind = device.split(":")[0]
    batch = encode_batch(device) if batch is None else int(batch)
    if kind == "cuda":
        where = f"cuda-{torch.cuda.get_device_name(torch.device(device))}"
    elif kind == "cpu":
        where = f"cpu-{torch.backends.cpu.get_cpu_capability()}"
    else:
        where = kind
    return f"{where}|{precision}|b{batch}|torch-{torch.__version__}"


def _embed_dim(net, preprocess, device: str) -> int:
    dim = getattr(net, "embed_dim", None)
    proj = getattr(getattr(net, "visual", None), "output_dim", None)
    for v in (proj, dim):
        if isinstance(v, int) and v > 0:
            return v
    torch = _torch()
    with torch.inference_mode():
        tok = torch.zeros((1, 77), dtype=torch.long, device=device)
        return int(net.encode_text(tok).shape[-1])

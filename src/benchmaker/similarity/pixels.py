"""The pixel store: each shard's images decoded once, on a CPU job, into the CLIP model's input pixels.

Rule ``decode_images`` (one CPU job per shard, ``similarity.decode.run_shard``) turns every distinct
image file of the shard into exactly the uint8 pixels that the model sees before normalisation —
``benchmaker.imaging.decode`` (JPEG draft mode, EXIF orientation, first frame, 16-bit scaled, CMYK
via ICC, transparency on white), then open_clip's resize and crop for the model's input size — and writes them to

* ``pixels/<key>/{shard}.npy``: uint8 ``[n, 3, H, W]`` (channels first, as the model takes them), a plain
  NumPy array file, read with memory maps (``np.load(mmap_mode="r")``); row i is the i-th distinct
  sha256 of the shard (zeros when it could not be decoded);
* ``pixels/<key>/{shard}.parquet``: one row per distinct sha256 of the shard, in first-appearance order:
  ``sha256``, ``row`` (its row of the ``.npy``; null when it could not be decoded), ``reason``,
  ``detail`` (as the embed losses name them); metadata ``benchmaker.kind=pixels``,
  ``benchmaker.format``, ``benchmaker.pixels`` (the :class:`PixelSpec` id).

The GPU jobs (``embed_images``, and ``vision`` with the clip adapter, shared with the embeddings or
not) then only read these arrays and run the model: no image file is opened there. The workflow
keeps them under ``pixels/<key>/`` where the key names the model that decides the pixels
(``rules/common.smk``: ``pixel_key``), so two stages on one model read one store. The pixels are
the same bytes on every executor (the decoding is the one the file path of ``similarity.embed``
runs; the spec id is part of ``model_id``, hence of the embedding cache key), so an embedding from
the store and one from the file are the same bits (tests/test_pixels.py).

:func:`pixel_spec` finds the model's input size, interpolation, resize mode and fill colour from
open_clip's configuration files without building the model; the GPU job checks that the store's spec
is the loaded model's (:func:`check_spec`) and stops with an error naming the fix when it is not.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl

from ..formats import FormatError
from ..logs import get_logger

__all__ = ["PixelSpec", "PixelStore", "pixel_spec", "check_spec", "store_rows", "PIXELS_FORMAT", "INDEX_SCHEMA"]

log = get_logger("similarity.pixels")
PIXELS_FORMAT = 1
INDEX_SCHEMA = {"sha256": pl.String, "row": pl.Int32, "reason": pl.String, "detail": pl.String}


@dataclass(frozen=True)
class PixelSpec:
    """What decides the pixels: input size (height, width), interpolation, resize mode, fill colour."""

    size: tuple[int, int]
    interpolation: str = "bicubic"
    resize_mode: str = "shortest"
    fill_color: int = 0

    @classmethod
    def from_cfg(cls, cfg: Mapping[str, Any]) -> PixelSpec:
        """From an open_clip preprocess config (``model.visual.preprocess_cfg`` or the merged dicts)."""
        size = cfg.get("size", 224)
        hw = (int(size), int(size)) if isinstance(size, int) else (int(size[0]), int(size[1]))
        return cls(hw, str(cfg.get("interpolation") or "bicubic"), str(cfg.get("resize_mode") or "shortest"),
                   int(cfg.get("fill_color") or 0))

    @property
    def id(self) -> str:
        from .model import DECODE, PREPROCESS_VERSION

        h, w = self.size
        return (f"{h}x{w}-{self.interpolation}-{self.resize_mode}-fill{self.fill_color}-{DECODE}"
                f"-v{PREPROCESS_VERSION}")


def _model_configs(model: str, pretrained: str | None) -> tuple[dict, dict]:
    """(model_cfg, preprocess overlay) as open_clip's create_model reads them (factory.py)."""
    from .model import _HF_HUB, _LOCAL_DIR, _open_clip

    if model.startswith(_LOCAL_DIR):
        cfg = json.loads((Path(model[len(_LOCAL_DIR):]).expanduser() / "open_clip_config.json").read_text())
        return cfg.get("model_cfg") or {}, cfg.get("preprocess_cfg") or {}
    # the Hub client only for a hub model's config (a pretrained tag's is in open_clip's tables)
    oc = _open_clip(hf_text=False, timm_vision=False, hf_hub=model.startswith(_HF_HUB))
    if model.startswith(_HF_HUB):
        from open_clip.factory import _get_hf_config

        cfg = _get_hf_config(model[len(_HF_HUB):])
        return cfg.get("model_cfg") or {}, cfg.get("preprocess_cfg") or {}
    arch = model.replace("/", "-")
    model_cfg = oc.get_model_config(arch)
    if model_cfg is None:
        raise FormatError(f"unknown open_clip architecture {model!r}: no input size to decode images for")
    overlay: dict = {}
    if pretrained and not Path(str(pretrained)).expanduser().is_file():
        overlay = oc.pretrained.get_pretrained_cfg(arch, pretrained) or {}
    return model_cfg, overlay


def pixel_spec(model: str, pretrained: str | None = None) -> PixelSpec:
    """The pixel spec of an open_clip model (``similarity.model`` / ``pretrained``), from its config."""
    try:
        model_cfg, overlay = _model_configs(model, pretrained)
    except Exception as exc:  # a Hub model's config not downloadable: the loader's error, with its fix
        from .model import ModelLoadError, _load_error

        if isinstance(exc, ModelLoadError):
            raise
        raise _load_error(model, pretrained, exc) from exc
    cfg: dict[str, Any] = {k: v for k, v in overlay.items() if v is not None}
    size = (model_cfg.get("vision_cfg") or {}).get("image_size")
    if size is not None:  # the model's visual tower decides the size (factory: visual.image_size)
        cfg["size"] = size
    return PixelSpec.from_cfg(cfg)


def check_spec(clip, spec_id: str, where: str) -> None:
    """Stop when a store's pixels are not the loaded model's input (``where``: the store)."""
    have = PixelSpec.from_cfg(clip.preprocess_cfg).id
    if have != spec_id:
        raise FormatError(f"{where}: pixels decoded as {spec_id!r}, but the model {clip.model_id!r} takes "
                          f"{have!r}; rerun decode_images (snakemake --forcerun decode_images)")


# ----------------------------------------------------------------------------------------------- read
class PixelStore:
    """One shard's pixel store, read with a memory map (see module doc)."""

    def __init__(self, npy: str | os.PathLike, index: str | os.PathLike):
        import pyarrow.parquet as pq

        self.npy, self.index_path = Path(npy), Path(index)
        try:
            raw = pq.read_metadata(self.index_path).metadata or {}
            self.index = pl.read_parquet(self.index_path)
            self.pixels = np.load(self.npy, mmap_mode="r", allow_pickle=False)
        except Exception as exc:
            raise FormatError(f"{self.index_path}: not a readable pixel store ({exc}); rerun decode_images") from None
        meta = {k.decode(): v.decode() for k, v in raw.items()}
        if meta.get("benchmaker.kind") != "pixels" or meta.get("benchmaker.format") != str(PIXELS_FORMAT):
            raise FormatError(f"{self.index_path}: not a pixel store of format {PIXELS_FORMAT}; rerun decode_images")
        self.spec_id = meta.get("benchmaker.pixels", "")
        if self.pixels.dtype != np.uint8 or self.pixels.ndim != 4 or self.pixels.shape[0] != self.index.height:
            raise FormatError(f"{self.npy}: {self.pixels.dtype} {self.pixels.shape} does not match its index "
                              f"({self.index.height} rows); rerun decode_images")


def store_rows(stores: Sequence[PixelStore], shas: Sequence[str]
               ) -> tuple[list[tuple[int, int, int]], dict[int, tuple[str, str]]]:
    """Where each wanted sha256 lies: ([(position in ``shas``, store, row)], {position: (reason, detail)})
    from the first store that knows it; a sha256 no store knows is an error (the wrong stores)."""
    pos = {s: i for i, s in enumerate(shas)}
    found: dict[int, tuple[int, int]] = {}
    failed: dict[int, tuple[str, str]] = {}
    for k, st in enumerate(stores):
        for sha, row, reason, detail in st.index.iter_rows():
            i = pos.get(sha)
            if i is None or i in found or i in failed:
                continue
            if row is None:
                failed[i] = (reason or "image_decode_error", detail or "")
            else:
                found[i] = (k, int(row))
    missing = [shas[i] for i in range(len(shas)) if i not in found and i not in failed]
    if missing:
        raise FormatError(f"{len(missing)} images (e.g. sha256 {missing[0]}) are in none of the pixel stores "
                          f"{[str(s.index_path) for s in stores][:3]}; rerun decode_images")
    return sorted(((i, k, r) for i, (k, r) in found.items()), key=lambda t: (t[1], t[2])), failed

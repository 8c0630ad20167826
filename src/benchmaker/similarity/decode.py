"""Rule ``decode_images``: one shard's image files decoded once, on a CPU job, into its pixel store
(format and meaning: ``similarity.pixels``). The decoding is the file path's own (``similarity.embed``:
``imaging.decode`` in JPEG draft mode, then open_clip's resize and crop, uint8), so a stored image is
the same bytes that the model job would have decoded from the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import polars as pl

from ..formats import read_table
from ..io import atomic_path
from ..logs import get_logger, progress
from .embed import ImageFiles, _collate, _split_preprocess, fit_loader_to_shm, image_paths
from .pixels import INDEX_SCHEMA, PIXELS_FORMAT, PixelSpec, pixel_spec

__all__ = ["run_shard", "spec_transform", "write_store"]

log = get_logger("similarity.decode")


def spec_transform(spec: PixelSpec):
    """open_clip's eval transform for ``spec``, without ToTensor/Normalize (PIL in, PIL out)."""
    from .model import _open_clip

    oc = _open_clip(hf_text=False, timm_vision=False, hf_hub=False)  # the transforms only
    tf = oc.transform.image_transform(spec.size, is_train=False, resize_mode=spec.resize_mode,
                                      interpolation=spec.interpolation, fill_color=spec.fill_color)
    pil_tf, mean, _ = _split_preprocess(tf)
    if mean is None:  # pragma: no cover - open_clip changed its transform layout
        raise RuntimeError("open_clip's eval transform no longer ends in ToTensor + Normalize")
    return pil_tf


def write_store(images: pl.DataFrame, spec: PixelSpec, *, image_root: str | os.PathLike | None,
                npy: str | os.PathLike, index: str | os.PathLike, workers: int = 0, desc: str = "decode") -> int:
    """Decode the distinct sha256 of ``images`` (canonical names) into the store files; returns rows."""
    import torch

    base = images.select("sha256").with_columns(
        pl.Series("__path", image_paths(images, image_root), dtype=pl.String)).unique(
        "sha256", keep="first", maintain_order=True)
    h, w = spec.size
    draft = (w, h)  # PIL's draft() takes (width, height)
    ds = ImageFiles(base["__path"].to_list(), spec_transform(spec), draft, to_uint8=True)
    batch = 64
    nw, prefetch = fit_loader_to_shm(max(0, int(workers)), 4, batch * 3 * h * w)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=False, num_workers=nw,
                                         collate_fn=_collate, prefetch_factor=prefetch if nw else None)
    n = base.height
    reasons: list[str | None] = [None] * n
    details: list[str | None] = [None] * n
    decoded = np.zeros(n, dtype=bool)
    with atomic_path(npy, suffix=".npy.tmp") as tmp:
        # row i = the i-th distinct sha256 (zeros where it could not be decoded), written as decoded:
        # memory holds a few batches, never the shard
        arr = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(n, 3, h, w))
        with progress(total=n, desc=desc, unit="img", logger=log) as bar:
            for idx, pixels, failed in loader:
                for i, reason, detail in failed:
                    reasons[i], details[i] = reason, detail
                if pixels is not None:
                    at = idx.numpy()
                    arr[at] = pixels.numpy()
                    decoded[at] = True
                bar.update(len(idx) + len(failed))
        arr.flush()
        del arr
    k = int(decoded.sum())
    table = pl.DataFrame({"sha256": base["sha256"],
                          "row": pl.Series([i if ok else None for i, ok in enumerate(decoded)], dtype=pl.Int32),
                          "reason": reasons, "detail": details}, schema=INDEX_SCHEMA)
    meta = {"benchmaker.kind": "pixels", "benchmaker.format": str(PIXELS_FORMAT), "benchmaker.pixels": spec.id}
    with atomic_path(index, suffix=".parquet.tmp") as tmp:
        table.write_parquet(tmp, compression="zstd", metadata=meta)
    log.info("%s: %d distinct images, %d decoded (%s, %.1f MB), %d failed", desc, n, k, spec.id,
             k * 3 * h * w / 1e6, n - k)
    return k


def run_shard(*, images: str, pixels: str, index: str, model: Mapping[str, Any], image_root: str | None = None,
              columns: Mapping[str, str] | None = None, threads: int = 1) -> int:
    """Stage ``decode_images``: one shard's image files → its pixel store (see module doc)."""
    imgs = read_table("images", images, columns=columns)
    spec = pixel_spec(model["model"], model.get("pretrained"))
    # the main process writes rows; the others decode (one process decodes alone)
    return write_store(imgs, spec, image_root=image_root, npy=pixels, index=index,
                       workers=max(0, int(threads) - 1) if threads > 1 else 0, desc=f"decode {Path(images).stem}")

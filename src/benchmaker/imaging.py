"""The one image decoder: every stage that reads pixels goes through ``decode`` / ``flatten``.

Used by the CLIP loader (``similarity.embed.load_image``: embed_images and the clip vision adapter),
the inline images of API requests (``providers.spec.encode_image``), the pHash of preprocess
(``preprocess.inspect``), the contact sheet of the summary, and the export (``export_bytes``).

What ``decode`` returns for a file is an 8-bit image showing what a person sees:

* **first frame** of an animated GIF/PNG/WebP;
* **EXIF orientation** applied (the image is shown upright; width/height are the upright ones, as
  images.jsonl records them);
* **16-bit and 32-bit greyscale** (``I;16*``, ``I``) and float (``F``) images are *scaled* to 0..255
  (65535 -> 255; a 32-bit ``I`` image holding 16-bit data, as some PNG decoders give, likewise), never
  clipped (``convert("RGB")`` on ``I;16`` gives pure black and white);
* **CMYK** is converted with its embedded ICC profile to sRGB when it has one (littleCMS), else with
  Pillow's conversion;
* **transparency** (RGBA, LA, PA, palette images with a ``tRNS`` transparent colour or alpha table)
  is composited on a **white** background (``BACKGROUND``): a transparent pixel shows white, not its
  stored colour (often a key colour such as magenta, or black);
* everything else (``1``, ``L``, ``P``, ``YCbCr``, ``LAB``, ``HSV``) is converted to RGB (or L).

``export_bytes`` decides what the dataset stores: the original bytes when a consumer decoding them
with Pillow the usual way (``datasets.Image`` applies EXIF orientation, then ``convert("RGB")``) gets
the same pixels as ``decode``; otherwise (16-bit, alpha/transparency, animation, CMYK with a
profile) the pixels ``decode`` produced, re-encoded losslessly in the file's own format (JPEG at
quality 95 4:4:4 for a CMYK JPEG; a GIF's first frame as a single-frame GIF), so ``mime_type`` stays
true and width/height describe the stored image. Bump ``IMAGING_VERSION`` when any of this changes
what pixels a stage sees (it is part of the CLIP model identity, hence of the embedding cache key).

**Size.** The one pixel limit is ``preprocess.max_pixels``: preprocess quarantines larger files
(``decompression_bomb``) and every file this module opens is one it accepted. PIL's own default
limit (a ``DecompressionBombWarning`` above 89 MP, ``DecompressionBombError`` above 179 MP) would
contradict it (an accepted 200 MP panorama under ``max_pixels: 300000000`` failed every later stage;
a 108 MP one logged "could be decompression bomb DOS attack" in each), so :func:`_open` lifts that
default, once per process; a limit someone set on purpose (preprocess's own, during its run) is kept.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import IO, Any

__all__ = ["decode", "flatten", "export_bytes", "needs_reencode", "BACKGROUND", "IMAGING_VERSION"]

IMAGING_VERSION = 1
BACKGROUND = (255, 255, 255)        # transparent pixels are composited on white

_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")
_PLAIN_MODES = ("RGB", "L", "1", "YCbCr")
_PIL_DEFAULT_MAX_PIXELS = 1024 * 1024 * 1024 // 4 // 3    # PIL.Image.MAX_IMAGE_PIXELS as Pillow sets it


def _open(src: str | Path | IO[bytes]):
    """``PIL.Image.open`` without PIL's default pixel limit (module doc, "Size")."""
    from PIL import Image

    if Image.MAX_IMAGE_PIXELS == _PIL_DEFAULT_MAX_PIXELS:
        Image.MAX_IMAGE_PIXELS = None
    return Image.open(src)


def _has_transparency(im: Any) -> bool:
    return im.mode in _ALPHA_MODES or "transparency" in im.info


def _deep_to_l(im: Any) -> Any:
    """``I;16*`` / ``I`` / ``F`` -> ``L``, scaled to the data's bit depth (never clipped)."""
    import numpy as np
    from PIL import Image

    arr = np.asarray(im)
    if arr.dtype.kind == "f":
        hi = 1.0 if arr.size and float(np.nanmax(arr)) <= 1.0 else 255.0
        out = np.clip(np.nan_to_num(arr) / hi * 255.0, 0, 255)
    else:
        arr = arr.astype(np.int64)
        peak = int(arr.max()) if arr.size else 0
        if im.mode.startswith("I;16") or peak > 255:
            full = 65535 if peak <= 65535 else (1 << 32) - 1
            out = arr * 255.0 / full
        else:                            # an "I" image holding 8-bit data
            out = arr
        out = np.clip(np.rint(out), 0, 255)
    return Image.fromarray(out.astype(np.uint8), mode="L")


def _cmyk_to_rgb(im: Any) -> Any:
    icc = im.info.get("icc_profile")
    if icc:
        try:
            from PIL import ImageCms

            src = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            return ImageCms.profileToProfile(im, src, ImageCms.createProfile("sRGB"), outputMode="RGB")
        except Exception:  # a broken profile: fall back to Pillow's conversion
            pass
    return im.convert("RGB")


def flatten(im: Any, mode: str = "RGB", *, orient: bool = True, background: tuple[int, int, int] = BACKGROUND):
    """An opened (or loaded) PIL image -> ``mode`` ("RGB" or "L"), following the rules of the module doc."""
    from PIL import Image, ImageOps

    if getattr(im, "is_animated", False) and im.tell() != 0:
        im.seek(0)
    if orient:
        im = ImageOps.exif_transpose(im)
    if im.mode.startswith("I") or im.mode == "F":
        im = _deep_to_l(im)
    elif im.mode == "CMYK":
        im = _cmyk_to_rgb(im)
    if _has_transparency(im):
        rgba = im.convert("RGBA")
        base = Image.new("RGBA", rgba.size, (*background, 255))
        im = Image.alpha_composite(base, rgba).convert("RGB")
    if im.mode != mode:
        im = im.convert(mode)
    return im


def decode(src: str | Path | IO[bytes], *, mode: str = "RGB", draft_size: tuple[int, int] | None = None,
           background: tuple[int, int, int] = BACKGROUND):
    """Open and decode an image file (a path or a binary file object) -> an upright 8-bit ``mode`` image.

    ``draft_size``: JPEGs are decoded in draft mode (DCT scaling) at the smallest scale still >= it.
    """
    with _open(src) as im:
        if draft_size is not None and im.format == "JPEG":
            im.draft("RGB", draft_size)  # smallest DCT scale whose result is still >= draft_size
        im.load()
        out = flatten(im, mode, background=background)
        if out is im:                      # flatten changed nothing: detach from the file
            out = im.copy()
        return out


def needs_reencode(im: Any) -> bool:
    """Would a consumer's ``exif_transpose`` + ``convert("RGB")`` differ from ``decode``?"""
    if getattr(im, "is_animated", False) and getattr(im, "n_frames", 1) > 1:
        return True
    if im.mode == "CMYK":
        return bool(im.info.get("icc_profile"))
    if im.mode == "P":
        return "transparency" in im.info
    return im.mode not in _PLAIN_MODES or "transparency" in im.info


_SAVE = {
    "PNG": {"format": "PNG", "optimize": False, "compress_level": 6},
    "GIF": {"format": "GIF"},
    "TIFF": {"format": "TIFF", "compression": "tiff_deflate"},
    "WEBP": {"format": "WEBP", "lossless": True, "quality": 100, "method": 4},
    "BMP": {"format": "BMP"},
    "JPEG": {"format": "JPEG", "quality": 95, "subsampling": 0},
    "MPO": {"format": "JPEG", "quality": 95, "subsampling": 0},
}


def export_bytes(data: bytes) -> bytes:
    """The bytes the dataset stores for an image file's ``data`` (see the module doc)."""
    from PIL import Image

    with _open(io.BytesIO(data)) as im:
        if not needs_reencode(im):
            return data
        fmt = im.format or "PNG"
        im.load()
        out = flatten(im, "RGB")
    opts = dict(_SAVE.get(fmt, _SAVE["PNG"]))
    buf = io.BytesIO()
    if opts["format"] == "GIF":
        out = out.convert("P", palette=Image.Palette.ADAPTIVE, colors=256)
    out.save(buf, **opts)
    return buf.getvalue()

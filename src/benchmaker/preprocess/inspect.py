"""Inspect one image file: size checks, content hash, decode, dimensions, perceptual hash, colour signature.

``inspect_file`` never raises for a bad file: it returns either an ``Accepted`` row or a ``Rejected``
(reason code + detail). It holds at most one decoded, *reduced* image at a time and drops it before
returning, so a worker's memory does not grow with the corpus.

PIL's process-wide switches (``Image.MAX_IMAGE_PIXELS``, ``ImageFile.LOAD_TRUNCATED_IMAGES``) are set
by ``pil_limits`` for the duration of a run and restored afterwards.
"""

from __future__ import annotations

import contextlib
import hashlib
import mimetypes
import os
import warnings
from dataclasses import dataclass
from typing import Iterator

from PIL import Image, ImageFile, UnidentifiedImageError

from ..imaging import flatten
from ..settings_schema import default

__all__ = ["Accepted", "Rejected", "InspectSettings", "inspect_file", "pil_limits", "REASONS"]

# Stable quarantine reason codes (documented in docs/preprocess.md). Never rename one.
REASONS = {
    "empty": "the file has 0 bytes",
    "too_large": "the file is larger than preprocess.max_bytes",
    "not_an_image": "PIL does not recognise the content as an image",
    "decompression_bomb": "width x height exceeds preprocess.max_pixels",
    "truncated": "the image data ends early (found when decoding)",
    "unreadable": "the file cannot be read or its image data is corrupt",
    "symlink": "a symbolic link, and preprocess.follow_symlinks is false",
    "symlink_escape": "a symbolic link that resolves outside image_root",
    "broken_symlink": "a symbolic link whose target does not exist",
    "invalid_filename": "the path is not valid UTF-8, so it cannot be an image_id",
}

# PIL format names whose MIME type PIL reports in a way browsers and datasets do not expect
_MIME_OVERRIDES = {"MPO": "image/jpeg"}  # multi-picture JPEG from cameras: a plain JPEG to everyone else

PHASH_DRAFT_SIZE = 128  # JPEG: decode at 1/2..1/8 scale, never below this; phash works on 32 x 32 anyway


@dataclass(frozen=True)
class InspectSettings:
    max_bytes: int
    max_pixels: int
    verify_decode: bool = default("preprocess.verify_decode")


@dataclass(frozen=True)
class Accepted:
    image_id: str
    mime_type: str
    width: int
    height: int
    file_size: int
    sha256: str
    phash: str | None
    color_signature: str | None = None  # colour layout and texture, from the same decode (:func:`color_signature_of`)
    format_mismatch: bool = False  # extension says one format, content another (accepted, counted)
    decode_error: str | None = None  # verify_decode=false: the decode failed (accepted without phash, counted)
    phash_error: str | None = None  # decoded, but phash failed (an exotic pixel mode): accepted, counted


@dataclass(frozen=True)
class Rejected:
    path: str
    reason: str
    detail: str | None = None


@contextlib.contextmanager
def pil_limits(max_pixels: int) -> Iterator[None]:
    """Set PIL's decompression-bomb limit and strict truncation handling; restore them on exit.

    PIL warns above ``MAX_IMAGE_PIXELS`` and raises ``DecompressionBombError`` above twice that; we
    set the limit to ``max_pixels``, silence the warning (our own check quarantines those files) and
    let the error catch the huge ones before any pixel buffer is allocated.
    """
    old_max, old_trunc = Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES
    Image.MAX_IMAGE_PIXELS = int(max_pixels)
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            yield
    finally:
        Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES = old_max, old_trunc


def _mime(fmt: str | None, path: str) -> str:
    if fmt:
        if fmt in _MIME_OVERRIDES:
            return _MIME_OVERRIDES[fmt]
        mt = Image.MIME.get(fmt.upper())
        if mt:
            return mt
    return mimetypes.guess_type(path)[0] or "application/octet-stream"


def _ext_mime(path: str) -> str | None:
    return mimetypes.guess_type(path)[0]


def _oriented_size(im: Image.Image) -> tuple[int, int]:
    """Width and height as displayed (EXIF orientation 5-8 swaps them)."""
    w, h = im.size
    return (h, w) if _orientation(im) in (5, 6, 7, 8) else (w, h)


def _classify_decode_error(exc: BaseException) -> str:
    msg = str(exc).lower()
    if isinstance(exc, EOFError) or "truncated" in msg or "premature end" in msg or "end of file" in msg:
        return "truncated"
    return "unreadable"


def _phash_of(im: Image.Image) -> str:
    """pHash of the displayed image, computed on a small grayscale copy (phash itself works on 32 x 32).

    The copy is box-reduced by an integer factor to about PHASH_DRAFT_SIZE px on the short side first:
    a LANCZOS resize of a full-size PNG to 32 x 32 costs ten times more and gives the same hash bits
    up to rounding. JPEGs arrive already reduced by ``draft``, so both paths see similar sizes.
    """
    import imagehash

    small = im if im.mode == "L" else flatten(im, "L", orient=False)   # 16-bit scaled, alpha on white
    return str(imagehash.phash(_reduced_upright(small, im)))


def _reduced_upright(copy: Image.Image, im: Image.Image) -> Image.Image:
    """``copy`` (``im`` in another mode) box-reduced by an integer factor to about PHASH_DRAFT_SIZE px on
    its short side, then turned upright by ``im``'s EXIF orientation: what the pHash and the colour
    signature are computed from."""
    factor = min(copy.size) // PHASH_DRAFT_SIZE
    if factor > 1:
        copy = copy.reduce(factor)
    method = _TRANSPOSE.get(_orientation(im))
    return copy if method is None else copy.transpose(method)


SIGNATURE_GRID = 4  # the colour signature's cells per side


def color_signature_of(im: Image.Image) -> str:
    """The colour signature of the displayed image (the second signal of near-duplicate groups, beside
    the grey-level pHash: benchmaker.preprocess.duplicates): the mean CIELAB colour of each cell of a
    ``SIGNATURE_GRID`` x ``SIGNATURE_GRID`` grid, then the standard deviation of the lightness over the
    image (its texture), as hex: per cell L (0-255 for L* 0-100), a*, b* (signed bytes, PIL's LAB
    mode), then one byte of the lightness deviation (0-255 scale, capped). Computed on the copy the
    pHash is computed from (alpha composited on white, box-reduced to about PHASH_DRAFT_SIZE px,
    upright)."""
    import numpy as np

    rgb = _reduced_upright(flatten(im, "RGB", orient=False), im)
    lab = rgb.convert("LAB")
    cells = lab.resize((SIGNATURE_GRID, SIGNATURE_GRID), Image.Resampling.BOX).tobytes()
    spread = min(255, round(float(np.asarray(lab.getchannel(0), dtype=np.float64).std())))
    return cells.hex() + f"{spread:02x}"


def _detail(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 500 else text[:497] + "..."


def inspect_file(path: str, image_id: str, settings: InspectSettings) -> Accepted | Rejected:
    """Inspect ``path`` (whose id is ``image_id``). Call inside ``pil_limits``."""
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        return Rejected(image_id, "unreadable", _detail(exc))
    if size == 0:
        return Rejected(image_id, "empty", "0 bytes")
    if size > settings.max_bytes:
        return Rejected(image_id, "too_large", f"{size} bytes > max_bytes {settings.max_bytes}")
    try:
        fh = open(path, "rb")
    except OSError as exc:
        return Rejected(image_id, "unreadable", _detail(exc))
    with fh:
        try:
            sha256 = hashlib.file_digest(fh, "sha256").hexdigest()
            fh.seek(0)
        except OSError as exc:
            return Rejected(image_id, "unreadable", _detail(exc))
        try:
            im = Image.open(fh)
        except Image.DecompressionBombError as exc:
            return Rejected(image_id, "decompression_bomb", _detail(exc))
        except UnidentifiedImageError:
            fh.seek(0)
            head = fh.read(8)
            return Rejected(image_id, "not_an_image", f"no image format recognised (first bytes {head!r})")
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            return Rejected(image_id, _classify_decode_error(exc), _detail(exc))
        with im:
            w0, h0 = im.size
            if w0 * h0 > settings.max_pixels:
                return Rejected(
                    image_id, "decompression_bomb", f"{w0}x{h0} = {w0 * h0} pixels > max_pixels {settings.max_pixels}"
                )
            if w0 < 1 or h0 < 1:
                return Rejected(image_id, "unreadable", f"image size {w0}x{h0}")
            fmt = im.format
            width, height = _oriented_size(im)
            mime = _mime(fmt, path)
            ext_mime = _ext_mime(path)
            mismatch = bool(ext_mime and ext_mime != mime and not (fmt == "MPO" and ext_mime == "image/jpeg"))
            phash: str | None = None
            signature: str | None = None
            decode_error: str | None = None
            phash_error: str | None = None
            try:
                # JPEG: DCT-domain downscaling still reads every entropy-coded byte, so truncation is
                # caught; other formats decode at full size.
                im.draft("RGB" if im.mode not in ("L", "1") else "L", (PHASH_DRAFT_SIZE, PHASH_DRAFT_SIZE))
                im.load()
            except Image.DecompressionBombError as exc:
                return Rejected(image_id, "decompression_bomb", _detail(exc))
            except (OSError, SyntaxError, ValueError, EOFError, MemoryError) as exc:
                if settings.verify_decode:
                    return Rejected(image_id, _classify_decode_error(exc), _detail(exc))
                decode_error = _detail(exc)
            if decode_error is None:
                try:
                    phash = _phash_of(im)
                    signature = color_signature_of(im)
                except Exception as exc:  # an exotic mode: keep the (decodable) image, without phash
                    phash, phash_error = None, _detail(exc)
    return Accepted(
        image_id=image_id, mime_type=mime, width=width, height=height, file_size=size, sha256=sha256,
        phash=phash, color_signature=signature, format_mismatch=mismatch, decode_error=decode_error,
        phash_error=phash_error,
    )


_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}  # EXIF orientation -> the transpose that shows the image upright (as ImageOps.exif_transpose does)


def _orientation(im: Image.Image) -> int:
    try:
        return int(im.getexif().get(0x0112, 1) or 1)
    except Exception:  # a broken EXIF block must not reject an otherwise good image
        return 1

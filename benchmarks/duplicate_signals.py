"""The two signals of near-duplicate groups (pHash bits, colour distance) on the example's photos, their
true copies and their colour variants: what the thresholds of benchmaker.preprocess.duplicates rest on.

    python benchmarks/duplicate_signals.py [IMAGE_FOLDER=example/images]

For every photo: a copy resized to half size, re-encoded at JPEG quality 60, cropped by 1 % and 3 % per
side; and colour variants: red and green channels exchanged, red and blue exchanged, a warm and a cold
white balance (red x1.15 / blue x0.85 and the reverse). Prints, per kind, the pHash distance and the
colour distance (L* units) to the photo (median, 95th percentile, max, min) and how many pairs the
rule groups (pHash <= preprocess.near_duplicate_threshold and colour distance within COLOR_MAX, or
FLAT_COLOR_MAX for near-uniform images), then the closest pair of distinct photos. Nothing is written.
"""

from __future__ import annotations

import io
import itertools
import sys
from pathlib import Path

import numpy as np
import polars as pl
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from benchmaker.preprocess.duplicates import (  # noqa: E402
    COLOR_MAX,
    DEFAULT_THRESHOLD,
    FLAT_COLOR_MAX,
    FLAT_SPREAD,
    color_distance,
    phash_codes,
    signatures,
)
from benchmaker.preprocess.inspect import _phash_of, color_signature_of  # noqa: E402


def _jpeg(im: Image.Image, quality: int) -> Image.Image:
    buf = io.BytesIO()
    im.convert("RGB").save(buf, "JPEG", quality=quality)
    buf.seek(0)
    out = Image.open(buf)
    out.load()
    return out


def _crop(im: Image.Image, share: float) -> Image.Image:
    w, h = im.size
    dx, dy = max(1, round(w * share)), max(1, round(h * share))
    return im.crop((dx, dy, w - dx, h - dy))


def _balance(im: Image.Image, r: float, b: float) -> Image.Image:
    a = np.asarray(im.convert("RGB"), dtype=np.float64)
    a[..., 0] *= r
    a[..., 2] *= b
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


VARIANTS = {
    "copy: resized 1/2": lambda im: im.convert("RGB").resize((im.width // 2, im.height // 2)),
    "copy: JPEG q60": lambda im: _jpeg(im, 60),
    "copy: cropped 1 %": lambda im: _crop(im.convert("RGB"), 0.01),
    "copy: cropped 3 %": lambda im: _crop(im.convert("RGB"), 0.03),
    "colour: red<->green": lambda im: Image.merge("RGB", [im.convert("RGB").split()[i] for i in (1, 0, 2)]),
    "colour: red<->blue": lambda im: Image.merge("RGB", [im.convert("RGB").split()[i] for i in (2, 1, 0)]),
    "colour: warm": lambda im: _balance(im, 1.15, 0.85),
    "colour: cold": lambda im: _balance(im, 0.85, 1.15),
}


def _features(ims: list[Image.Image]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    codes, _ = phash_codes(pl.Series([_phash_of(im) for im in ims]))
    lab, spread, _ = signatures(pl.Series([color_signature_of(im) for im in ims]))
    return codes, lab, spread


def main(folder: str = "example/images") -> None:
    paths = sorted(p for p in (ROOT / folder).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    photos = []
    for p in paths:
        with Image.open(p) as im:
            im.load()
            photos.append(im.copy())
    n = len(photos)
    base = _features(photos)
    t = int(DEFAULT_THRESHOLD)
    print(f"{n} images from {folder}; pHash threshold {t} bits, COLOR_MAX {COLOR_MAX}, FLAT_COLOR_MAX "
          f"{FLAT_COLOR_MAX} (near-uniform: lightness deviation < {FLAT_SPREAD}); "
          f"{int((base[2] < FLAT_SPREAD).sum())} of the photos are near-uniform")
    print(f"{'kind':22s} {'pHash med/p95/max':>18s} {'colour med/p95/max/min':>26s} {'pHash<=t':>9s} {'grouped':>8s}")
    for kind, make in VARIANTS.items():
        var = _features([make(im) for im in photos])
        codes = np.concatenate([base[0], var[0]])
        lab = np.concatenate([base[1], var[1]])
        spread = np.concatenate([base[2], var[2]])
        i, j = np.arange(n), np.arange(n) + n
        bits = np.bitwise_count(codes[i] ^ codes[j])
        dist = color_distance(lab, spread, i, j)
        flat = (spread[i] < FLAT_SPREAD) | (spread[j] < FLAT_SPREAD)
        grouped = (bits <= t) & (dist <= np.where(flat, FLAT_COLOR_MAX, COLOR_MAX))
        print(f"{kind:22s} {np.median(bits):6.0f}/{np.percentile(bits, 95):4.0f}/{bits.max():4d}   "
              f"{np.median(dist):6.1f}/{np.percentile(dist, 95):5.1f}/{dist.max():5.1f}/{dist.min():4.1f} "
              f"{int((bits <= t).sum()):5d}/{n} {int(grouped.sum()):4d}/{n}")
    pairs = [(int(np.bitwise_count(base[0][a] ^ base[0][b])), a, b) for a, b in itertools.combinations(range(n), 2)]
    bits, a, b = min(pairs)
    d = color_distance(base[1], base[2], np.array([a]), np.array([b]))[0]
    print(f"closest distinct photos: {paths[a].name} / {paths[b].name}: pHash {bits} bits, colour {d:.1f}")


if __name__ == "__main__":
    main(*sys.argv[1:])

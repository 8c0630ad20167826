"""The contact sheet of sample images (PIL): a deterministic sample read from local files."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from ..io import atomic_path

__all__ = ["sample_images", "contact_sheet"]

CELL = 160
LABEL = 28


def sample_images(images: pl.DataFrame, used: pl.Series, n: int) -> pl.DataFrame:
    """``n`` images used in the benchmark, chosen by content hash (sha256): stable across runs and row orders."""
    pool = images.filter(pl.col("image_id").is_in(used.implode())) if used.len() else images
    if not pool.height:
        pool = images
    return pool.sort("sha256", "image_id").head(n).sort("image_id")


def contact_sheet(sample: pl.DataFrame, image_root: str | Path, path: Path, scale_factor: float = 1.0) -> int:
    """Write a grid of thumbnails with their image_id; unreadable files become grey tiles. Returns tiles drawn."""
    from PIL import Image, ImageDraw, ImageFont

    from ..imaging import decode

    n = sample.height
    cell = int(CELL * max(scale_factor, 0.5))
    label = int(LABEL * max(scale_factor, 0.5))
    cols = max(1, min(8, math.ceil(math.sqrt(n)))) if n else 1
    rows = max(1, math.ceil(n / cols))
    sheet = Image.new("RGB", (cols * cell, rows * (cell + label)), "white")
    draw = ImageDraw.Draw(sheet)
    try:
        font = ImageFont.load_default(size=max(9, int(11 * scale_factor)))
    except TypeError:  # old Pillow
        font = ImageFont.load_default()
    ok = 0
    for i, image_id in enumerate(sample["image_id"].to_list()):
        x, y = (i % cols) * cell, (i // cols) * (cell + label)
        try:
            im = decode(Path(image_root) / image_id, draft_size=(cell, cell))
            im.thumbnail((cell - 6, cell - 6))
            sheet.paste(im, (x + (cell - im.width) // 2, y + (cell - im.height) // 2))
            ok += 1
        except Exception:  # missing or unreadable: grey tile, reported by the caller
            draw.rectangle([x + 3, y + 3, x + cell - 3, y + cell - 3], fill=(200, 200, 200))
            draw.text((x + 8, y + cell // 2), "unreadable", fill=(90, 90, 90), font=font)
        text = image_id if len(image_id) <= 26 else "..." + image_id[-23:]
        draw.text((x + 4, y + cell + 2), text, fill=(40, 40, 40), font=font)
    if n == 0:
        draw.text((10, 10), "no images", fill=(90, 90, 90), font=font)
    with atomic_path(path, suffix=".png") as tmp:
        sheet.save(tmp, format="PNG")
    return ok

"""Rebuild example/images/ from the original files (provenance of the bundled example corpus).

The photos come from three openly licensed sources that need no model hub or web access:

* the scikit-image 0.26.0 wheel (``skimage/data/``),
* the scikit-learn wheel (``sklearn/datasets/images/``),
* the Debian packages ``lomiri-wallpapers-16.04`` and ``lomiri-wallpapers-20.04`` (20.04.0-2).

Fetch them without installing anything::

    mkdir -p /tmp/example-src && cd /tmp/example-src
    pip download --no-deps -d wheels scikit-image==0.26.0 scikit-learn
    python -m zipfile -e wheels/scikit_image-*.whl skimg
    python -m zipfile -e wheels/scikit_learn-*.whl sklearn
    apt-get download lomiri-wallpapers-16.04 lomiri-wallpapers-20.04
    for d in *.deb; do dpkg -x "$d" deb; done

then run ``python example/make_images.py /tmp/example-src``. Every image is EXIF-transposed, converted
to RGB (or kept grayscale), downscaled so that its longest side is at most 512 px, and written as a
baseline JPEG (quality 85) with no metadata. Licenses and authors are in example/README.md and
example/rights_map.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image, ImageOps

MAX_SIDE = 512
QUALITY = 85

# (source folder relative to the download dir, source file, target path under example/images)
SOURCES: list[tuple[str, str, str]] = [
    # scikit-image: CC0 / public domain per the docstrings in skimage/data/_fetchers.py
    ("skimg/skimage/data", "astronaut.png", "skimage/astronaut.jpg"),
    ("skimg/skimage/data", "camera.png", "skimage/camera.jpg"),
    ("skimg/skimage/data", "chelsea.png", "skimage/chelsea_cat.jpg"),
    ("skimg/skimage/data", "coffee.png", "skimage/coffee.jpg"),
    ("skimg/skimage/data", "coins.png", "skimage/coins.jpg"),
    ("skimg/skimage/data", "hubble_deep_field.jpg", "skimage/hubble_deep_field.jpg"),
    ("skimg/skimage/data", "retina.jpg", "skimage/retina.jpg"),
    ("skimg/skimage/data", "rocket.jpg", "skimage/rocket.jpg"),
    ("skimg/skimage/data", "clock_motion.png", "skimage/clock_motion.jpg"),
    ("skimg/skimage/data", "ihc.png", "skimage/immunohistochemistry.jpg"),
    ("skimg/skimage/data", "cell.png", "skimage/cell.jpg"),
    ("skimg/skimage/data", "text.png", "skimage/text.jpg"),
    ("skimg/skimage/data", "brick.png", "skimage/brick.jpg"),
    ("skimg/skimage/data", "grass.png", "skimage/grass.jpg"),
    ("skimg/skimage/data", "gravel.png", "skimage/gravel.jpg"),
    # scikit-learn: CC-BY 2.0 (Flickr), per sklearn/datasets/images/README.txt
    ("sklearn/sklearn/datasets/images", "china.jpg", "sklearn/china.jpg"),
    ("sklearn/sklearn/datasets/images", "flower.jpg", "sklearn/flower.jpg"),
    # lomiri-wallpapers: per-file licenses in /usr/share/doc/lomiri-wallpapers-*/copyright
    ("deb/usr/share/backgrounds", "Bridge_by_Sander_Klootwijk.jpg", "lomiri/bridge_by_sander_klootwijk.jpg"),
    ("deb/usr/share/backgrounds", "Dragonfly_by_Bolly.jpg", "lomiri/dragonfly_by_bolly.jpg"),
    ("deb/usr/share/backgrounds", "Kleiber_by_Lukas_Baubkus.jpg", "lomiri/kleiber_by_lukas_baubkus.jpg"),
    ("deb/usr/share/backgrounds", "Picture_0B_by_freespace.jpg", "lomiri/fig_bowl_by_freespace.jpg"),
    ("deb/usr/share/backgrounds", "Picture_1A_by_freespace.jpg", "lomiri/paint_brushes_by_freespace.jpg"),
    ("deb/usr/share/backgrounds", "Wine_by_Jakkub_Mede.jpg", "lomiri/wine_by_jakub_mede.jpg"),
    ("deb/usr/share/backgrounds", "aitzgorri_by_Aitzol_Berasategi.jpg", "lomiri/aitzgorri_by_aitzol_berasategi.jpg"),
    ("deb/usr/share/backgrounds", "free_by_Peter_Nerlich.jpg", "lomiri/free_by_peter_nerlich.jpg"),
    ("deb/usr/share/backgrounds", "friends_by_Aitzol_Berasategi.jpg", "lomiri/friends_by_aitzol_berasategi.jpg"),
    ("deb/usr/share/backgrounds", "greentock_by_Peter_Nerlich.jpg", "lomiri/greentock_by_peter_nerlich.jpg"),
    ("deb/usr/share/backgrounds", "life_by_Aitzol_Berasategi.jpg", "lomiri/life_by_aitzol_berasategi.jpg"),
    ("deb/usr/share/backgrounds", "picosdeeuropa_by_Aitzol_Berasategi.jpg",
     "lomiri/picosdeeuropa_by_aitzol_berasategi.jpg"),
    ("deb/usr/share/backgrounds", "seeding_by_Clements_Engelhardt.jpg", "lomiri/seeding_by_clemens_engelhardt.jpg"),
    ("deb/usr/share/backgrounds", "sunset_by_Aitzol_Berasategi.jpg", "lomiri/sunset_by_aitzol_berasategi.jpg"),
]


def convert(src: Path, dst: Path) -> None:
    with Image.open(src) as im:
        im.draft("RGB", (MAX_SIDE, MAX_SIDE))  # JPEG: decode at a reduced scale (never below MAX_SIDE)
        im = ImageOps.exif_transpose(im)
        im = im.convert("L" if im.mode in ("1", "L", "I;16", "I") else "RGB")
        im.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
        dst.parent.mkdir(parents=True, exist_ok=True)
        im.save(dst, "JPEG", quality=QUALITY, optimize=True)


def main(download_dir: str) -> None:
    base = Path(download_dir)
    out = Path(__file__).resolve().parent / "images"
    total = 0
    for folder, name, target in SOURCES:
        dst = out / target
        convert(base / folder / name, dst)
        total += dst.stat().st_size
        print(f"{target}: {Image.open(dst).size} {dst.stat().st_size // 1024} KiB")
    print(f"{len(SOURCES)} images, {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/example-src")

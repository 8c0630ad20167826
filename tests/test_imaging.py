"""One image decoder for every stage, tested on real files of each awkward kind (made with Pillow):
16-bit greyscale PNG, palette PNG with a transparent key colour, CMYK JPEG (with and without an ICC
profile), EXIF-rotated JPEG, animated GIF, LA and RGBA PNGs."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageCms

from benchmaker.imaging import BACKGROUND, decode, export_bytes, flatten, needs_reencode

MAGENTA = (255, 0, 255)


def _save(im: Image.Image, path: Path, **kw) -> Path:
    im.save(path, **kw)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("awkward")
    out: dict[str, Path] = {}
    # 16-bit greyscale: a horizontal ramp 0..65535 (left dark, right bright)
    ramp = np.tile(np.linspace(0, 65535, 64).astype(np.uint16), (32, 1))
    out["grey16"] = _save(Image.fromarray(ramp), d / "grey16.png")
    # palette PNG whose index 0 (magenta) is fully transparent (tRNS), a red square in the middle
    p = Image.new("P", (32, 32), 0)
    p.putpalette([*MAGENTA, 255, 0, 0] + [0] * (254 * 3))
    p.paste(1, (8, 8, 24, 24))
    out["palette_trns"] = _save(p, d / "palette_trns.png", transparency=0)
    # CMYK JPEG: pure cyan, without and with an embedded ICC profile
    cmyk = Image.new("CMYK", (32, 32), (255, 0, 0, 0))
    out["cmyk"] = _save(cmyk, d / "cmyk.jpg", quality=95)
    # EXIF orientation 6 (rotate 90 CW to show): stored 40 wide x 20 high, shown 20 x 40; left half red
    rot = Image.new("RGB", (40, 20), (0, 0, 255))
    rot.paste((255, 0, 0), (0, 0, 20, 20))
    exif = Image.Exif()
    exif[0x0112] = 6
    out["exif6"] = _save(rot, d / "exif6.jpg", exif=exif.tobytes(), quality=95)
    # animated GIF: frame 0 green, frame 1 red
    f0, f1 = Image.new("RGB", (16, 16), (0, 255, 0)), Image.new("RGB", (16, 16), (255, 0, 0))
    out["animated"] = _save(f0, d / "animated.gif", save_all=True, append_images=[f1], duration=100, loop=0)
    # LA: grey 100 with the left half transparent; RGBA: blue with the top half transparent black
    la = Image.new("LA", (16, 16), (100, 255))
    la.paste((0, 0), (0, 0, 8, 16))
    out["la"] = _save(la, d / "la.png")
    rgba = Image.new("RGBA", (16, 16), (0, 0, 255, 255))
    rgba.paste((0, 0, 0, 0), (0, 0, 16, 8))
    out["rgba"] = _save(rgba, d / "rgba.png")
    out["plain"] = _save(Image.new("RGB", (16, 16), (10, 200, 30)), d / "plain.jpg", quality=95)
    return out


def test_16bit_grey_is_scaled_not_clipped(files):
    im = decode(files["grey16"])
    a = np.asarray(im)
    assert im.mode == "RGB" and a.shape == (32, 64, 3)
    row = a[0, :, 0].astype(int)
    assert row[0] == 0 and row[-1] == 255
    assert 100 < row[32] < 155                     # mid-grey in the middle, not pure white
    assert len(set(row.tolist())) > 50             # a ramp, not black and white
    assert np.all(np.diff(row) >= 0)
    # what convert("RGB") would have done (the bug): everything above 255 clipped to white
    naive = np.asarray(Image.open(files["grey16"]).convert("RGB"))[0, :, 0]
    assert len(set(naive.tolist())) <= 3


def test_palette_transparency_is_composited_on_white(files):
    a = np.asarray(decode(files["palette_trns"]))
    assert tuple(a[0, 0]) == BACKGROUND == (255, 255, 255)      # not the magenta key colour
    assert tuple(a[16, 16]) == (255, 0, 0)
    assert tuple(np.asarray(Image.open(files["palette_trns"]).convert("RGB"))[0, 0]) == MAGENTA


def test_la_and_rgba(files):
    la = np.asarray(decode(files["la"]))
    assert tuple(la[0, 0]) == (255, 255, 255) and tuple(la[0, 15]) == (100, 100, 100)
    rgba = np.asarray(decode(files["rgba"]))
    assert tuple(rgba[0, 0]) == (255, 255, 255) and tuple(rgba[15, 0]) == (0, 0, 255)


def test_cmyk_with_and_without_profile(files, tmp_path):
    a = np.asarray(decode(files["cmyk"])).astype(int)
    assert a[..., 0].mean() < 40 and a[..., 1].mean() > 200 and a[..., 2].mean() > 200   # cyan
    with Image.open(files["cmyk"]) as im:
        im.load()
        plain = flatten(im)
    assert plain.mode == "RGB" and plain.size == (32, 32)
    assert not needs_reencode(Image.open(files["cmyk"]))    # no profile: consumers get the same pixels


def test_exif_orientation_applied(files):
    im = decode(files["exif6"])
    assert im.size == (20, 40)                              # upright: 20 wide, 40 high
    a = np.asarray(im).astype(int)
    assert a[5, 10, 0] > 200 and a[35, 10, 2] > 200         # red on top after the 90 degree turn


def test_animated_uses_first_frame(files):
    a = np.asarray(decode(files["animated"]))
    assert tuple(a[0, 0]) == (0, 255, 0)
    with Image.open(files["animated"]) as im:
        im.seek(1)
        assert tuple(np.asarray(flatten(im))[0, 0]) == (0, 255, 0)   # even when positioned elsewhere


def test_draft_decoding_keeps_orientation(files):
    im = decode(files["exif6"], draft_size=(8, 8))
    assert im.height > im.width


@pytest.mark.parametrize("kind", ["grey16", "palette_trns", "la", "rgba", "animated"])
def test_export_stores_what_decode_produced(files, kind):
    data = files[kind].read_bytes()
    out = export_bytes(data)
    assert out != data
    with Image.open(io.BytesIO(out)) as stored:
        fmt = stored.format
        stored_rgb = np.asarray(stored.convert("RGB")).astype(int)   # what a consumer does
        assert getattr(stored, "n_frames", 1) == 1
    with Image.open(io.BytesIO(data)) as orig:
        assert fmt == orig.format                           # same format: mime_type stays true
    want = np.asarray(decode(files[kind])).astype(int)
    assert stored_rgb.shape == want.shape
    assert np.abs(stored_rgb - want).max() <= (8 if kind == "animated" else 0)


@pytest.mark.parametrize("kind", ["plain", "exif6", "cmyk"])
def test_export_keeps_original_bytes_when_consumers_see_the_same(files, kind):
    """datasets.Image applies EXIF orientation itself, and plain / profile-less CMYK convert identically."""
    from datasets import Image as DsImage

    data = files[kind].read_bytes()
    assert export_bytes(data) == data
    decoded = DsImage().decode_example({"bytes": data, "path": None}).convert("RGB")
    assert decoded.size == decode(files[kind]).size


def test_cmyk_with_icc_profile_is_reencoded_as_jpeg(files, tmp_path):
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    # Pillow bundles no CMYK profile; an sRGB profile on a CMYK image makes littleCMS refuse, so the
    # decoder must fall back to Pillow's conversion rather than fail
    cmyk = Image.new("CMYK", (16, 16), (255, 0, 0, 0))
    p = _save(cmyk, tmp_path / "cmyk_icc.jpg", icc_profile=srgb, quality=95)
    a = np.asarray(decode(p)).astype(int)
    assert a[..., 0].mean() < 40 and a[..., 2].mean() > 200
    out = export_bytes(p.read_bytes())
    with Image.open(io.BytesIO(out)) as stored:
        assert stored.format == "JPEG" and stored.mode == "RGB"


def test_api_inline_image_uses_the_decoder(files):
    from benchmaker.providers.spec import ImageRef, encode_image

    mime, b64 = encode_image(ImageRef(sha256="x", path=str(files["palette_trns"])), 64)
    assert mime == "image/jpeg"
    px = np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB")).astype(int)
    assert px[0, 0].min() > 240                               # white, not magenta


def test_clip_loader_and_phash_use_the_decoder(files):
    from benchmaker.preprocess.inspect import InspectSettings, inspect_file, pil_limits
    from benchmaker.similarity.embed import load_image

    a = np.asarray(load_image(str(files["grey16"]), None))
    assert len(set(a[0, :, 0].tolist())) > 50
    settings = InspectSettings(max_bytes=10**8, max_pixels=10**8)
    with pil_limits(settings.max_pixels):
        acc = inspect_file(str(files["grey16"]), "grey16.png", settings)
        flat = inspect_file(str(files["palette_trns"]), "p.png", settings)
    assert acc.phash and acc.phash != "0" * 16 and acc.phash != "f" * 16
    assert flat.phash


def test_export_reader_stores_decoded_pixels(files):
    import hashlib

    from benchmaker.export.parquet import _ImageReader

    p = files["grey16"]
    reader = _ImageReader(p.parent, {p.name: hashlib.sha256(p.read_bytes()).hexdigest()})
    iid, data = reader(p.name)
    assert iid == p.name and data == export_bytes(p.read_bytes()) != p.read_bytes()
    plain = files["plain"]
    assert _ImageReader(plain.parent, {})(plain.name)[1] == plain.read_bytes()


def test_accepted_huge_images_open_whatever_pils_default_limit(tmp_path, monkeypatch):
    """preprocess.max_pixels is the one pixel limit: an image it accepted (a 180 MP scan under
    max_pixels: 300000000) decodes and exports without PIL's default bomb error (above 179 MP) or its
    "could be decompression bomb DOS attack" warning (above 89 MP), which failed or cluttered every later
    stage; a limit set on purpose (preprocess's own during its run) still applies."""
    import warnings

    path = _save(Image.new("1", (15000, 12000), 1), tmp_path / "scan.png")   # 22 KB on disk, 22 MB as "1"
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1024 * 1024 * 1024 // 4 // 3)   # Pillow's default
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert decode(path, mode="1").size == (15000, 12000)
        assert export_bytes(path.read_bytes()) == path.read_bytes()
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)                        # set on purpose: kept
    with pytest.raises(Image.DecompressionBombError):
        decode(_save(Image.new("RGB", (32, 32)), tmp_path / "small.png"))


def test_pils_own_default_limit_is_the_one_lifted(tmp_path):
    """In a fresh process PIL's limit is whatever this Pillow sets, not a value a test patched in: the
    first decode lifts it (imaging's copy of Pillow's default still matches the installed Pillow)."""
    import subprocess
    import sys

    path = _save(Image.new("RGB", (8, 8)), tmp_path / "small.png")
    code = ("import sys; from PIL import Image; from benchmaker.imaging import decode; "
            "before = Image.MAX_IMAGE_PIXELS; decode(sys.argv[1]); print(before is not None, Image.MAX_IMAGE_PIXELS)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "None"]

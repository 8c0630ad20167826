"""Preprocess stage: scan, quarantine reasons, rights map, metadata, URLs, shards, determinism."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import support
from PIL import Image

from benchmaker.formats import read_table
from benchmaker.preprocess import RightsMap, RightsMapError, load_rights_map, run
from benchmaker.sharding import shard_of

GOOD_IN_TINY = 30  # support.make_corpus: 5 colours x 3 shapes x 2


def _run(tmp: Path, root: Path, n_shards: int = 3, **kw) -> dict:
    out = tmp / "out"
    settings = kw.pop("settings", {})
    res = run(
        images=str(out / "images.jsonl"), quarantine=str(out / "quarantine.jsonl"),
        shards=[str(out / "shards" / f"{i:05d}.jsonl") for i in range(n_shards)],
        image_root=str(root), settings=settings, n_shards=n_shards, columns=kw.pop("columns", {}), **kw,
    )
    res["out"] = out
    return res


def _quarantine(out: Path) -> dict[str, str]:
    q = read_table("quarantine", out / "quarantine.jsonl")
    return dict(zip(q["path"], q["reason"]))


@pytest.fixture()
def corpus(tmp_path, tiny_corpus) -> Path:
    return support.copy_tree(tiny_corpus, tmp_path / "images")


def test_tiny_corpus_outputs_and_shards(tmp_path, tiny_corpus):
    res = _run(tmp_path, tiny_corpus, n_shards=3, threads=2, settings={"workers": 2})
    out = res["out"]
    df = read_table("images", out / "images.jsonl")
    assert df.height == GOOD_IN_TINY == res["accepted"]
    assert df["image_id"].to_list() == sorted(df["image_id"].to_list())
    row = df.filter(pl.col("image_id") == "red/circle_0.jpg").row(0, named=True)
    with Image.open(tiny_corpus / "red/circle_0.jpg") as im:
        assert (row["width"], row["height"]) == im.size
    assert row["mime_type"] == "image/jpeg"
    assert row["file_size"] == (tiny_corpus / "red/circle_0.jpg").stat().st_size
    assert len(row["sha256"]) == 64 and len(row["phash"]) == 16
    assert set(df.filter(pl.col("image_id").str.ends_with(".png"))["mime_type"]) == {"image/png"}
    assert df["image_url"].null_count() == df.height  # no image_base_url
    # no rights map: dataset name from the first path component, no license
    assert set(df["original_dataset_name"]) == set(support.COLORS)
    assert df["license"].null_count() == df.height
    assert _quarantine(out) == {
        "broken/truncated.jpg": "truncated", "broken/not_an_image.jpg": "not_an_image", "broken/empty.png": "empty",
    }
    # shards partition images.jsonl exactly, each image in shard_of's shard
    seen = []
    for i in range(3):
        part = read_table("images", out / "shards" / f"{i:05d}.jsonl")
        assert all(shard_of(x, 3) == i for x in part["image_id"])
        # duplicate_group is decided over the whole corpus (merge_images): not in the shard manifests
        assert part.columns == [c for c in df.columns if c != "duplicate_group"]
        seen.append(part)
    union = pl.concat(seen).sort("image_id")
    assert union.equals(df.drop("duplicate_group"))
    assert df["duplicate_group"].to_list() == df["image_id"].to_list()  # no duplicates in this corpus


def test_empty_shards_are_empty_files(tmp_path):
    root = tmp_path / "one"
    root.mkdir()
    support.draw_image((200, 0, 0), "circle", 64, 0).save(root / "a.png")
    res = _run(tmp_path, root, n_shards=8)
    sizes = [(res["out"] / "shards" / f"{i:05d}.jsonl").stat().st_size for i in range(8)]
    assert sum(1 for s in sizes if s > 0) == 1 and res["shard_sizes"].count(0) == 7
    # root-level file: dataset name is the image_root folder name
    df = read_table("images", res["out"] / "images.jsonl")
    assert df["original_dataset_name"].to_list() == ["one"]


def test_deterministic(tmp_path, tiny_corpus):
    a = _run(tmp_path / "a", tiny_corpus, threads=2, settings={"workers": 2})["out"]
    b = _run(tmp_path / "b", tiny_corpus, threads=1)["out"]
    for name in ["images.jsonl", "quarantine.jsonl", "shards/00000.jsonl", "shards/00002.jsonl"]:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_rights_map_precedence(tmp_path, tiny_corpus):
    rm = tmp_path / "rights.json"
    rm.write_text(json.dumps({
        "_comment": "comments are allowed",
        "default": {"license": "CC0-1.0", "doi": "10.0/default", "dataset_name": "UNKNOWN"},
        "prefixes": [
            {"prefix": "red/", "license": "CC-BY-4.0", "doi": "10.0/red", "dataset_name": "reds"},
            {"prefix": "red/circle", "license": "CC-BY-SA-4.0"},
            {"prefix": "green/", "dataset_name": "greens"},
        ],
        "files": {
            "red/circle_0.jpg": {"license": "MIT"},
            "blue/square_1.png": {"doi": "10.0/file", "dataset_name": "one-blue"},
            "nowhere/missing.jpg": {"license": "x"},
        },
    }))
    out = _run(tmp_path, tiny_corpus, rights_map=str(rm))["out"]
    df = read_table("images", out / "images.jsonl")
    got = {r["image_id"]: (r["license"], r["doi"], r["original_dataset_name"]) for r in df.iter_rows(named=True)}
    # exact file > longest prefix > default, per key
    rmap = load_rights_map(rm)
    for image_id, expected in [
        # file license; the longest prefix (red/circle) sets no doi or name -> default (never a shorter prefix)
        ("red/circle_0.jpg", ("MIT", "10.0/default", "red")),
        ("red/circle_1.png", ("CC-BY-SA-4.0", "10.0/default", "red")),
        ("red/square_0.jpg", ("CC-BY-4.0", "10.0/red", "reds")),
        ("green/stripes_1.png", ("CC0-1.0", "10.0/default", "greens")),
        ("blue/square_1.png", ("CC0-1.0", "10.0/file", "one-blue")),
        ("blue/square_0.jpg", ("CC0-1.0", "10.0/default", "blue")),  # UNKNOWN -> first path component
    ]:
        assert got[image_id] == expected, image_id
        r = rmap.resolve(image_id, "images")
        assert (r["license"], r["doi"], r["dataset_name"]) == expected, image_id  # scalar == vectorised
    assert rmap.unmatched_files(df["image_id"]) == ["nowhere/missing.jpg"]


def test_rights_map_longest_prefix_wins_regardless_of_order():
    rmap = RightsMap.from_dict({"prefixes": [
        {"prefix": "a/", "license": "short"}, {"prefix": "a/b/c/", "license": "longest"},
        {"prefix": "a/b/", "license": "mid"},
    ]})
    df = rmap.apply(pl.DataFrame({"image_id": ["a/b/c/x.jpg", "a/b/x.jpg", "a/x.jpg", "z.jpg"]}), "root")
    assert df["license"].to_list() == ["longest", "mid", "short", None]
    assert df["original_dataset_name"].to_list() == ["a", "a", "a", "root"]


@pytest.mark.parametrize("bad, needle", [
    ({"defaults": {}}, "'defaults'"),
    ({"default": {"licence": "x"}}, "'licence'"),
    ({"prefixes": [{"license": "x"}]}, "prefixes[0]: key 'prefix'"),
    ({"prefixes": [{"prefix": "a/", "license": 3}]}, "prefixes[0]: key 'license' must be a string"),
    ({"prefixes": {"a/": {}}}, "'prefixes' must be a list"),
    ({"files": {"a.jpg": {"author": "me"}}}, "files['a.jpg']: unknown key 'author'"),
    ({"files": {"/abs/a.jpg": {}}}, "must be an image_id"),
    ({"prefixes": [{"prefix": "a/"}, {"prefix": "a/"}]}, "listed twice"),
    ([], "top level must be a JSON object"),
])
def test_rights_map_validation(tmp_path, bad, needle):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(RightsMapError) as exc:
        load_rights_map(p)
    assert needle in str(exc.value) and str(p) in str(exc.value)


def test_bad_rights_map_fails_before_writing(tmp_path, tiny_corpus):
    p = tmp_path / "r.json"
    p.write_text("{not json")
    with pytest.raises(RightsMapError, match="not valid JSON"):
        _run(tmp_path, tiny_corpus, rights_map=str(p))
    assert not (tmp_path / "out" / "images.jsonl").exists()


def test_metadata_merge_unmatched_and_protected(tmp_path, tiny_corpus, caplog):
    meta = tmp_path / "metadata.jsonl"
    rows = [
        {"image_id": "red/circle_0.jpg", "camera": "cam1", "site": {"lat": 1.5}, "sha256": "evil", "width": -1},
        {"image_id": "blue/stripes_1.png", "camera": "cam2", "license": "stolen", "tags": ["x"]},
        {"image_id": "ghost/a.jpg", "camera": "cam3"},
        {"image_id": "broken/truncated.jpg", "camera": "cam4"},
        {"image_id": "blue/stripes_1.png", "camera": "cam2b"},
    ]
    meta.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with caplog.at_level("WARNING"):
        res = _run(tmp_path, tiny_corpus, metadata=str(meta))
    df = read_table("images", res["out"] / "images.jsonl")
    assert "camera" in df.columns and "site" in df.columns
    by_id = {r["image_id"]: r for r in df.iter_rows(named=True)}
    assert by_id["red/circle_0.jpg"]["camera"] == "cam1"
    assert by_id["red/circle_0.jpg"]["site"] == {"lat": 1.5}
    assert by_id["blue/stripes_1.png"]["camera"] == "cam2b"  # duplicate id: last row wins
    assert by_id["green/circle_0.jpg"]["camera"] is None
    assert len(by_id["red/circle_0.jpg"]["sha256"]) == 64 and by_id["red/circle_0.jpg"]["width"] > 0
    assert by_id["blue/stripes_1.png"]["license"] is None
    assert "tags" not in df.columns
    m = res["metadata"]
    assert m["matched"] == 2 and m["unmatched"] == 2
    assert set(m["ignored_columns"]) == {"sha256", "width", "license", "tags"}
    text = caplog.text
    assert "2 row(s) name an image_id that is not among the accepted images" in text
    assert "broken/truncated.jpg" in text and "ghost/a.jpg" in text
    assert "sha256" in text and "computed by preprocess or reserved" in text


def test_metadata_requires_image_id(tmp_path, tiny_corpus):
    meta = tmp_path / "m.jsonl"
    meta.write_text(json.dumps({"id": "x", "a": 1}) + "\n")
    with pytest.raises(ValueError, match="needs an 'image_id'"):
        _run(tmp_path, tiny_corpus, metadata=str(meta))


def test_image_base_url_quoted(tmp_path):
    root = tmp_path / "imgs"
    (root / "sub dir").mkdir(parents=True)
    support.draw_image((0, 0, 200), "square", 64, 1).save(root / "sub dir" / "ä #1.png")
    out = _run(tmp_path, root, n_shards=1, settings={"image_base_url": "https://example.org/data/"})["out"]
    df = read_table("images", out / "images.jsonl")
    assert df["image_id"].to_list() == ["sub dir/ä #1.png"]
    assert df["image_url"].to_list() == ["https://example.org/data/sub%20dir/%C3%A4%20%231.png"]


def test_configured_column_names_on_disk(tmp_path, tiny_corpus):
    cols = {"image_id": "id", "license": "licence", "original_dataset_name": "source", "mime_type": "mime"}
    meta = tmp_path / "m.jsonl"
    meta.write_text(json.dumps({"id": "red/circle_0.jpg", "note": "hi", "source": "nope"}) + "\n")
    res = _run(tmp_path, tiny_corpus, n_shards=2, columns=cols, metadata=str(meta))
    out = res["out"]
    first = json.loads((out / "images.jsonl").read_text().splitlines()[0])
    assert {"id", "licence", "source", "mime", "note"} <= set(first)
    assert not {"image_id", "license", "original_dataset_name", "mime_type"} & set(first)
    assert "source" in res["metadata"]["ignored_columns"]
    df = read_table("images", out / "images.jsonl", columns=cols)
    assert df.height == GOOD_IN_TINY and "image_id" in df.columns
    shard0 = json.loads(next(line for i in range(2)
                             for line in (out / "shards" / f"{i:05d}.jsonl").read_text().splitlines()))
    assert "id" in shard0


def _jpeg_bytes(size=(64, 48)) -> bytes:
    buf = io.BytesIO()
    support.draw_image((10, 200, 10), "stripes", size[0], 3).resize(size).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def test_every_quarantine_reason(tmp_path, corpus):
    bad = corpus / "more"
    bad.mkdir()
    (bad / "big_file.jpg").write_bytes(_jpeg_bytes() + b"\0" * 25_000)  # valid JPEG + trailing bytes, over max_bytes
    Image.new("RGB", (300, 300), (1, 2, 3)).save(bad / "bomb.png")  # 90,000 px > max_pixels
    Image.new("RGB", (220, 220), (1, 2, 3)).save(bad / "bomb_warn.png")  # between max and 2*max: PIL only warns
    png = (corpus / "red/circle_1.png").read_bytes()
    (bad / "cut.png").write_bytes(png[: len(png) // 2])
    outside = corpus.parent / "outside.jpg"
    outside.write_bytes(_jpeg_bytes())
    os.symlink(outside, bad / "escape.jpg")
    os.symlink(corpus.parent, bad / "escape_dir")
    os.symlink(corpus / "red" / "circle_0.jpg", bad / "inside_link.jpg")
    os.symlink(corpus / "nope.jpg", bad / "dangling.jpg")
    os.symlink(corpus, bad / "loop")  # a directory link back to the root: scanned once
    (bad / "notes.txt").write_text("not scanned")  # unsupported extension: ignored, not quarantined
    (bad / "UPPER.JPG").write_bytes(_jpeg_bytes())  # extensions are case-insensitive
    (corpus / ".hidden").mkdir()
    (corpus / ".hidden" / "x.jpg").write_bytes(_jpeg_bytes())
    (bad / "._apple.jpg").write_bytes(b"\0\5\26\7 AppleDouble junk")
    (bad / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    before = sorted(p.name for p in corpus.rglob("*"))

    res = _run(tmp_path, corpus, settings={"max_bytes": 20_000, "max_pixels": 40_000})
    out = res["out"]
    q = _quarantine(out)
    assert q["broken/truncated.jpg"] == "truncated"
    assert q["more/cut.png"] == "truncated"
    assert q["broken/not_an_image.jpg"] == "not_an_image"
    assert q["broken/empty.png"] == "empty"
    assert q["more/big_file.jpg"] == "too_large"
    assert q["more/bomb.png"] == "decompression_bomb"
    assert q["more/bomb_warn.png"] == "decompression_bomb"
    assert q["more/escape.jpg"] == "symlink_escape"
    assert q["more/escape_dir"] == "symlink_escape"
    assert q["more/dangling.jpg"] == "broken_symlink"
    assert set(res["quarantine_by_reason"]) == {
        "truncated", "not_an_image", "empty", "too_large", "decompression_bomb", "symlink_escape", "broken_symlink",
    }
    ids = set(read_table("images", out / "images.jsonl")["image_id"])
    assert "more/inside_link.jpg" in ids and "more/UPPER.JPG" in ids
    assert not any(i.startswith("more/loop/") for i in ids)
    assert not any("hidden" in i or "._" in i or "DS_Store" in i or i.endswith(".txt") for i in ids)
    assert not any("hidden" in p or "._" in p or "notes" in p for p in q)
    assert len(ids) == GOOD_IN_TINY + 2
    # nothing under the root was deleted or added
    assert sorted(p.name for p in corpus.rglob("*")) == before
    assert (bad / "._apple.jpg").exists() and (bad / ".DS_Store").exists()


def test_no_follow_symlinks_and_hidden_not_skipped(tmp_path, corpus):
    os.symlink(corpus / "red" / "circle_0.jpg", corpus / "link.jpg")
    os.symlink(corpus / "red", corpus / "red_link")
    (corpus / "._junk.jpg").write_bytes(b"\0\5\26\7 AppleDouble")
    res = _run(tmp_path, corpus, settings={"follow_symlinks": False, "skip_hidden": False})
    q = _quarantine(res["out"])
    assert q["link.jpg"] == "symlink" and q["red_link"] == "symlink"
    assert q["._junk.jpg"] == "not_an_image"  # scanned when skip_hidden is false, and still not deleted
    assert (corpus / "._junk.jpg").exists()


def test_verify_decode_false_accepts_truncated_without_phash(tmp_path, tiny_corpus):
    res = _run(tmp_path, tiny_corpus, settings={"verify_decode": False})
    df = read_table("images", res["out"] / "images.jsonl")
    row = df.filter(pl.col("image_id") == "broken/truncated.jpg").row(0, named=True)
    assert row["phash"] is None and row["width"] > 0
    assert df.filter(pl.col("image_id") != "broken/truncated.jpg")["phash"].null_count() == 0
    assert _quarantine(res["out"]) == {"broken/not_an_image.jpg": "not_an_image", "broken/empty.png": "empty"}


def test_extensions_setting_and_exif_orientation(tmp_path):
    root = tmp_path / "imgs"
    root.mkdir()
    im = support.draw_image((200, 0, 0), "square", 80, 5).resize((80, 40))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90: displayed as 40 x 80
    im.save(root / "rot.jpg", exif=exif)
    im.save(root / "plain.webp")
    im.save(root / "skip.bmp")
    res = _run(tmp_path, root, n_shards=1, settings={"extensions": [".JPG", ".webp"]})
    df = read_table("images", res["out"] / "images.jsonl")
    assert df["image_id"].to_list() == ["plain.webp", "rot.jpg"]
    assert df["mime_type"].to_list() == ["image/webp", "image/jpeg"]
    assert df.select("width", "height").rows() == [(80, 40), (40, 80)]


def test_results_inside_image_root_are_not_scanned(tmp_path):
    root = tmp_path / "imgs"
    root.mkdir()
    support.draw_image((0, 0, 200), "circle", 64, 2).save(root / "a.png")
    out = root / "results"
    out.mkdir()
    support.draw_image((0, 200, 0), "circle", 64, 3).save(out / "chart.png")
    run(images=str(out / "images.jsonl"), quarantine=str(out / "q.jsonl"), shards=[str(out / "s.jsonl")],
        image_root=str(root), settings={}, n_shards=1, columns={})
    assert read_table("images", out / "images.jsonl")["image_id"].to_list() == ["a.png"]


def test_no_usable_images_is_an_error(tmp_path):
    root = tmp_path / "imgs"
    root.mkdir()
    (root / "x.jpg").write_text("text")
    with pytest.raises(ValueError, match="no usable image"):
        _run(tmp_path, root, n_shards=1)


def test_shard_count_mismatch(tmp_path, tiny_corpus):
    with pytest.raises(ValueError, match="n_shards"):
        run(images=str(tmp_path / "i.jsonl"), quarantine=str(tmp_path / "q.jsonl"), shards=[str(tmp_path / "s")],
            image_root=str(tiny_corpus), settings={}, n_shards=2, columns={})


def test_example_corpus_and_rights_map():
    root = support.ROOT / "example" / "images"
    rmap = load_rights_map(support.ROOT / "example" / "rights_map.json")
    ids = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.jpg"))
    assert 20 <= len(ids) <= 40
    assert sorted(rmap.files) == ids  # every photo has its own entry (credit line)
    df = rmap.apply(pl.DataFrame({"image_id": ids}), "images")
    assert df["license"].null_count() == 0 and df["original_dataset_name"].null_count() == 0
    assert set(df["original_dataset_name"]) == {"scikit-image", "scikit-learn", "lomiri-wallpapers"}
    readme = (support.ROOT / "example" / "README.md").read_text()
    assert all(i in readme for i in ids)
    assert sum(p.stat().st_size for p in root.rglob("*")) < 3_000_000
    for i in ids:
        with Image.open(root / i) as im:
            assert max(im.size) <= 512


def test_phash_follows_exif_orientation_and_odd_modes(tmp_path):
    root = tmp_path / "imgs"
    root.mkdir()
    base = support.draw_image((200, 30, 30), "stripes", 400, 7).resize((400, 300))
    exif = Image.Exif()
    exif[0x0112] = 6
    base.save(root / "tagged.jpg", quality=95, exif=exif)
    base.transpose(Image.Transpose.ROTATE_270).save(root / "upright.jpg", quality=95)
    base.convert("P", palette=Image.Palette.ADAPTIVE).save(root / "palette.gif")
    base.convert("RGBA").save(root / "rgba.png")
    base.convert("CMYK").save(root / "cmyk.jpg")
    base.convert("I;16").save(root / "gray16.png")
    base.save(root / "plain.tiff")
    res = _run(tmp_path, root, n_shards=1)
    df = read_table("images", res["out"] / "images.jsonl")
    assert res["quarantined"] == 0 and df.height == 7 and df["phash"].null_count() == 0
    ph = dict(zip(df["image_id"], df["phash"]))

    def dist(a: str, b: str) -> int:
        return bin(int(ph[a], 16) ^ int(ph[b], 16)).count("1")

    assert dist("tagged.jpg", "upright.jpg") <= 8  # same picture once the EXIF rotation is applied (JPEG noise)
    assert dist("tagged.jpg", "plain.tiff") >= 20  # the unrotated picture hashes differently
    assert dist("plain.tiff", "rgba.png") <= 4
    # the colour signature (the groups' second signal) is taken from the same upright copy: the tagged
    # picture and the upright one agree, the unrotated one (stripes across, colour cells moved) does not
    from benchmaker.preprocess.duplicates import color_distance, signatures

    assert df["color_signature"].null_count() == 0
    lab, spread, _ = signatures(df["color_signature"])
    pos = {i: n for n, i in enumerate(df["image_id"])}

    def colour(a: str, b: str) -> float:
        return float(color_distance(lab, spread, np.array([pos[a]]), np.array([pos[b]]))[0])

    assert colour("tagged.jpg", "upright.jpg") < colour("tagged.jpg", "plain.tiff")
    assert colour("plain.tiff", "rgba.png") <= 1.0
    mimes = dict(zip(df["image_id"], df["mime_type"]))
    assert mimes["palette.gif"] == "image/gif" and mimes["plain.tiff"] == "image/tiff"


class _Named(list):
    """A stand-in for Snakemake's Namedlist: positional values plus named attributes."""

    def __init__(self, **named):
        super().__init__(named.values())
        self._names = {k: (i, None) for i, k in enumerate(named)}
        for k, v in named.items():
            setattr(self, k, v)


class _FakeSnakemake:
    def __init__(self, tmp: Path, root: Path, log: Path, rights_map: str | None = None, n_shards: int = 2):
        out = tmp / "out"
        inputs = {"rights_map": rights_map} if rights_map else {}
        self.input = _Named(**inputs)
        self.output = _Named(images=str(out / "images.jsonl"), quarantine=str(out / "quarantine.jsonl"),
                             shards=[str(out / "shards" / f"{i:05d}.jsonl") for i in range(n_shards)])
        self.params = _Named(image_root=str(root), settings={"workers": 2}, n_shards=n_shards, columns={},
                             version="test")
        self.log = [str(log)]
        self.threads = 2
        self.rule = "preprocess"
        self.wildcards = _Named()


def test_stage_log_gets_progress_and_summary(tmp_path, corpus, capfd):
    """Through the Snakemake bridge the log file (and the terminal) get done/total, rate and the result."""
    import re

    from benchmaker.runner import run_stage

    log = tmp_path / "logs" / "preprocess.log"
    res = run_stage(_FakeSnakemake(tmp_path, corpus, log), "benchmaker.preprocess:run")
    text = log.read_text()
    n = res["accepted"] + res["quarantined"]
    assert "rule preprocess" in text and "finished in" in text
    assert re.search(rf"preprocess: 100%.*\b{n}/{n} \[.*img/s\]", text), text
    assert f"accepted {res['accepted']} image(s); quarantined {res['quarantined']}" in text
    err = capfd.readouterr().err
    assert re.search(rf"\b{n}/{n} img done in .*img/s", err)  # one progress line on the terminal


def test_failing_stage_writes_its_traceback_to_the_log(tmp_path, corpus):
    from benchmaker.runner import run_stage

    bad = tmp_path / "rights.json"
    bad.write_text(json.dumps({"default": {"licence": "CC0-1.0"}}))
    log = tmp_path / "logs" / "preprocess.log"
    with pytest.raises(RightsMapError):
        run_stage(_FakeSnakemake(tmp_path, corpus, log, rights_map=str(bad)), "benchmaker.preprocess:run")
    text = log.read_text()
    assert "stage failed after" in text and "Traceback (most recent call last)" in text
    assert "RightsMapError" in text and "unknown key 'licence'" in text and "did you mean 'license'" in text
    assert not (tmp_path / "out" / "images.jsonl").exists()


def _snapshot(root: Path) -> dict[str, tuple]:
    import hashlib

    snap = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        data = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else None
        snap[p.relative_to(root).as_posix()] = (data, st.st_mtime_ns, st.st_mode, st.st_size)
    return snap


def test_user_files_are_never_modified_and_nothing_prompts(tmp_path, corpus, monkeypatch):
    """Bytes, modification times and permissions of every file under the root (bad ones included)
    are unchanged, nothing is added or removed, and the stage never reads from the terminal."""
    def no_prompt(*a, **k):
        raise AssertionError("preprocess prompted for input")

    monkeypatch.setattr("builtins.input", no_prompt)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    (corpus / "more").mkdir()
    (corpus / "more" / "readonly.jpg").write_bytes(_jpeg_bytes())
    os.chmod(corpus / "more" / "readonly.jpg", 0o444)
    (corpus / "more" / "zero.jpg").write_bytes(b"")
    os.symlink(corpus / "nope.jpg", corpus / "more" / "dangling.jpg")
    meta = tmp_path / "metadata.jsonl"
    meta.write_text(json.dumps({"image_id": "red/circle_0.jpg", "camera": "A"}) + "\n")
    rights = tmp_path / "rights.json"
    rights.write_text(json.dumps({"default": {"license": "CC0-1.0"}}))
    before = _snapshot(corpus)
    inputs_before = (meta.read_bytes(), rights.read_bytes(), meta.stat().st_mtime_ns, rights.stat().st_mtime_ns)
    res = _run(tmp_path, corpus, metadata=str(meta), rights_map=str(rights))
    assert res["quarantined"] >= 4  # the corpus' broken files, zero.jpg and the dangling link
    assert _snapshot(corpus) == before
    assert (meta.read_bytes(), rights.read_bytes(), meta.stat().st_mtime_ns, rights.stat().st_mtime_ns) == inputs_before


def test_non_utf8_file_name_is_quarantined_not_fatal(tmp_path):
    root = tmp_path / "imgs"
    root.mkdir()
    support.draw_image((0, 200, 0), "circle", 64, 0).save(root / "good.png")
    raw = os.path.join(os.fsencode(root), b"bad\xff-name.png")
    with open(raw, "wb") as fh:
        fh.write((root / "good.png").read_bytes())
    res = _run(tmp_path, root, n_shards=1)
    assert read_table("images", res["out"] / "images.jsonl")["image_id"].to_list() == ["good.png"]
    q = read_table("quarantine", res["out"] / "quarantine.jsonl")
    assert q["reason"].to_list() == ["invalid_filename"]
    assert q["path"][0].startswith("bad") and q["path"][0].endswith("-name.png")
    json.dumps(q.to_dicts())  # the quarantine row itself is valid UTF-8 JSON

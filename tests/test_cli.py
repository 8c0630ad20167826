"""The benchmaker command: validate-config, check-urls, install-profiles."""

from __future__ import annotations

import functools
import http.server
import json
import threading
from pathlib import Path

import polars as pl
import pytest
import support

from benchmaker.cli import main
from benchmaker.formats import write_table

ROOT = Path(__file__).resolve().parents[1]


def test_validate_config_ok_and_error(tmp_path, capsys):
    assert main(["validate-config", str(ROOT / "config" / "config.yaml")]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "config" / "config.yaml").read_text().replace("n_shards:", "n_shardz:"))
    assert main(["validate-config", str(bad)]) == 1
    assert "n_shardz" in capsys.readouterr().err


@pytest.fixture()
def image_server(tiny_corpus):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tiny_corpus))

    class Quiet(handler.func):  # type: ignore[name-defined]
        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(tiny_corpus)))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_check_urls_reports_dead_links(tmp_path, tiny_corpus, tiny_clip, image_server, capsys):
    cfg = support.tiny_config(tmp_path, tiny_corpus, tiny_clip)
    path = support.write_config(tmp_path / "config.yaml", cfg)
    res = Path(cfg["paths"]["results"]) / "tiny"
    ids = ["red/circle_0.jpg", "blue/square_1.png", "missing/nope.jpg", "odd/listing.jpg"]
    urls = [f"{image_server}/{i}" for i in ids[:3]] + [f"{image_server}/red/"]  # an HTML page, not an image
    df = pl.DataFrame({
        "image_id": ids, "image_url": urls,
        "mime_type": ["image/jpeg"] * 4, "width": [1] * 4, "height": [1] * 4, "file_size": [1] * 4,
        "sha256": ["x"] * 4, "phash": [None] * 4, "license": [None] * 4, "doi": [None] * 4,
        "original_dataset_name": ["d"] * 4,
    })
    write_table(df, "images", res / "images.jsonl")
    out = tmp_path / "failed.jsonl"
    assert main(["check-urls", str(path), "--out", str(out), "--timeout", "5"]) == 1
    text = capsys.readouterr().out
    assert "4 image URLs checked: 2 ok, 2 failed" in text
    failed = {json.loads(line)["image_id"]: json.loads(line) for line in out.read_text().splitlines()}
    assert failed["missing/nope.jpg"]["status"] == 404
    assert "not an image" in failed["odd/listing.jpg"]["detail"]


def test_install_profiles_command(tmp_path, capsys):
    assert main(["install-profiles", "--dest", str(tmp_path)]) == 0
    assert (tmp_path / "slurm").is_symlink() and (tmp_path / "nrp").is_symlink()
    assert main(["install-profiles", "--dest", str(tmp_path)]) == 0  # idempotent

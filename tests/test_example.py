"""The bundled example: its config runs as-is (dry run from the repository root) and end to end offline."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import support
import yaml

from benchmaker.config import deep_merge, load_config
from benchmaker.formats import read_table

ROOT = Path(__file__).resolve().parents[1]


def test_example_dry_run_from_repo_root():
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-F", "-c2", "--workflow-profile", "none"],
                       cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PATH": support.no_slurm_path()})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout + r.stderr
    for rule in ("preprocess", "vision", "plan", "judge", "embed_queries", "score", "summary", "export"):
        assert f"rule {rule}:" in out or f"{rule} " in out
    # similarity.share_vision_job: each shard's vision job writes the image embeddings (one CLIP load)
    assert "rule embed_images:" not in out and "embeddings/images/00000.parquet" in out


def test_example_rights_map_covers_every_photo():
    rights = json.loads((ROOT / "example" / "rights_map.json").read_text())
    photos = [p.relative_to(ROOT / "example" / "images").as_posix()
              for p in (ROOT / "example" / "images").rglob("*") if p.is_file()]
    assert len(photos) >= 20
    for pid in photos:
        entry = rights["files"].get(pid, {})
        prefix = [p for p in rights.get("prefixes", []) if pid.startswith(p["prefix"])]
        lic = entry.get("license") or (prefix and prefix[0].get("license")) or rights["default"].get("license")
        assert lic, f"{pid} has no license"


@pytest.mark.slow
def test_example_end_to_end_offline(tmp_path, tiny_clip, numba_cache):
    """The example config with only the CLIP weights swapped for a local random checkpoint, plus the
    retrieval systems of `make example-offline` (config/offline.yaml), so the report shows a leaderboard."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    offline = yaml.safe_load((ROOT / "config" / "offline.yaml").read_text())["evaluate"]
    offline["systems"] = [{**s, "model": f"local-dir:{tiny_clip}"} if s["kind"] == "clip" else s
                          for s in offline["systems"]]
    cfg = deep_merge(cfg, {
        "evaluate": offline,
        "paths": {"image_root": str(ROOT / "example" / "images"), "results": str(tmp_path / "results"),
                  "rights_map": str(ROOT / "example" / "rights_map.json")},
        "vision": {"clip": {"model": f"local-dir:{tiny_clip}", "pretrained": None}},
        "similarity": {"model": f"local-dir:{tiny_clip}", "pretrained": None, "num_workers": 0},
    })
    path = support.write_config(tmp_path / "config.yaml", cfg)
    r = support.snakemake(["-c2"], tmp_path, path, timeout=1500, env={"NUMBA_CACHE_DIR": str(numba_cache)})
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    full = load_config(path)
    res = tmp_path / "results" / full["benchmark"]["name"]
    images = read_table("images", res / "images.jsonl", columns=full["columns"])
    assert images.height == len([p for p in (ROOT / "example" / "images").rglob("*.jpg")])
    assert images["license"].null_count() == 0
    qrels = read_table("qrels_with_score", res / "qrels_with_score.jsonl", columns=full["columns"])
    assert qrels["query_id"].n_unique() >= full["plan"]["num_seeds"] // 2
    card = (res / "hf_dataset" / "README.md").read_text()
    assert full["benchmark"]["name"] in card or full["benchmark"]["title"] in card
    # the leaderboard of the offline example's systems, in the report and the card
    board = pl.read_csv(res / "evaluate" / "leaderboard.csv")
    assert set(board["system"]) == {s["name"] for s in offline["systems"]}
    assert set(board["scope"]) == {"pool", "corpus", "condensed", "exported"}  # exported: what mteb computes
    assert "Retrieval leaderboard" in (res / "summary" / "report.html").read_text()
    # the clip system has the similarity stage's model: it ranked that stage's embeddings, loaded nothing
    timing = json.loads((res / "evaluate" / "runs" / "tiny-clip.json").read_text())["timing"]
    assert timing["embeddings"] == "similarity stage" and timing["images_per_s"] is None, timing
    assert not re.search(r"model load \d+ in this job", (res / "logs" / "evaluate" / "tiny-clip.log").read_text())
    assert "## Leaderboard" in card
    # how far to trust it (docs/trust.md): the block opens the card and the report; power from the two
    # systems' per-query differences, the tiny CLIP named as the vision annotator's own family, what
    # labelling the audit sample would buy
    trust = json.loads((res / "evaluate" / "trust.json").read_text())
    assert trust["power"]["status"] == "ok" and trust["power"]["rows"][0]["pairs_compared"] == 1
    assert trust["circularity"]["circular"] == ["tiny-clip"]
    assert card.index("## How far to trust this benchmark") < card.index("## Load it")
    assert "share the vision annotator's family" in card or "shares the vision annotator's family" in card
    assert "not audited yet: labelling the" in card and "human-corrected" in card
    report = (res / "summary" / "report.md").read_text()
    assert report.index("## How far to trust this benchmark") < report.index("## Key numbers")
    published = json.loads((res / "hf_dataset" / "evaluate" / "trust.json").read_text())
    assert published["power"] == trust["power"]  # model paths in circularity: in their public form

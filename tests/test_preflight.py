"""validate-config and the workflow's parse-time checks: files merged like `--configfile A B`,
paths that exist, API key variables, YAML errors with file and line."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config
from support import tiny_config, write_config

from benchmaker.cli import main
from benchmaker.config import ConfigError
from benchmaker.preflight import env_problems, merge_config_files, path_problems, read_config_file, snakemake_update

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("base,over", [
    ({"a": {"b": 1, "c": [1, 2]}, "d": 1}, {"a": {"c": [3]}, "e": {"f": None}}),
    ({"a": [1, 2]}, {"a": {"x": 1}}),                 # a mapping replaces a list
    ({"a": {"x": 1}}, {"a": [1]}),                    # a list replaces a mapping
    ({"a": {"x": {"y": 1, "z": 2}}}, {"a": {"x": {"z": 3}}}),
    ({"a": 1}, {"a": {}}),                            # an empty mapping over a scalar
    ({"a": {"x": 1}}, {"a": {}}),                     # an empty mapping does not clear
    ({"a": {"x": 1}}, {"a": None}),
])
def test_merge_is_snakemakes(base, over):
    ours = snakemake_update(copy.deepcopy(base), copy.deepcopy(over))
    theirs = copy.deepcopy(base)
    update_config(theirs, copy.deepcopy(over))
    assert ours == theirs


def test_validate_config_merges_several_files(tmp_path, tiny_corpus, tiny_clip, capsys):
    base = write_config(tmp_path / "base.yaml", tiny_config(tmp_path, tiny_corpus, tiny_clip))
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("benchmark:\n  name: overlaid\nplan:\n  num_seeds: 2\n")
    assert main(["validate-config", str(base), str(overlay)]) == 0
    assert "benchmark overlaid" in capsys.readouterr().out
    merged = merge_config_files([base, overlay])
    assert merged["plan"]["num_seeds"] == 2 and merged["plan"]["pos_total"] == 1   # deep, not replaced
    assert merged["benchmark"]["description"] == "tiny test benchmark"
    # the README's combination checks too
    assert main(["validate-config", str(ROOT / "config" / "config.yaml"), "--no-env"]) == 0


def test_yaml_syntax_error_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("benchmark:\n  name: x\npaths:\n  image_root: [unclosed\n  results: r\n")
    with pytest.raises(ConfigError) as e:
        read_config_file(bad)
    assert f"{bad}:" in str(e.value) and "not valid YAML" in str(e.value)
    assert main(["validate-config", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:5:" in err or f"{bad}:4:" in err
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        read_config_file(tmp_path / "list.yaml")


def test_paths_are_checked(tmp_path, tiny_corpus, tiny_clip, capsys):
    cfg = tiny_config(tmp_path, tiny_corpus, tiny_clip)
    cfg["paths"]["image_root"] = str(tmp_path / "missing")
    cfg["paths"]["seeds_file"] = str(tmp_path)          # a folder where a file is expected
    cfg["paths"]["metadata_jsonl"] = "rel/meta.jsonl"
    cfg["paths"]["pools_file"] = str(tmp_path / "no_pools.jsonl")
    cfg["paths"]["judge_reuse_file"] = str(tmp_path / "no_qrels.jsonl")
    path = write_config(tmp_path / "c.yaml", cfg)
    assert main(["validate-config", str(path)]) == 1
    err = capsys.readouterr().err
    assert "paths.pools_file: file" in err and "paths.judge_reuse_file: file" in err
    assert "paths.image_root: folder" in err and "does not exist" in err
    assert "paths.seeds_file:" in err and "is a folder, not a file" in err
    assert "paths.metadata_jsonl: file 'rel/meta.jsonl'" in err
    assert main(["validate-config", "--no-paths", str(path)]) == 0
    cfg = tiny_config(tmp_path, tiny_corpus, tiny_clip, similarity={"model": f"local-dir:{tmp_path}/nope"})
    probs = path_problems(cfg)
    assert len(probs) == 1 and probs[0].startswith("similarity.model: folder") and "benchmaker.tinyclip" in probs[0]


def test_milvus_lite_database_is_a_file_or_a_folder(tmp_path, tiny_corpus, tiny_clip):
    """evaluate.systems[].db_file (x-path: any): Milvus Lite 2 writes a file, Milvus Lite 3 a folder;
    both validate, a missing one is named."""
    pytest.importorskip("milvus_lite")
    import polars as pl
    from pymilvus import MilvusClient

    from benchmaker.evaluate.milvus import index_embeddings

    db = tmp_path / "vdb.db"
    client = MilvusClient(str(db))  # what `benchmaker.evaluate.milvus.index_embeddings` users make
    try:
        index_embeddings(client, "c", pl.DataFrame({"image_id": ["a.jpg"], "embedding": [[0.1, 0.2]]}))
    finally:
        client.close()
    (tmp_path / "lite2.db").write_bytes(b"")
    system = {"name": "vdb", "kind": "milvus", "collection": "c", "model": "ViT-B-32"}
    for found in (db, tmp_path / "lite2.db"):
        cfg = tiny_config(tmp_path, tiny_corpus, tiny_clip, evaluate={"systems": [{**system, "db_file": str(found)}]})
        path = write_config(tmp_path / "c.yaml", cfg)
        assert main(["validate-config", str(path)]) == 0, found
    cfg = tiny_config(tmp_path, tiny_corpus, tiny_clip,
                      evaluate={"systems": [{**system, "db_file": str(tmp_path / "none.db")}]})
    assert [p.split(" '")[0] for p in path_problems(cfg)] == ["evaluate.systems[0].db_file: file or folder"]


def test_unreadable_path(tmp_path, tiny_corpus, tiny_clip):
    import os

    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    f = tmp_path / "rights.json"
    f.write_text("{}")
    f.chmod(0)
    cfg = tiny_config(tmp_path, tiny_corpus, tiny_clip)
    cfg["paths"]["rights_map"] = str(f)
    assert any("not readable" in p for p in path_problems(cfg))


def test_api_key_variables_are_checked(tmp_path, tiny_corpus, tiny_clip, capsys, monkeypatch):
    cfg = tiny_config(tmp_path, tiny_corpus, tiny_clip, vision={"adapter": "gemini"},
                      judge={"adapter": "openai", "openai": {"api_key_env": "MY_KEY"}})
    assert env_problems(cfg, {}) == [
        "vision.gemini.api_key_env: environment variable GEMINI_API_KEY or GOOGLE_API_KEY is not set; `export "
        "GEMINI_API_KEY=...` before running (the key itself never goes in the config), or set "
        "vision.gemini.api_key_env to the variable that holds it",
        "judge.openai.api_key_env: environment variable MY_KEY is not set; `export MY_KEY=...` before running "
        "(the key itself never goes in the config), or set judge.openai.api_key_env to the variable that holds it",
    ]
    assert env_problems(cfg, {"GOOGLE_API_KEY": "k", "MY_KEY": "k"}) == []
    path = write_config(tmp_path / "c.yaml", cfg)
    for k in ("MY_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(k, raising=False)
    assert main(["validate-config", str(path)]) == 1
    assert "MY_KEY" in capsys.readouterr().err
    assert main(["validate-config", "--no-env", str(path)]) == 0
    monkeypatch.setenv("MY_KEY", "secret-value")
    monkeypatch.setenv("GEMINI_API_KEY", "secret-value")
    assert main(["validate-config", str(path)]) == 0
    out = capsys.readouterr()
    assert "secret-value" not in out.out + out.err


def test_example_configs_validate():
    assert yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert main(["validate-config", "--no-env", str(ROOT / "config" / "config.yaml")]) == 0

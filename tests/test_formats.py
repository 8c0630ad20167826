"""File-format contracts: validation on read, configured column names on disk, atomic writes."""

from __future__ import annotations

import json
import os
import stat

import polars as pl
import pytest

from benchmaker.formats import FacetModel, FormatError, empty_table, read_table, write_table
from benchmaker.io import atomic_path, iter_jsonl, write_jsonl
from benchmaker.losses import Losses, merge_losses, read_losses
from benchmaker.sharding import shard_names, shard_of
from benchmaker.table_blocks import iter_table_blocks

FM = FacetModel(taxonomy={"color": ["red", "blue", "unknown"]}, boolean=["bright"], vocabulary=["a", "b"])


def qrels_rows():
    return pl.DataFrame({
        "query_id": ["q1", "q1"], "query_text": ["red things", "red things"], "image_id": ["a.jpg", "b.jpg"],
        "relevance_label": [1, 0], "pool": ["seed", "hard"], "is_seed": [True, False],
        "seed_not_relevant": [False, False], "judge": ["rules", "rules"],
    })


def test_configured_names_on_disk_and_canonical_in_memory(tmp_path):
    cols = {"query_id": "qid", "query_text": "query", "relevance_label": "relevant"}
    p = tmp_path / "qrels.jsonl"
    write_table(qrels_rows(), "qrels", p, columns=cols)
    first = json.loads(p.read_text().splitlines()[0])
    assert {"qid", "query", "relevant"} <= set(first) and "query_id" not in first
    back = read_table("qrels", p, columns=cols)
    assert back["query_id"].to_list() == ["q1", "q1"]
    with pytest.raises(FormatError, match="missing column"):
        read_table("qrels", p)  # read without the mapping: the contract is violated


def test_duplicate_keys_rejected(tmp_path):
    df = pl.concat([qrels_rows(), qrels_rows().head(1)])
    with pytest.raises(FormatError, match="duplicate key"):
        write_table(df, "qrels", tmp_path / "x.jsonl")


def test_nulls_and_types_rejected_with_row(tmp_path):
    p = tmp_path / "q.jsonl"
    rows = qrels_rows().to_dicts()
    rows[1]["relevance_label"] = "high"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(FormatError, match="relevance_label"):
        read_table("qrels", p)
    rows[1]["relevance_label"] = None
    p.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(FormatError, match="null in 1 row"):
        read_table("qrels", p)


def test_annotation_facet_values_checked(tmp_path):
    df = pl.DataFrame({
        "image_id": ["a"], "summary": ["s"], "tags": [["a"]], "annotator": ["x"],
        "confidence": [{"color": 0.9, "bright": 0.5}], "color": ["green"], "bright": [True],
    })
    with pytest.raises(FormatError, match="facet 'color' has value 'green'"):
        write_table(df, "annotations", tmp_path / "a.jsonl", facets=FM)
    ok = df.with_columns(pl.lit("red").alias("color"))
    write_table(ok, "annotations", tmp_path / "a.jsonl", facets=FM)
    assert read_table("annotations", tmp_path / "a.jsonl", facets=FM)["color"][0] == "red"


def test_empty_file_reads_as_empty_table(tmp_path):
    p = tmp_path / "e.jsonl"
    write_table(empty_table("qrels"), "qrels", p)
    assert p.read_text() == ""
    assert read_table("qrels", p).height == 0


def test_invalid_json_is_a_format_error(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"query_id": "q1",\n')
    with pytest.raises(FormatError):
        read_table("qrels", p)


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    p = tmp_path / "out.jsonl"
    write_jsonl(p, [{"a": 1}])
    with pytest.raises(RuntimeError):
        with atomic_path(p) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("boom")
    assert list(iter_jsonl(p)) == [{"a": 1}]
    assert [f.name for f in tmp_path.iterdir()] == ["out.jsonl"]


def test_sharding_is_stable_and_balanced():
    ids = [f"dir{i % 7}/img_{i}.jpg" for i in range(20000)]
    shards = [shard_of(i, 16) for i in ids]
    assert shard_of("dir0/img_0.jpg", 16) == shards[0]
    # fixed expectation: the hash must never change between versions/machines
    assert shard_of("a/b.jpg", 1000) == int.from_bytes(
        __import__("hashlib").blake2b(b"a/b.jpg", digest_size=8).digest(), "big") % 1000
    counts = [shards.count(k) for k in range(16)]
    assert min(counts) > 0.8 * 20000 / 16 and max(counts) < 1.2 * 20000 / 16
    assert shard_names(3) == ["00000", "00001", "00002"]


def test_losses_roundtrip_and_merge(tmp_path):
    a = Losses("vision")
    a.add("image", "x.jpg", "invalid_json", "expected ...", attempts=3)
    b = Losses("vision")
    b.add("pair", "y.jpg", "image_decode_error", query_id="q1")
    a.write(tmp_path / "a.jsonl")
    b.write(tmp_path / "b.jsonl")
    Losses("vision").write(tmp_path / "c.jsonl")
    merge_losses([tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"], tmp_path / "m.jsonl")
    m = read_losses(tmp_path / "m.jsonl")
    assert m.height == 2 and set(m["reason"]) == {"invalid_json", "image_decode_error"}
    with pytest.raises(ValueError):
        a.add("file", "z", "r")


def test_outputs_get_the_umask_mode_not_mkstemp_0600(tmp_path):
    old = os.umask(0o022)
    try:
        p = tmp_path / "out.jsonl"
        write_jsonl(p, [{"a": 1}])
        assert stat.S_IMODE(p.stat().st_mode) == 0o644
    finally:
        os.umask(old)


def test_read_table_where_reads_blocks_and_keeps_only_the_asked_rows(tmp_path):
    """The export's bounded read: the rows of the asked ids, in file order, whatever the block size
    (blocks end on whole lines; a column that is null in one block and typed in another still reads)."""
    from benchmaker.formats import read_table
    from benchmaker.table_blocks import read_table_where

    n = 40
    df = pl.DataFrame({
        "image_id": [f"d/img {k:03d}.jpg" for k in range(n)], "image_url": [None] * n,
        "mime_type": ["image/jpeg"] * n, "width": list(range(1, n + 1)), "height": [5] * n,
        "file_size": [100] * n, "sha256": [f"{k:064x}" for k in range(n)], "phash": [None] * n,
        "license": ["CC0-1.0"] * n, "doi": [None] * (n - 1) + ["10.1/x"], "original_dataset_name": ["t"] * n,
    }, schema_overrides={"image_url": pl.String, "phash": pl.String})
    path = tmp_path / "images.jsonl"
    cols = {"image_id": "file"}
    write_table(df, "images", path, columns=cols)
    want = [f"d/img {k:03d}.jpg" for k in (39, 3, 17, 0)] + ["not there"]
    whole = read_table("images", path, columns=cols).filter(pl.col("image_id").is_in(want))
    for block in (1, 97, 1000, 1 << 20):
        got = read_table_where("images", path, key="image_id", values=want, columns=cols, block_bytes=block)
        assert got.equals(whole), block
    none = read_table_where("images", path, key="image_id", values=["x"], columns=cols, block_bytes=200)
    assert none.height == 0 and set(whole.columns) <= set(none.columns)
    path.write_text(path.read_text().replace('"width":7,', '"width":"seven",'))
    with pytest.raises(FormatError, match="width"):
        read_table_where("images", path, key="image_id", values=["d/img 006.jpg"], columns=cols)


def test_line_blocks_skip_whitespace_only_blocks(tmp_path):
    """Blocks are whole lines; a block holding only whitespace (blank lines at the end) is not yielded,
    and each block's byte offset is kept (its line number is counted for an error message)."""
    from benchmaker.table_blocks import _line_blocks, _lines_before

    p = tmp_path / "t.jsonl"
    p.write_bytes(b'{"a": 1}\n{"a": 2}\n\n  \n\t\n{"a": 3}\n\n \n')
    assert list(_line_blocks(p, 4)) == [(0, b'{"a": 1}\n'), (9, b'{"a": 2}\n'), (24, b'{"a": 3}\n')]
    assert [_lines_before(p, o) for o in (0, 9, 24)] == [0, 1, 5]
    assert list(_line_blocks(p, 1 << 20)) == [(0, p.read_bytes())]
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert list(_line_blocks(tmp_path / "empty.jsonl", 4)) == []


def test_block_parse_error_names_the_line(tmp_path):
    """A line that is not JSON, in a later block: the error names the file and the line its block starts after."""
    p = tmp_path / "q.jsonl"
    rows = [json.dumps({"stage": "s", "item_type": "image", "item_id": str(k), "reason": "r", "detail": None,
                        "attempts": 1}) for k in range(40)]
    rows[30] = rows[30][:-3]
    p.write_text("\n".join(rows) + "\n")
    with pytest.raises(FormatError, match=r"q\.jsonl: not valid JSON lines .* \(in the block after line 30\)"):
        list(iter_table_blocks("losses", p, block_bytes=1))

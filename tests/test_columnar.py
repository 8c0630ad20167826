"""The planner's columnar copies of annotations.jsonl and images.jsonl (benchmaker.columnar): written by
the merges with the same bytes as from the finished JSONL, the same plans as the JSONL path, and never
used when they do not belong to the JSONL next to them (missing, stale, foreign, malformed): the planner
then reads the JSONL, after one log line saying why."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

import polars as pl
import pytest

from benchmaker import columnar
from benchmaker.columnar import read_copy, write_copy_of_jsonl
from benchmaker.formats import FacetModel, FormatError, write_table
from benchmaker.merge import merge_annotations
from benchmaker.plan import run

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("planner_bench", ROOT / "benchmarks" / "planner.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BENCH = _bench()
FM = FacetModel.from_config(BENCH.FACETS)
SETTINGS = {**BENCH.SETTINGS, "num_seeds": 40}


def _plan(d: Path, a: Path, i: Path, name: str, columns=None, **copies) -> bytes:
    out = d / f"{name}.jsonl"
    run(annotations=str(a), images=str(i), plan=str(out), losses=str(d / f"{name}.losses.jsonl"),
        settings=SETTINGS, facets=BENCH.FACETS, benchmark_name="col", columns=columns or {}, **copies)
    return out.read_bytes()


def _copies(d: Path, a: Path, i: Path, columns=None) -> dict[str, str]:
    paths = {"annotations_columns": str(d / "annotations.columns.parquet"),
             "images_columns": str(d / "images.columns.parquet")}
    write_copy_of_jsonl("annotations", a, paths["annotations_columns"], facets=FM, columns=columns)
    write_copy_of_jsonl("images", i, paths["images_columns"], columns=columns)
    return paths


@pytest.mark.parametrize("row_group", [7, columnar.ROW_GROUP])
def test_merge_writes_the_copy_of_the_merged_file(tmp_path, monkeypatch, row_group):
    """merge_annotations assembles the copy from its spilled parts: the bytes of the copy made from the
    merged file, whatever the parts' order and sizes; two merges write the same bytes."""
    monkeypatch.setattr(columnar, "ROW_GROUP", row_group)
    monkeypatch.setattr("benchmaker.merge.ROW_GROUP", row_group)
    BENCH.generate(200, tmp_path)
    columns = {"image_id": "file", "tags": "keywords"}
    ann = pl.read_ndjson(tmp_path / "annotations.jsonl").sample(fraction=1.0, shuffle=True, seed=3)
    parts = []
    for k, (a, b) in enumerate(((0, 90), (90, 91), (91, 91), (91, 200))):  # one part empty, one of one row
        p = tmp_path / f"part{k}.jsonl"
        write_table(ann.slice(a, b - a), "annotations", p, columns=columns, facets=FM)
        parts.append(str(p))
    copies = []
    for run_no in range(2):
        out, copy = tmp_path / f"m{run_no}.jsonl", tmp_path / f"m{run_no}.parquet"
        merge_annotations(parts=parts[::-1] if run_no else parts, loss_parts=[], annotations=str(out),
                          losses=str(tmp_path / "l.jsonl"), facets=BENCH.FACETS, columns=columns,
                          annotations_columns=str(copy))
        write_copy_of_jsonl("annotations", out, tmp_path / "whole.parquet", facets=FM, columns=columns)
        assert copy.read_bytes() == (tmp_path / "whole.parquet").read_bytes()
        copies.append(copy.read_bytes())
        df = read_copy(copy, kind="annotations", source=out, facets=FM, columns=columns)
        assert df is not None and df.height == 200 and df["image_id"].is_sorted()
    assert copies[0] == copies[1]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".m0")]  # spill folder removed


def test_merge_of_empty_parts_writes_an_empty_copy(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text("")
    merge_annotations(parts=[str(p)], loss_parts=[], annotations=str(tmp_path / "m.jsonl"),
                      losses=str(tmp_path / "l.jsonl"), facets=BENCH.FACETS, columns={},
                      annotations_columns=str(tmp_path / "m.parquet"))
    df = read_copy(tmp_path / "m.parquet", kind="annotations", source=tmp_path / "m.jsonl", facets=FM)
    assert df is not None and df.height == 0


def test_merge_images_writes_the_copy(tmp_path):
    from benchmaker.preprocess import merge

    _, i = BENCH.generate(60, tmp_path)
    img = pl.read_ndjson(i)
    parts = []
    for k in range(2):
        p = tmp_path / f"img{k}.jsonl"
        write_table(img.gather_every(2, offset=k), "images", p, columns={})
        parts.append(str(p))
    q = tmp_path / "q.jsonl"
    q.write_text("")
    out, copy = tmp_path / "images_merged.jsonl", tmp_path / "images.columns.parquet"
    merge(parts=parts, quarantine_parts=[str(q)], images=str(out), quarantine=str(tmp_path / "quar.jsonl"),
          columns={}, images_columns=str(copy))
    write_copy_of_jsonl("images", out, tmp_path / "whole.parquet")
    assert copy.read_bytes() == (tmp_path / "whole.parquet").read_bytes()
    df = read_copy(copy, kind="images", source=out)
    assert df is not None and df.columns == ["image_id", "sha256", "phash", "duplicate_group"]


def test_copies_plan_the_same_bytes_as_the_jsonl(tmp_path, caplog):
    a, i = BENCH.generate(1500, tmp_path)
    columns = {"tags": "keywords"}
    ann = pl.read_ndjson(a).rename({"tags": "keywords"})
    write_table(ann.rename({"keywords": "tags"}), "annotations", a, columns=columns, facets=FM)
    copies = _copies(tmp_path, a, i, columns)
    with caplog.at_level(logging.INFO, logger="benchmaker"):
        via_copy = _plan(tmp_path, a, i, "copy", columns, **copies)
    assert "annotations (columnar copy" in caplog.text and "images (columnar copy" in caplog.text
    assert via_copy == _plan(tmp_path, a, i, "jsonl", columns)


def _edit_rows(path: Path) -> None:
    """A user's edit of annotations.jsonl after the merge: some images' facet value changed."""
    lines = path.read_text().splitlines()
    vals = BENCH.TAXONOMY["plume_stage"]
    for k in range(0, len(lines), 30):
        row = json.loads(lines[k])
        row["plume_stage"] = vals[(vals.index(row["plume_stage"]) + 1) % len(vals)]
        lines[k] = json.dumps(row, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n")


def _same_length_edit(path: Path) -> None:
    """An edit that keeps the byte size: only the digest tells."""
    b = bytearray(path.read_bytes())
    at = b.index(b'"tag_0')
    b[at + 6] = ord("1") if b[at + 6] != ord("1") else ord("2")
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("stale", ["edited", "same_size_edit", "missing", "replaced_by_other_file",
                                   "not_parquet", "column_names_changed", "taxonomy_changed"])
def test_a_copy_that_does_not_belong_is_not_used(tmp_path, caplog, stale):
    a, i = BENCH.generate(1500, tmp_path)
    copies = _copies(tmp_path, a, i)
    columns, facets, why = {}, BENCH.FACETS, "made from a different annotations.jsonl"
    before = _plan(tmp_path, a, i, "before", **copies)  # what the copy, if used, would plan
    if stale == "edited":
        _edit_rows(a)
    elif stale == "same_size_edit":
        size = a.stat().st_size
        _same_length_edit(a)
        assert a.stat().st_size == size
    elif stale == "missing":
        Path(copies["annotations_columns"]).unlink()
        why = "it does not exist"
    elif stale == "replaced_by_other_file":  # another run's copy (images.jsonl's) put in its place
        Path(copies["annotations_columns"]).write_bytes(Path(copies["images_columns"]).read_bytes())
        why = "of kind 'images'"
    elif stale == "not_parquet":
        Path(copies["annotations_columns"]).write_text("not parquet")
        why = "not a columnar copy"
    elif stale == "column_names_changed":  # the config now names the tags column otherwise
        columns = {"tags": "keywords"}
        why = "written for the column names"
    elif stale == "taxonomy_changed":  # the config's taxonomy no longer allows a value the copy holds
        tax = {**BENCH.TAXONOMY, "viewpoint": [v for v in BENCH.TAXONOMY["viewpoint"] if v != "other"]}
        facets = {**BENCH.FACETS, "taxonomy": tax}
        why = "facet 'viewpoint' outside the taxonomy"
    fm = FacetModel.from_config(facets)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="benchmaker.columnar"):
        assert read_copy(copies["annotations_columns"], kind="annotations", source=a, facets=fm,
                         columns=columns) is None
    lines = [r.getMessage() for r in caplog.records if r.name == "benchmaker.columnar"]
    assert len(lines) == 1 and why in lines[0] and "reading the JSONL" in lines[0], lines
    if stale == "taxonomy_changed":  # the JSONL path then raises the reader's error
        with pytest.raises(FormatError, match="viewpoint"):
            run(annotations=str(a), images=str(i), plan=str(tmp_path / "p.jsonl"), losses=str(tmp_path / "l.jsonl"),
                settings=SETTINGS, facets=facets, benchmark_name="col", columns=columns, **copies)
        return
    # the plan falls back to the JSONL: the same bytes as planning from the JSONL alone
    after = _plan(tmp_path, a, i, "stale", columns, **copies)
    assert after == _plan(tmp_path, a, i, "jsonl", columns)
    if stale == "edited":  # and the edit changed the plan: the stale copy would have planned the old one
        assert after != before


def test_without_the_jsonl_the_copy_is_not_used_and_the_read_fails_as_before(tmp_path):
    a, i = BENCH.generate(100, tmp_path)
    copies = _copies(tmp_path, a, i)
    a.unlink()
    assert read_copy(copies["annotations_columns"], kind="annotations", source=a, facets=FM) is None
    with pytest.raises(FormatError, match="file not found"):
        _plan(tmp_path, a, i, "gone", **copies)

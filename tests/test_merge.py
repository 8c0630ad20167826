"""merge_annotations streams shard parts (one in memory at a time) and writes exactly the bytes of the
whole-table definition: the parts concatenated (vertical_relaxed), sorted by image_id, write_table."""

from __future__ import annotations

import polars as pl
import pytest

from benchmaker.formats import FacetModel, FormatError, write_table
from benchmaker.losses import Losses
from benchmaker.merge import merge_annotations

FACETS = {"taxonomy": {"color": ["red", "blue"]}, "boolean": ["bright"],
          "tags": {"min": 0, "max": 10, "vocabulary": []}}
FM = FacetModel.from_config(FACETS)
COLUMNS = {"image_id": "file"}


def frame(ids, *, conf_int=False, note=None):
    n = len(ids)
    conf = [{"color": 1 if conf_int else 0.5 + k / 100, "bright": 1 if conf_int else 0.25} for k in range(n)]
    return pl.DataFrame({
        "image_id": ids, "summary": [f"päinting {i}\nline two" for i in ids], "tags": [["a", "b"]] * n,
        "confidence": conf, "annotator": ["t"] * n, "color": ["red", "blue"] * (n // 2) + ["red"] * (n % 2),
        "bright": [k % 2 == 0 for k in range(n)], "note": [note] * n,
        "width_cm": [10 if conf_int else 10.5] * n,   # an extra column: Int64 in one part, Float64 in others
    })


def whole_table(parts, out, columns):
    from benchmaker.formats import read_table

    frames = [read_table("annotations", p, columns=columns, facets=FM) for p in parts]
    df = pl.concat([f for f in frames if f.height], how="vertical_relaxed").sort("image_id")
    write_table(df, "annotations", out, columns=columns, facets=FM)


@pytest.mark.parametrize("columns", [{}, COLUMNS])
def test_streaming_merge_equals_the_whole_table_definition(tmp_path, columns):
    ids = ["z/ü.jpg", "a b.jpg", "m.png", "é.jpg", "B.jpg", "a.jpg", "ß/1.jpg", "0.jpg", "Z.jpg", "ab.jpg"]
    groups = [ids[0:4], ids[4:7], [], ids[7:]]
    parts = []
    for k, g in enumerate(groups):
        p = tmp_path / f"part{k}.jsonl"
        # parts whose dtypes differ: integer confidences in one, a null-only column beside strings
        df = frame(g, conf_int=(k == 1), note=("n" if k == 3 else None)) if g else frame([]).head(0)
        write_table(df.sample(fraction=1.0, shuffle=True, seed=k), "annotations", p, columns=columns, facets=FM)
        parts.append(str(p))
    lp = tmp_path / "l.jsonl"
    Losses("vision").write(lp)
    merge_annotations(parts=parts, loss_parts=[str(lp)], annotations=str(tmp_path / "merged.jsonl"),
                      losses=str(tmp_path / "losses.jsonl"), facets=FACETS, columns=columns)
    whole_table(parts, tmp_path / "whole.jsonl", columns)
    merged = (tmp_path / "merged.jsonl").read_bytes()
    assert merged == (tmp_path / "whole.jsonl").read_bytes()
    assert merged.count(b"\n") == len(ids)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".merged")]  # spill folder removed


def test_image_in_two_parts_is_an_error(tmp_path):
    parts = []
    for k, g in enumerate((["a.jpg", "b.jpg"], ["b.jpg", "c.jpg"])):
        p = tmp_path / f"p{k}.jsonl"
        write_table(frame(g), "annotations", p, columns={}, facets=FM)
        parts.append(str(p))
    with pytest.raises(FormatError, match="b.jpg"):
        merge_annotations(parts=parts, loss_parts=[], annotations=str(tmp_path / "m.jsonl"),
                          losses=str(tmp_path / "l.jsonl"), facets=FACETS, columns={})
    assert not (tmp_path / "m.jsonl").exists()


def test_all_parts_empty(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text("")
    merge_annotations(parts=[str(p), str(p)], loss_parts=[], annotations=str(tmp_path / "m.jsonl"),
                      losses=str(tmp_path / "l.jsonl"), facets=FACETS, columns={})
    assert (tmp_path / "m.jsonl").read_text() == ""

"""The planner reads only the columns its index needs (table_blocks.iter_table_columns): the same frame as
reading and validating the whole table, and the same error where the general way would raise."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import polars as pl
import pytest

from benchmaker.formats import FacetModel, FormatError
from benchmaker.plan import read_plan_inputs
from benchmaker.table_blocks import iter_table_blocks

ROOT = Path(__file__).resolve().parents[1]


def _gen(n: int, out: Path):
    spec = importlib.util.spec_from_file_location("planner_bench", ROOT / "benchmarks" / "planner.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a, i = mod.generate(n, out)
    return mod, a, i


def _general(kind, path, keep, fm=None):
    return pl.concat([b.select(keep) for b in iter_table_blocks(kind, path, columns={}, facets=fm)])


def _ann(ann):
    """The planner reads tags as lists of Categorical; the same strings as the general reader's."""
    assert ann.schema["tags"] == pl.List(pl.Categorical)
    return ann.with_columns(pl.col("tags").cast(pl.List(pl.String)))


def test_same_columns_as_the_general_reader(tmp_path):
    mod, a, i = _gen(300, tmp_path)
    fm = FacetModel.from_config(mod.FACETS)
    ann, images = read_plan_inputs(str(a), str(i), fm, {})
    keep = ["image_id", "tags", *fm.names]
    assert _ann(ann).equals(_general("annotations", a, keep, fm))
    assert images.equals(_general("images", i, ["image_id", "sha256", "phash"]))


def _rewrite(path: Path, row: int, change) -> None:
    lines = path.read_text().splitlines()
    obj = json.loads(lines[row])
    change(obj)
    lines[row] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("change", [
    lambda o: o.update(viewpoint={"x": 1}),        # an object where a facet value belongs
    lambda o: o.update(image_id=["a"]),            # an array where an id belongs
    lambda o: o.update(tags="smoke"),              # a string where a list belongs
    lambda o: o.update(tags=None),                 # null tags
    lambda o: o.update(tags=["smoke", {"x": 1}]),  # an object among the tags (the general way: its text)
    lambda o: o.update(flame_visible="yes"),       # not a boolean
    lambda o: o.update(lighting="noon"),           # outside the taxonomy
    lambda o: o.pop("image_id"),                   # a missing id
])
def test_bad_annotations_raise_the_general_error(tmp_path, change):
    mod, a, i = _gen(50, tmp_path)
    fm = FacetModel.from_config(mod.FACETS)
    _rewrite(a, 7, change)
    keep = ["image_id", "tags", *fm.names]
    try:
        expected = _general("annotations", a, keep, fm)
    except FormatError as exc:
        with pytest.raises(FormatError) as planner:
            read_plan_inputs(str(a), str(i), fm, {})
        assert str(planner.value) == str(exc)
    else:  # what the general way accepts (an array as an id: its text), the planner reads the same way
        assert _ann(read_plan_inputs(str(a), str(i), fm, {})[0]).equals(expected)


def test_missing_column_of_images_is_reported(tmp_path):
    mod, a, i = _gen(50, tmp_path)
    fm = FacetModel.from_config(mod.FACETS)
    rows = [json.loads(x) for x in i.read_text().splitlines()]
    i.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "phash"}) + "\n" for r in rows))
    with pytest.raises(FormatError, match="missing column"):
        read_plan_inputs(str(a), str(i), fm, {})

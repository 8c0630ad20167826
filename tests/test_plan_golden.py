"""The planner's output, byte for byte, on synthetic collections (benchmarks/planner.py's generator).

The digests below are of query_plan.jsonl as planned before the planner's speed work (issue 23):
a faster planner must make the same plans. If you change what the planner picks *on purpose*,
regenerate them (``python tests/test_plan_golden.py``) and say so in the commit.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import pytest

from benchmaker.columnar import read_copy, write_copy_of_jsonl
from benchmaker.formats import FacetModel, write_table
from benchmaker.losses import Losses
from benchmaker.plan import plan_frames, read_plan_inputs

ROOT = Path(__file__).resolve().parents[1]

# (N images, Q queries, sample cap, settings overrides) -> sha256 of query_plan.jsonl
CASES = {
    "n3000-q150-cap256": (3000, 150, 256, {}),
    "n8000-q200-cap128": (8000, 200, 128, {}),  # windows, inverted index and per-facet neutral search
    "n3000-q150-default-cap": (3000, 150, None, {}),
    "n2000-q80-no-core": (2000, 80, 128, {"core_facets": [], "off_facets": [], "diversity_facets": []}),
    "n2000-q60-3-seeds": (2000, 60, 128, {"seeds_per_query": 3, "max_image_reuse": 1}),
}
DIGESTS = {
    "n2000-q60-3-seeds": "d113b2acb50f3a1a918966fbbd306ae158c0987cf4b7b655cacdc463869d6f52",
    "n2000-q80-no-core": "2c5cc07d04458c5bfe7d9daa9eda1c4fb70a855272c89fbf67da554f4d08aaa1",
    "n3000-q150-cap256": "bf6b80294e892ad0c7083344a8cee29c46edd31acd6cf0438d8f1e47caabd59b",
    "n3000-q150-default-cap": "45fee153aac0569acd0429e5d268a502abb5d09888d0aef37ed31272573b1b74",
    "n8000-q200-cap128": "0588a009a077cf2f948e29402e671299e0b77dd9d686fc7ef866c61e2e42bde5",
}


def _bench():
    spec = importlib.util.spec_from_file_location("planner_bench", ROOT / "benchmarks" / "planner.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def plan_digest(case: str, work: Path, compiled: bool = False, copies: bool = False) -> str:
    """``copies``: read the planner's columnar copies of the two files (benchmaker.columnar) instead."""
    bench = _bench()
    n, q, cap, over = CASES[case]
    a, i = bench.generate(n, work)
    settings = {**bench.SETTINGS, "num_seeds": q, **over}
    fm = FacetModel.from_config(bench.FACETS)
    paths = {}
    if copies:
        paths = {"annotations_columns": str(work / "a.parquet"), "images_columns": str(work / "i.parquet")}
        write_copy_of_jsonl("annotations", a, paths["annotations_columns"], facets=fm)
        write_copy_of_jsonl("images", i, paths["images_columns"])
        assert read_copy(paths["annotations_columns"], kind="annotations", source=a, facets=fm) is not None
        assert read_copy(paths["images_columns"], kind="images", source=i) is not None
    ann, images = read_plan_inputs(str(a), str(i), fm, {}, **paths)
    kw = {} if cap is None else {"sample_cap": cap}
    df = plan_frames(ann, images, fm, settings, "synth", Losses("plan"), compiled=compiled, **kw)
    out = work / "query_plan.jsonl"
    write_table(df, "query_plan", out, columns={})
    return hashlib.sha256(out.read_bytes()).hexdigest()


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_plans_byte_for_byte(case, tmp_path):
    assert plan_digest(case, tmp_path) == DIGESTS[case]


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_search_same_plans(case, tmp_path):
    """The search compiled with numba (plan.compiled, used from COMPILE_MIN_QUERIES queries on) plans
    the same bytes as the numpy search."""
    pytest.importorskip("numba")
    assert plan_digest(case, tmp_path, compiled=True) == DIGESTS[case]


@pytest.mark.parametrize("case", sorted(CASES))
def test_columnar_copies_same_plans(case, tmp_path):
    """Read from the merges' columnar copies instead of the JSONL files: the same plans."""
    assert plan_digest(case, tmp_path, copies=True) == DIGESTS[case]


@pytest.mark.parametrize("compiled", [False, True])
def test_tag_lists_same_plans(compiled, tmp_path, monkeypatch):
    """A vocabulary too large for bitsets (tag lists instead, Index.tag_flat): the same plans, numpy or compiled."""
    if compiled:
        pytest.importorskip("numba")
    monkeypatch.setattr("benchmaker.plan.index.MAX_BITSET_TAGS", 64)  # the generator's 150 tags: lists
    case = "n3000-q150-cap256"
    assert plan_digest(case, tmp_path, compiled=compiled) == DIGESTS[case]


if __name__ == "__main__":
    import tempfile

    for c in sorted(CASES):
        with tempfile.TemporaryDirectory() as d:
            print(f'    "{c}": "{plan_digest(c, Path(d))}",')
    sys.exit(0)

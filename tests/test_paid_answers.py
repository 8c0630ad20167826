"""Paid answers (issue 19): a stage with nothing to do because everything upstream was lost stops
with one clear block naming the losses files and the fix; more checks of what is paid and recorded."""

from __future__ import annotations

import pytest
from audit_support import draw, make_bench

from benchmaker.errors import NothingToDo
from benchmaker.formats import read_table, write_table
from benchmaker.logs import error_block
from benchmaker.losses import Losses


def test_audit_with_every_query_lost_is_a_clear_stop(tmp_path):
    paths = make_bench(tmp_path / "res", images=False)
    q = read_table("qrels", paths["qrels"])
    write_table(q.head(0), "qrels", paths["qrels"])          # every query lost by the judge
    loss = Losses("judge")
    for qid in q["query_id"].unique().sort():
        loss.add("query", qid, "api_error", "HTTP 429: You exceeded your current quota", attempts=3)
    losses = tmp_path / "res" / "losses" / "judge.jsonl"
    losses.parent.mkdir(parents=True)
    loss.write(losses)
    Losses("vision").write(losses.with_name("vision.jsonl"))
    with pytest.raises(NothingToDo) as exc:
        draw(paths, tmp_path / "res" / "audit")
    block = error_block(exc.value, rule="audit_sample")
    assert "unexpected error" not in block and "Traceback" not in block
    assert str(losses) in block and "12 lost (api_error: 12)" in block
    assert "vision.jsonl" not in block                       # a file with no loss is not named
    assert "quota" in block and "rerun the same command" in block

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


@pytest.fixture()
def fake(monkeypatch):
    import fake_openai

    f = fake_openai.start(steps=2)
    f.retry_after = "0.01"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    yield f
    fake_openai.stop(f)


def test_second_judge_spend_is_on_record_and_in_the_totals(fake, tmp_path):
    """The audit's second judge (an API judge) writes each paid row to its crash-safe ledger as it
    arrives; its cost file names its own stage, and the summary's total includes it."""
    from audit_support import FACETS
    from openai_helpers import SETTINGS

    from benchmaker.audit import judge2
    from benchmaker.io import iter_jsonl
    from benchmaker.summary.inputs import read_costs
    from benchmaker.summary.stats import cost_summary

    paths = make_bench(tmp_path / "res", n_queries=3)
    out = tmp_path / "res" / "audit" / "judge2" / "j2"
    ledger = tmp_path / "res" / ".ledger" / "audit-judge2" / "j2.jsonl"
    kw = dict(plan=str(paths["plan"]), annotations=str(paths["annotations"]), images=str(paths["images"]),
              sub_plan=str(out / "plan.jsonl"), qrels=str(out / "qrels.jsonl"), losses=str(out / "losses.jsonl"),
              costs=str(out / "costs.jsonl"), adapter="openai", scope="all", facets=FACETS,
              settings={"labels": "binary", "adapter_settings": {**SETTINGS, "base_url": fake.base_url}},
              image_root=str(paths["image_root"]), columns={}, cache_dir=str(tmp_path / "cache"),
              ledger=str(ledger))
    judge2.run(**kw)
    on_record = [r for r in iter_jsonl(ledger) if "rid" in r]
    assert len(on_record) == len(fake.bill) == 3 and {r["stage"] for r in on_record} == {"audit_judge2"}
    t = cost_summary(read_costs([kw["costs"]]))
    assert t["stage"].to_list() == ["audit_judge2"]
    assert t["cost_usd"].sum() == pytest.approx(fake.billed_usd())

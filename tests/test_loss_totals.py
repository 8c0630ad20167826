"""Never lose silently: the losses of a system under evaluation and of the judge audit's second judge
are in the summary's and the card's totals, each under a stage name of its own (benchmaker.stages
`loss_stage`), and told apart from the benchmark's own losses. The real workflow on the tiny corpus;
the second judge is the openai adapter against the fake server, which refuses one query for good."""

from __future__ import annotations

import json

import fake_openai
import pytest
import support


@pytest.fixture()
def fake():
    f = fake_openai.start()
    yield f
    fake_openai.stop(f)


@pytest.mark.slow
def test_system_and_second_judge_losses_reach_the_totals(fake, tmp_path, tiny_corpus, tiny_clip):
    ext = tmp_path / "ext.trec"
    # a run that names a query and an image the benchmark does not have: the system's losses
    ext.write_text("nope Q0 nope.png 1 1.0 ext\n")
    llm = {"base_url": fake.base_url, "image_max_side": 64, "model": "gpt-5-mini", "mode": "sync",
           "concurrency": 1, "max_attempts": 2}
    cfg = support.tiny_config(
        tmp_path, tiny_corpus, tiny_clip,
        evaluate={"systems": [{"name": "bm25", "kind": "bm25"},
                              {"name": "ext", "kind": "trec_run", "path": str(ext), "scope": "pool"}]},
        audit={"sample_size": 12, "bootstrap": 20,
               "second_judge": {"name": "j2", "judge": {"adapter": "openai", "openai": llm}}})
    refused: list[str] = []

    def fail(custom_id, body):    # the first query the second judge asks about fails every time
        text = fake_openai.request_text(body)
        if not refused:
            refused.append(text)
        return "http_400" if text == refused[0] else None

    fake.fail = fail
    path = support.write_config(tmp_path / "config.yaml", cfg)
    env = {"OPENAI_API_KEY": "sk-test"}
    r = support.snakemake(["-c2", "--show-failed-logs"], tmp_path, path, env=env, timeout=1500)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    res = tmp_path / "results" / "tiny"
    j2 = [json.loads(x) for x in (res / "audit/judge2/j2/losses.jsonl").read_text().splitlines()]
    ev = [json.loads(x) for x in (res / "losses/evaluate/ext.jsonl").read_text().splitlines()]
    assert len(j2) == 1 and j2[0]["stage"] == "judge" and j2[0]["reason"] == "api_error", j2
    assert {(x["item_type"], x["reason"]) for x in ev} == {("query", "unknown_query"), ("image", "unknown_image")}
    assert not (res / "losses/evaluate/bm25.jsonl").read_text().strip()

    n = json.loads((res / "summary/summary.json").read_text())
    assert n["losses"]["evaluate: ext"] == {"unknown_image": 1, "unknown_query": 1}, n["losses"]
    assert n["losses"]["audit_judge2"] == {"api_error": 1}, n["losses"]
    assert "judge" not in n["losses"]      # the rules judge lost nothing; the second judge's row is apart
    benchmark_own = sum(sum(v.values()) for k, v in n["losses"].items() if k not in ("evaluate: ext", "audit_judge2"))
    assert n["losses_outside_benchmark"] == 3 and n["losses_total"] == benchmark_own + 3
    table = (res / "summary/losses_by_stage.csv").read_text()
    assert "evaluate: ext,query,unknown_query,1" in table and "audit_judge2,query,api_error,1" in table, table
    md = (res / "summary/report.md").read_text()
    assert f"| losses (all stages) | {n['losses_total']} (3 of a system under evaluation" in md
    assert '3 of the' in md and '(stages "audit_judge2", "evaluate: ext")' in md

    card = (res / "hf_dataset/README.md").read_text()
    assert "| evaluate: ext | query | unknown_query | 1 |" in card
    assert "| audit_judge2 | query | api_error | 1 |" in card
    assert '(stages "audit_judge2", "evaluate: ext")' in card
    meta = json.loads((res / "hf_dataset/dataset_metadata.json").read_text())
    assert meta["losses"]["audit_judge2"] == {"api_error": 1} and meta["losses"]["evaluate: ext"]["unknown_query"] == 1
    published = [json.loads(x) for x in (res / "hf_dataset/losses.jsonl").read_text().splitlines()]
    assert sum(x["stage"] == "evaluate: ext" for x in published) == 2
    assert sum(x["stage"] == "audit_judge2" for x in published) == 1

    # nothing left to do
    r = support.snakemake(["-n", "-c1"], tmp_path, path, env=env)
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]


def test_a_file_is_counted_under_its_declared_stage_and_a_short_list_is_an_error(tmp_path):
    from benchmaker.losses import Losses
    from benchmaker.summary.inputs import read_all_losses

    ev, judge = tmp_path / "ev.jsonl", tmp_path / "judge.jsonl"
    e = Losses("evaluate")
    e.add("query", "q1", "unknown_query")
    e.write(ev)
    j = Losses("judge")
    j.add("query", "q2", "api_error", attempts=3)
    j.write(judge)
    df = read_all_losses([str(judge), str(ev)], [None, "evaluate: ext"])
    assert sorted(df.select("stage", "item_id").iter_rows()) == [("evaluate: ext", "q1"), ("judge", "q2")]
    with pytest.raises(ValueError, match="2 losses file.*1 loss stage.*loss_stages"):
        read_all_losses([str(judge), str(ev)], [None])

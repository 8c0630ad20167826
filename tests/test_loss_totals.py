"""Never lose silently: the losses of a system under evaluation and of the judge audit's second judge
are in the summary's and the card's totals, each under a stage name of its own (benchmaker.stages
`counted_as`), and told apart from the benchmark's own losses; so are their costs, and the totals name
every stage they count. The real workflow on the tiny corpus;
the second judge is the openai adapter against the fake server, which refuses one query for good."""

from __future__ import annotations

import json

import fake_openai
import polars as pl
import pytest
import support
import support_runs

from benchmaker.ids import trec_id


@pytest.fixture()
def fake():
    f = fake_openai.start()
    yield f
    fake_openai.stop(f)


@pytest.mark.slow
def test_system_and_second_judge_losses_reach_the_totals(fake, tmp_path, tiny_upstream):
    """With the leaderboard left out of the report (evaluate.report: false) the systems still run (rule
    `all`), so their losses and spend are in the totals all the same: two rerankers on one model are two
    rows of the cost table, and the totals name every stage they count."""
    ext = tmp_path / "ext.trec"  # written below, from the copied benchmark's qrels
    llm = {"base_url": fake.base_url, "image_max_side": 64, "model": "gpt-5-mini", "mode": "sync",
           "concurrency": 1, "max_attempts": 2}
    rerankers = ("rr-a", "rr-b")      # the same model: their cost rows (stage "evaluate") would merge
    # one shard (the totals are not about sharding): the tiny benchmark built once (tiny_upstream),
    # copied here; this run adds the systems, the audit with its second judge, the summary and the export
    cfg = support_runs.copy_upstream(
        tiny_upstream, tmp_path,
        evaluate={"report": False,
                  "systems": [{"name": "bm25", "kind": "bm25"},
                              {"name": "ext", "kind": "trec_run", "path": str(ext), "scope": "pool"},
                              *({"name": n, "kind": "rerank", "base": "bm25", "k": 2, "llm": llm} for n in rerankers)]},
        audit={"sample_size": 12, "bootstrap": 20,
               "second_judge": {"name": "j2", "judge": {"adapter": "openai", "openai": llm}}})
    # a run that names a query and an image the benchmark does not have (the system's losses), beside a line
    # of the benchmark's own (a run that matches nothing is an error: tests/test_evaluate_consumers.py)
    first = json.loads((tmp_path / "results/tiny/qrels.jsonl").read_text().splitlines()[0])
    ext.write_text(f"{trec_id(first['query_id'])} Q0 {trec_id(first['image_id'])} 1 1.0 ext\n"
                   "nope Q0 nope.png 1 1.0 ext\n")
    refused: list[str] = []

    def ranking(schema):
        return (schema.get("properties") or {}).get("ranking")

    def fail(custom_id, body):    # the first query the second judge asks about fails every time
        if ranking(fake_openai.request_schema(body)[0]):
            return None
        text = fake_openai.request_text(body)
        if not refused:
            refused.append(text)
        return "http_400" if text == refused[0] else None

    def answer(body, schema):     # a reranker's answer: a valid permutation
        r = ranking(schema)
        return {"ranking": list(reversed(r["items"]["enum"]))} if r else fake._default_answer(body, schema)

    fake.fail = fail
    fake.answer = answer
    path = support.write_config(tmp_path / "config.yaml", cfg)
    env = {"OPENAI_API_KEY": "sk-test"}
    r = support.snakemake(["-c2", "--show-failed-logs"], tmp_path, path, env=env, timeout=1500)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    support_runs.assert_upstream_not_rerun(r.stdout + r.stderr)
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

    # the rerankers' spend, each under its own name (their files' rows say "evaluate"), and every stage
    # counted named, the ones without a request too; no leaderboard in the report
    assert {json.loads(x)["stage"] for x in (res / "costs/evaluate/rr-a.jsonl").read_text().splitlines()} == {
        "evaluate"}
    by = n["costs"]["by_stage"]
    assert set(by) == {"evaluate: rr-a", "evaluate: rr-b", "audit_judge2"} and by["evaluate: rr-a"]["requests"] > 0
    # the two ask the same questions: whichever runs first pays, the other is answered from the response
    # cache (cost 0); Snakemake may run either first
    assert by["evaluate: rr-b"]["requests"] > 0
    assert by["evaluate: rr-a"]["cost_usd"] + by["evaluate: rr-b"]["cost_usd"] > 0, by
    assert n["costs"]["stages"] == ["vision", "queries", "judge", "evaluate: bm25", "evaluate: ext", "evaluate: rr-a",
                                    "evaluate: rr-b", "audit_judge2"]
    over = ('over the stages "evaluate: rr-a", "evaluate: rr-b", "audit_judge2" (no request recorded: "vision", '
            '"queries", "judge", "evaluate: bm25", "evaluate: ext")')
    assert over in md and "Retrieval leaderboard" not in md
    assert over in card and "| evaluate: rr-b | gpt-5-mini | sync |" in card

    # nothing left to do
    r = support.snakemake(["-n", "-c1"], tmp_path, path, env=env)
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
    # the leaderboard into the report: summary and export only (the systems and the aggregate are done)
    cfg["evaluate"]["report"] = True
    path = support.write_config(tmp_path / "config.yaml", cfg)
    r = support.snakemake(["-n", "-c1"], tmp_path, path, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert support.job_stats(r.stdout + r.stderr) == {"summary": 1, "export": 1, "all": 1}, r.stdout[-3000:]


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


def _costs(path, stage: str, items: list[str], usd: float, model: str = "gpt-5-mini") -> str:
    from benchmaker.formats import write_table

    n = len(items)
    write_table(pl.DataFrame({
        "stage": [stage] * n, "item_id": items, "model": [model] * n, "mode": ["sync"] * n,
        "input_tokens": [100] * n, "cached_input_tokens": [0] * n, "output_tokens": [10] * n,
        "reasoning_tokens": [0] * n, "cost_usd": [usd] * n, "cached": [False] * n}), "costs", path)
    return str(path)


def test_cost_rows_count_under_their_system_and_the_totals_name_every_stage(tmp_path, tiny_corpus):
    """Two rerankers on one model are two rows of the cost table (their rows say `evaluate`: relabelled
    at read, by the rules' cost_stages); the report's and the card's totals name every stage they count,
    the ones without a request too; summary.json lists them."""
    from test_export import _public_config
    from test_summary import build_inputs

    from benchmaker.export import run as export_run
    from benchmaker.summary.stage import run as summary_run

    kw = build_inputs(tmp_path, tiny_corpus, with_costs=False)
    kw.pop("_truth")
    d = tmp_path / "results"
    (d / "costs").mkdir()
    empty = d / "costs/bm25.jsonl"
    empty.write_text("")
    costs = [_costs(d / "costs/judge.jsonl", "judge", ["q1"], 0.004), str(d / "costs/vision.jsonl"),
             _costs(d / "costs/rr-a.jsonl", "evaluate", ["q1", "q2"], 0.001),
             _costs(d / "costs/rr-b.jsonl", "evaluate", ["q1"], 0.002), str(empty)]
    (d / "costs/vision.jsonl").write_text("")
    stages = ["judge", "vision", "evaluate: rr-a", "evaluate: rr-b", "evaluate: bm25"]
    kw.update(costs=costs, cost_stages=stages, outside_stages=[])
    summary_run(summary=str(d / "summary"), settings={"sample_grid": 2, "scale_factor": 0.5}, **kw)
    out = d / "hf_dataset"
    export_run(**kw, summary=str(d / "summary"), dataset=str(out), settings={"split": "test"},
               public_config=_public_config(tiny_corpus))

    table = pl.read_csv(out / "summary/cost_summary.csv")
    assert table.select("stage", "requests", "cost_usd").rows() == [
        ("evaluate: rr-a", 2, 0.002), ("evaluate: rr-b", 1, 0.002), ("judge", 1, 0.004)]
    n = json.loads((out / "summary/summary.json").read_text())
    assert n["costs"]["stages"] == stages and set(n["costs"]["by_stage"]) == {"judge", "evaluate: rr-a",
                                                                                "evaluate: rr-b"}
    over = ('over the stages "judge", "evaluate: rr-a", "evaluate: rr-b" (no request recorded: "vision", '
            '"evaluate: bm25")')
    md = (out / "summary/report.md").read_text()
    assert f"Total spend to date USD 0.0080 (all runs, interrupted ones included) {over}; the last run" in md, md
    html = (out / "summary/report.html").read_text()
    assert "included) over the stages &quot;judge&quot;, &quot;evaluate: rr-a&quot;" in html
    card = (out / "README.md").read_text()
    assert f"Total: USD 0.0080 {over}, 4 requests (spend to date, all runs)" in card
    assert "| evaluate: rr-a | gpt-5-mini | sync | 2 |" in card and "| evaluate: rr-b | gpt-5-mini | sync | 1 |" in card


def test_no_request_anywhere_still_names_the_stages_counted(tmp_path):
    from benchmaker.summary.inputs import read_costs
    from benchmaker.summary.stats import cost_coverage, cost_summary

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("")
    b.write_text("")
    t = cost_summary(read_costs([str(a), str(b)], ["vision", "evaluate: bm25"]))
    assert t.height == 0
    assert cost_coverage(t, ["vision", "evaluate: bm25"]) == 'over the stages "vision", "evaluate: bm25"'
    assert cost_coverage(t, []) == ""
    with pytest.raises(ValueError, match="2 costs file.*1 cost stage.*cost_stages"):
        read_costs([str(a), str(b)], ["vision"])

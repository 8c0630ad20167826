"""OpenAI Batch API lifecycle against the fake server: round trip, resume after interrupts (never a
second submit), partial failures retried as new batches, expired / cancelled batches, wait: false."""

from __future__ import annotations

import json

import fake_openai
import polars as pl
import pytest
from openai_helpers import SETTINGS, SYNC_COST, images_frame, write_images
from support import TINY_FACETS

from benchmaker.formats import read_table
from benchmaker.io import iter_jsonl
from benchmaker.providers.batch_build import parse_custom_id
from benchmaker.providers.batch_wait import BatchPending
from benchmaker.providers.journal import Journal, split_requests
from benchmaker.vision import openai as vo

FM = FacetModel = None


@pytest.fixture()
def fake(monkeypatch):
    f = fake_openai.start(steps=2)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    yield f
    fake_openai.stop(f)


class Shard:
    """Paths of one vision shard and the three steps, as the rules call them."""

    def __init__(self, tmp, corpus, fake, n=6, **settings):
        self.tmp, self.corpus = tmp, corpus
        self.images = write_images(images_frame(corpus, n), tmp / "images.jsonl")
        self.settings = {**SETTINGS, "mode": "batch", "base_url": fake.base_url, **settings}
        self.p = {k: str(tmp / f"{k}.jsonl") for k in ("requests", "manifest", "annotations", "losses", "costs")}
        self.p["submitted"] = str(tmp / "submitted.json")
        self.state = str(tmp / "state")
        self.cache = str(tmp / "cache")

    def build(self):
        vo.build(images=self.images, requests=self.p["requests"], manifest=self.p["manifest"], settings=self.settings,
                 facets=TINY_FACETS, image_root=str(self.corpus), columns={}, cache_dir=self.cache, threads=2)

    def submit(self):
        vo.submit(requests=self.p["requests"], submitted=self.p["submitted"], settings=self.settings,
                  state_dir=self.state, benchmark="tiny", shard="00000")

    def collect(self):
        vo.collect(images=self.images, manifest=self.p["manifest"], submitted=self.p["submitted"],
                   annotations=self.p["annotations"], losses=self.p["losses"], costs=self.p["costs"],
                   settings=self.settings, facets=TINY_FACETS, image_root=str(self.corpus), columns={},
                   state_dir=self.state, benchmark="tiny", shard="00000", cache_dir=self.cache)

    def results(self):
        from benchmaker.formats import FacetModel

        ann = read_table("annotations", self.p["annotations"], facets=FacetModel.from_config(TINY_FACETS))
        return ann, list(iter_jsonl(self.p["losses"])), list(iter_jsonl(self.p["costs"]))


def test_batch_round_trip_cost_and_cached_rerun(fake, tmp_path, tiny_corpus):
    sh = Shard(tmp_path, tiny_corpus, fake)
    sh.build()
    sh.submit()
    sh.collect()
    ann, losses, costs = sh.results()
    assert ann.height == 6 and losses == []
    assert fake.count("POST", "/v1/batches") == 1 and fake.count("POST", "/v1/files") == 1
    b = next(iter(fake.batches.values()))
    assert b["endpoint"] == "/v1/responses"
    assert b["metadata"]["benchmaker"] == "tiny" and b["metadata"]["bm_stage"] == "vision"
    assert "sk-test" not in json.dumps(b["metadata"])
    assert len(costs) == 6 and sum(c["cost_usd"] for c in costs) == pytest.approx(6 * SYNC_COST * 0.5)
    assert {c["mode"] for c in costs} == {"batch"}
    # a rerun from scratch (new build): every answer comes from the cache, nothing is sent
    for k in ("requests", "manifest", "submitted"):
        (tmp_path / (k + (".json" if k == "submitted" else ".jsonl"))).unlink()
    sh.build()
    assert (tmp_path / "requests.jsonl").read_text() == ""
    sh.submit()
    sh.collect()
    ann2, _, costs2 = sh.results()
    assert ann2.equals(ann)
    assert fake.count("POST", "/v1/batches") == 1 and fake.count("POST", "/v1/files") == 1
    # the cost file holds the spend to date: the first run's paid rows, then this run's cached rows
    assert all(c["cached"] and c["cost_usd"] == 0 for c in costs2 if c["last_run"])
    paid = [c for c in costs2 if not c["last_run"]]
    assert paid == [{**c, "last_run": False} for c in costs]


def test_split_respects_count_and_bytes(tmp_path):
    lines = [json.dumps({"custom_id": f"v-{i:03d}-a1", "body": "x" * 100}) + "\n" for i in range(25)]
    chunks = split_requests(lines, tmp_path / "c", max_requests=10, max_bytes=10**9)
    assert [c["n"] for c in chunks] == [10, 10, 5]
    size = len(lines[0].encode())
    chunks = split_requests(lines, tmp_path / "d", max_requests=1000, max_bytes=size * 4 + 1)
    assert [c["n"] for c in chunks] == [4] * 6 + [1] and all(c["bytes"] <= size * 4 + 1 for c in chunks)
    # content-addressed: the same requests give the same chunks
    again = split_requests(lines, tmp_path / "d", max_requests=1000, max_bytes=size * 4 + 1)
    assert [c["digest"] for c in again] == [c["digest"] for c in chunks]


def test_interrupt_between_submit_and_collect_never_submits_twice(fake, tmp_path, tiny_corpus):
    sh = Shard(tmp_path, tiny_corpus, fake, max_requests_per_batch=4)
    sh.build()
    sh.submit()
    assert fake.count("POST", "/v1/batches") == 2
    # rerun of submit (e.g. Snakemake lost its output) and collect: same batches
    (tmp_path / "submitted.json").unlink()
    sh.submit()
    sh.collect()
    assert fake.count("POST", "/v1/batches") == 2 and fake.count("POST", "/v1/files") == 2
    assert sh.results()[0].height == 6


@pytest.mark.parametrize("where", ["after_create", "after_intent", "after_upload"])
def test_interrupt_inside_submit_resumes_by_metadata(fake, tmp_path, tiny_corpus, monkeypatch, where):
    sh = Shard(tmp_path, tiny_corpus, fake)
    sh.build()
    real_write = Journal.write
    event = {"after_create": "batch", "after_intent": "intent", "after_upload": "file"}[where]

    def interrupted(self, rec):
        if rec.get("event") == event and where != "after_intent":
            raise KeyboardInterrupt          # the API call happened, its record did not
        real_write(self, rec)
        if rec.get("event") == event:
            raise KeyboardInterrupt          # the intent is recorded, no API call yet

    monkeypatch.setattr(Journal, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sh.submit()
    monkeypatch.setattr(Journal, "write", real_write)
    sh.submit()
    sh.collect()
    assert fake.count("POST", "/v1/batches") == 1
    assert fake.count("POST", "/v1/files") == (0 if where == "after_intent" else 1) + (where == "after_intent")
    assert sh.results()[0].height == 6


def test_partial_failures_retried_as_new_batches_then_reported(fake, tmp_path, tiny_corpus):
    def fail(custom_id, body):
        idx, att = parse_custom_id(custom_id)
        if idx == 0 and att == 1:
            return "invalid_json"
        if idx == 1 and att <= 2:
            return "schema"
        if idx == 2 and att == 1:
            return "incomplete"
        if idx == 3:
            return "http_500"                # an error row every time
        return None

    fake.fail = fail
    sh = Shard(tmp_path, tiny_corpus, fake)
    sh.build()
    sh.submit()
    sh.collect()
    ann, losses, costs = sh.results()
    ids = images_frame(tiny_corpus, 6)["image_id"].to_list()
    assert sorted(ann["image_id"].to_list()) == sorted(ids[i] for i in (0, 1, 2, 4, 5))
    assert len(losses) == 1 and losses[0]["item_id"] == ids[3] and losses[0]["attempts"] == 3
    assert losses[0]["reason"] == "api_error"
    assert fake.count("POST", "/v1/batches") == 3      # round 1 + two retry rounds of failures only
    sizes = [b["request_counts"]["total"] for b in fake.batches.values()]
    assert sizes == [6, 4, 2]
    # rerunning collect re-reads the downloads: no new batch, identical results and costs
    sh.collect()
    assert fake.count("POST", "/v1/batches") == 3
    # the same paid rows (now of an earlier run: the re-read recorded nothing new)
    assert [{**c, "last_run": True} for c in sh.results()[2]] == costs
    assert [c["attempt"] for c in costs if c["item_id"] == ids[1]] == [1, 2, 3]


def test_expired_batch_keeps_partial_results_and_retries_rest(fake, tmp_path, tiny_corpus):
    fake.expire_after = 2
    sh = Shard(tmp_path, tiny_corpus, fake, max_attempts=1)
    sh.build()
    sh.submit()
    sh.collect()
    ann, losses, _ = sh.results()
    assert ann.height == 2 and len(losses) == 4 and {r["reason"] for r in losses} == {"batch_expired"}
    # with attempts left, the unanswered requests go out again
    fake.expire_after = 2
    sh2 = Shard(tmp_path / "b", tiny_corpus, fake, max_attempts=2)
    sh2.images = sh.images
    sh2.cache = str(tmp_path / "b" / "cache")
    sh2.build()
    sh2.submit()
    sh2.collect()
    ann2, losses2, _ = sh2.results()
    assert ann2.height == 6 and losses2 == []


def test_wait_false_then_cli_cancel(fake, tmp_path, tiny_corpus, capsys):
    fake.steps = 4
    sh = Shard(tmp_path, tiny_corpus, fake, wait=False, max_attempts=3)
    sh.build()
    sh.submit()
    with pytest.raises(BatchPending):
        sh.collect()
    assert not (tmp_path / "annotations.jsonl").exists()
    from support import tiny_config, write_config

    from benchmaker import cli

    cfg = tiny_config(tmp_path, tiny_corpus, tmp_path, vision={"adapter": "openai", "openai": {
        "base_url": fake.base_url}})
    path = write_config(tmp_path / "config.yaml", cfg)
    assert cli.main(["batches", "list", str(path)]) == 0
    out = capsys.readouterr().out
    bid = next(iter(fake.batches))
    assert bid in out and "vision" in out
    assert cli.main(["batches", "cancel", str(path), "--yes"]) == 0
    sh.collect()                                        # cancelled: partial kept, the rest lost, no retry
    ann, losses, _ = sh.results()
    assert ann.height == 3 and {r["reason"] for r in losses} == {"batch_cancelled"} and len(losses) == 3
    assert fake.count("POST", "/v1/batches") == 1


def _spec_variants():
    from benchmaker.providers.spec import ImageRef, LLMSettings, RequestSpec, Text

    schema = {"type": "object", "additionalProperties": False, "required": ["a"],
              "properties": {"a": {"type": "string", "enum": ["ü", "\"q\"", "x\u2028y"]}}}
    specs = [RequestSpec("sys ü \"quoted\"\n\t", (Text("hello {x}"), ImageRef("ab" * 32, path="/p/ü.jpg",
                                                                             url="https://h/ü?a=\"1\""),
                                                Text("\u0000 tail é")), schema, "name"),
             RequestSpec("", (), schema, "n2")]
    settings = [LLMSettings(), LLMSettings(model="gpt-4o", api="chat", temperature=0.3, base_url="http://x/v1",
                                           image_transport="url", reasoning_effort=None),
                LLMSettings(model="o4-mini", reasoning_effort="high", max_output_tokens=123, image_detail="high",
                            image_transport="url")]
    return specs, settings


def test_fast_request_key_equals_its_definition():
    """request_key hashes the static fields once per (settings, schema, system): it must stay equal to
    the canonical definition, or every existing cache entry would be missed (and paid again)."""
    from benchmaker.providers.spec import request_key, request_key_reference

    specs, settings = _spec_variants()
    keys = set()
    for s in settings:
        for spec in specs:
            k = request_key(spec, s)
            assert k == request_key_reference(spec, s)
            keys.add(k)
    assert len(keys) == len(specs) * len(settings)


def test_batch_line_body_equals_render_body():
    """The spliced request line (static body serialised once) is the same JSON as render_body."""
    from benchmaker.providers.spec import render_body, render_line

    specs, settings = _spec_variants()
    for s in settings:
        if s.image_transport != "url":
            continue
        for spec in specs:
            line = render_line(spec, s, '{"custom_id":"v-1-a1","method":"POST","url":"/v1/x","body":')
            assert line.endswith("}\n") and "\n" not in line[:-1]
            row = json.loads(line)
            assert row["custom_id"] == "v-1-a1" and row["body"] == render_body(spec, s)


def test_wait_false_submit_and_exit_then_a_later_run_collects(fake, tmp_path, tiny_corpus):
    fake.steps = 3
    sh = Shard(tmp_path, tiny_corpus, fake, wait=False, max_requests_per_batch=4)
    sh.build()
    sh.submit()
    pending = 0
    for _ in range(10):                                  # "run the workflow again later", until done
        try:
            sh.collect()
            break
        except BatchPending:
            pending += 1
            assert not (tmp_path / "annotations.jsonl").exists()
    assert pending >= 1
    ann, losses, costs = sh.results()
    assert ann.height == 6 and losses == [] and len(costs) == 6
    assert fake.count("POST", "/v1/batches") == 2 and fake.count("POST", "/v1/files") == 2


@pytest.mark.parametrize("event", ["intent", "file", "batch"])
def test_interrupt_inside_a_retry_round_never_submits_twice(fake, tmp_path, tiny_corpus, monkeypatch, event):
    fake.fail = lambda cid, body: "invalid_json" if parse_custom_id(cid) == (0, 1) else None
    sh = Shard(tmp_path, tiny_corpus, fake)
    sh.build()
    sh.submit()
    real_write = Journal.write

    def interrupted(self, rec):
        if rec.get("event") == event and any(r.get("event") == "round" and r.get("round") == 2
                                             for r in self.records):
            if event == "intent":
                real_write(self, rec)        # recorded, the upload never happened
            raise KeyboardInterrupt          # "file"/"batch": the API call happened, its record did not
        real_write(self, rec)

    monkeypatch.setattr(Journal, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sh.collect()
    monkeypatch.setattr(Journal, "write", real_write)
    sh.collect()
    ann, losses, _ = sh.results()
    assert ann.height == 6 and losses == []
    assert fake.count("POST", "/v1/batches") == 2            # round 1 + one retry batch, never a third
    assert fake.count("POST", "/v1/files") == 2


def test_empty_shard_and_unicode_ids(fake, tmp_path, tiny_corpus):
    """An empty shard submits nothing and writes empty outputs; unicode ids survive the round trip."""
    sh = Shard(tmp_path, tiny_corpus, fake, n=2)
    df = images_frame(tiny_corpus, 2).with_columns(pl.Series("image_id", ["ünï/cødé 1.jpg", "日本/画像.jpg"]))
    write_images(df.head(0), tmp_path / "images.jsonl")
    sh.build()
    sh.submit()
    sh.collect()
    ann, losses, costs = sh.results()
    assert ann.height == 0 and losses == [] and costs == []
    assert fake.count("POST", "/v1/batches") == 0 and fake.count("POST", "/v1/files") == 0
    sh2 = Shard(tmp_path / "u", tiny_corpus, fake, n=2, image_transport="url")
    write_images(df, tmp_path / "u" / "images.jsonl")
    sh2.build()
    sh2.submit()
    sh2.collect()
    ann, losses, costs = sh2.results()
    assert sorted(ann["image_id"].to_list()) == sorted(df["image_id"].to_list()) and losses == []
    assert {c["item_id"] for c in costs} == set(df["image_id"].to_list())


def test_judge_batch_collect_streams_items_retries_and_records_losses_once(fake, tmp_path, tiny_corpus):
    """queries_build -> queries_submit -> queries_collect writes each query from its seed alone (one
    batch; a rerun of the three steps submits nothing), then judge_build -> judge_submit ->
    judge_collect labels against queries.jsonl: collect streams the items (made again only for the
    retried query), a query missing an annotation is one loss (not one per pass), and the retried
    query's labels land in the qrels under its candidates' image ids, with the written text."""
    from benchmaker.formats import write_table
    from benchmaker.judge import openai as jo
    from benchmaker.queries import openai as qo

    imgs = images_frame(tiny_corpus, 6)
    ids = imgs["image_id"].to_list()
    images = write_images(imgs, tmp_path / "images.jsonl")
    ann = pl.DataFrame([{"image_id": i, "summary": f"a {i.split('/')[0]} shape", "tags": ["red", "circle"],
                         "confidence": {"color": 0.9, "shape": 0.8, "is_bright": 0.5}, "annotator": "t",
                         "color": "red", "shape": "circle", "is_bright": True} for i in ids[:5]])
    write_table(ann, "annotations", tmp_path / "annotations.jsonl")

    def q(qid, seed, cands):
        return {"query_id": qid, "seed_image_ids": [seed], "candidate_image_ids": [seed, *cands],
                "candidates": [{"image_id": seed, "pool": "seed", "reason": "seed"}]
                + [{"image_id": c, "pool": "hard", "reason": "x"} for c in cands], "difficulty": 0.5,
                "shortfall": []}

    shortfall = pl.List(pl.Struct({"pool": pl.String, "wanted": pl.Int64, "got": pl.Int64, "reason": pl.String}))
    plan = pl.DataFrame([q("tiny_q0001", ids[0], ids[1:4]), q("tiny_q0002", ids[4], [ids[5]]),
                         q("tiny_q0003", ids[3], [ids[4]])], schema_overrides={"shortfall": shortfall})
    write_table(plan, "query_plan", tmp_path / "plan.jsonl")
    calls = {"n": 0}

    def answer(body, schema):
        obj = fake_openai.answer_for(fake_openai.request_text(body), schema)
        if "judgments" not in obj:                           # the query writer: one seed row each
            assert "CANDIDATES" not in fake_openai.request_text(body)
            return {"query_text": f"query {fake_openai.request_text(body).count('red')}", "narrative": "red."}
        calls["n"] += 1
        # the second answered request: out of the binary enum
        obj["judgments"] = {k: 7 if calls["n"] == 2 else 1 for k in obj["judgments"]}
        return obj

    fake.answer = answer
    s = {**SETTINGS, "mode": "batch", "base_url": fake.base_url, "labels": "binary"}
    p = {k: str(tmp_path / f"{k}.jsonl") for k in ("requests", "manifest", "qrels", "losses", "costs")}
    common = dict(plan=str(tmp_path / "plan.jsonl"), annotations=str(tmp_path / "annotations.jsonl"), images=images,
                  settings=s, facets=TINY_FACETS, image_root=str(tiny_corpus), columns={})
    w = {k: str(tmp_path / f"w_{k}.jsonl") for k in ("requests", "manifest", "queries", "losses", "costs")}
    ws = {k: v for k, v in s.items() if k != "labels"}
    wcommon = {**common, "settings": ws}
    for _ in range(2):     # again: everything is cached or on record, nothing is submitted twice
        qo.build(**wcommon, requests=w["requests"], manifest=w["manifest"], cache_dir=str(tmp_path / "wcache"))
        qo.submit(requests=w["requests"], submitted=str(tmp_path / "w_sub.json"), settings=ws,
                  state_dir=str(tmp_path / "wstate"), benchmark="tiny")
        qo.collect(**wcommon, manifest=w["manifest"], submitted=str(tmp_path / "w_sub.json"), queries=w["queries"],
                   losses=w["losses"], costs=w["costs"], state_dir=str(tmp_path / "wstate"), benchmark="tiny",
                   cache_dir=str(tmp_path / "wcache"))
        assert fake.count("POST", "/v1/batches") == 1
    written = read_table("queries", w["queries"])
    assert written["query_id"].to_list() == ["tiny_q0001", "tiny_q0002", "tiny_q0003"]
    assert set(written["narrative"]) == {"red."} and list(iter_jsonl(w["losses"])) == []
    costs = list(iter_jsonl(w["costs"]))
    assert {r["stage"] for r in costs} == {"queries"} and {r["mode"] for r in costs} == {"batch"}
    # every request paid once (the rerun's rows are answered from the cache, $0)
    assert sorted(r["item_id"] for r in costs if not r["cached"]) == ["tiny_q0001", "tiny_q0002", "tiny_q0003"]
    assert all(r["cost_usd"] == 0 for r in costs if r["cached"])
    jo.build(**common, queries=w["queries"], requests=p["requests"], manifest=p["manifest"],
             cache_dir=str(tmp_path / "cache"))
    jo.submit(requests=p["requests"], submitted=str(tmp_path / "submitted.json"), settings=s,
              state_dir=str(tmp_path / "state"), benchmark="tiny")
    jo.collect(**common, queries=w["queries"], manifest=p["manifest"], submitted=str(tmp_path / "submitted.json"),
               qrels=p["qrels"], losses=p["losses"], costs=p["costs"], state_dir=str(tmp_path / "state"),
               benchmark="tiny", cache_dir=str(tmp_path / "cache"))
    qrels = read_table("qrels", p["qrels"])
    losses = list(iter_jsonl(p["losses"]))
    # tiny_q0002 needs ids[5], which has no annotation: one loss, recorded once across both passes
    assert [(r["item_id"], r["reason"]) for r in losses] == [("tiny_q0002", "missing_annotation")]
    assert fake.count("POST", "/v1/batches") == 3            # the writer's; the first round, then one retry
    got = {(r["query_id"], r["image_id"]): r["relevance_label"] for r in qrels.iter_rows(named=True)}
    assert got == {("tiny_q0001", i): 1 for i in ids[0:4]} | {("tiny_q0003", i): 1 for i in (ids[3], ids[4])}
    assert dict(qrels.select("query_id", "query_text").unique().iter_rows()) == {
        q: t for q, t in written.select("query_id", "query_text").iter_rows() if q != "tiny_q0002"}


def test_answer_spill_parts_write_the_same_bytes_as_one_table(tmp_path):
    """Answers arriving out of order (and again after a re-read) spilled in parts of 2 rows are
    written part by part: the file is byte-identical to ordering and writing the whole table."""
    from benchmaker.formats import FacetModel, write_table

    fm = FacetModel.from_config(TINY_FACETS)
    ids = pl.Series([f"img/{i:03d}.png" for i in range(7)])

    def ans(i):
        return {"summary": f" image {i} ", "tags": ["red", " red", "circle"][: 1 + i % 3],
                "confidence": {"color": i / 10}, "color": "red", "shape": "circle", "is_bright": i % 2 == 0}

    spill = vo.AnswerSpill(tmp_path / "parts", fm, "openai:m", ids, rows_per_part=2)
    order = [5, 0, 6, 2, 5, 1, 4]                 # 5 twice (a re-read), 3 never answered
    for i in order:
        spill(i, ans(i))
    n = spill.write(str(tmp_path / "parts.jsonl"), columns={})
    whole = {i: ans(i) for i in order}
    df = vo.answers_to_frame({ids[i]: a for i, a in whole.items()}, ids.to_list(), fm, "openai:m")
    write_table(df, "annotations", tmp_path / "whole.jsonl", facets=fm)
    assert n == 6 and (tmp_path / "parts.jsonl").read_bytes() == (tmp_path / "whole.jsonl").read_bytes()
    assert not (tmp_path / "parts").exists()

"""OpenAI adapters in sync mode against the fake server: round trip, 429 + Retry-After, retries of
failures, cache (a rerun sends nothing), costs, judge keys and labels, Chat Completions."""

from __future__ import annotations

import json

import fake_openai
import polars as pl
import pytest
from openai_helpers import SETTINGS, SYNC_COST, images_frame
from support import TINY_FACETS

from benchmaker.formats import FacetModel, validate_table
from benchmaker.judge import finalize
from benchmaker.judge.openai import OpenAIJudge
from benchmaker.losses import Losses
from benchmaker.providers.cost import Usage, cost_usd, price_for, usage_from_body
from benchmaker.queries.openai import OpenAIWriter
from benchmaker.vision.openai import OpenAIAnnotator

FM = FacetModel.from_config(TINY_FACETS)


@pytest.fixture()
def fake(monkeypatch):
    f = fake_openai.start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    yield f
    fake_openai.stop(f)


def annotator(fake, tmp_path, **kw):
    s = {**SETTINGS, "base_url": fake.base_url, **kw}
    return OpenAIAnnotator(facets=FM, settings=s, image_root=str(kw.pop("root", tmp_path)),
                           cache_dir=str(tmp_path / "cache"))


def test_vision_sync_round_trip_cost_and_cache(fake, tmp_path, tiny_corpus):
    imgs = images_frame(tiny_corpus, 6)
    a = OpenAIAnnotator(facets=FM, settings={**SETTINGS, "base_url": fake.base_url,
                                             "prompts": {"user": "Collection caption: {metadata.caption}."}},
                        image_root=str(tiny_corpus), cache_dir=str(tmp_path / "cache"))
    loss = Losses("vision")
    ann = a.annotate(imgs, loss)
    validate_table(ann, "annotations", facets=FM)
    assert ann.height == 6 and len(loss) == 0
    assert ann["image_id"].to_list() == imgs["image_id"].to_list()
    sent = [b for m, p, b in fake.log if p == "/v1/responses"]
    assert len(sent) == 6
    body = sent[0]
    # static part first: instructions, then the prompt with the metadata filled, then the image (base64)
    assert body["instructions"].startswith("You are labeling images")
    texts = [c["text"] for c in body["input"][0]["content"] if c["type"] == "input_text"]
    assert any(t.startswith("Collection caption: caption of ") for t in texts)
    img = [c for c in body["input"][0]["content"] if c["type"] == "input_image"][0]
    assert img["image_url"].startswith("data:image/")
    fmt = body["text"]["format"]
    assert fmt["strict"] is True and fmt["schema"]["properties"]["color"]["enum"] == TINY_FACETS["taxonomy"]["color"]
    assert fmt["schema"]["properties"]["tags"]["minItems"] == 2
    assert "sk-test" not in json.dumps(body)
    # cost from actual usage
    rows = a.costs
    assert len(rows) == 6 and not any(r["cached"] for r in rows)
    assert sum(r["cost_usd"] for r in rows) == pytest.approx(6 * SYNC_COST)
    assert rows[0]["reasoning_tokens"] == 50 and rows[0]["cached_input_tokens"] == 200
    # a plain rerun pays nothing
    a2 = OpenAIAnnotator(facets=FM, settings={**SETTINGS, "base_url": fake.base_url,
                                              "prompts": {"user": "Collection caption: {metadata.caption}."}},
                         image_root=str(tiny_corpus), cache_dir=str(tmp_path / "cache"))
    ann2 = a2.annotate(imgs, Losses("vision"))
    assert fake.count("POST", "/v1/responses") == 6
    assert ann2.equals(ann)
    assert all(r["cached"] and r["cost_usd"] == 0 for r in a2.costs)
    # one more image and a changed prompt for nobody else: only the new request is paid
    a3 = OpenAIAnnotator(facets=FM, settings={**SETTINGS, "base_url": fake.base_url,
                                              "prompts": {"user": "Collection caption: {metadata.caption}."}},
                         image_root=str(tiny_corpus), cache_dir=str(tmp_path / "cache"))
    a3.annotate(images_frame(tiny_corpus, 7), Losses("vision"))
    assert fake.count("POST", "/v1/responses") == 7
    # a changed prompt changes every key: everything is sent again
    a4 = OpenAIAnnotator(facets=FM, settings={**SETTINGS, "base_url": fake.base_url},
                         image_root=str(tiny_corpus), cache_dir=str(tmp_path / "cache"))
    a4.annotate(imgs, Losses("vision"))
    assert fake.count("POST", "/v1/responses") == 13


def test_sync_429_retry_after(fake, tmp_path, tiny_corpus):
    fake.rate_limit, fake.retry_after = 3, "0.2"
    a = OpenAIAnnotator(facets=FM, settings={**SETTINGS, "base_url": fake.base_url, "concurrency": 1},
                        image_root=str(tiny_corpus), cache_dir=None)
    from benchmaker.providers.transport import SyncTransport

    tr = SyncTransport(a.runner.client, "responses", concurrency=1)
    loss = Losses("vision")
    ans = a.runner.run_sync(__import__("benchmaker.vision.openai", fromlist=["x"]).vision_items(
        images_frame(tiny_corpus, 2), FM, a.settings, str(tiny_corpus)), loss, transport=tr)
    assert len(ans) == 2 and len(loss) == 0
    assert tr.waits[:3] == [0.2, 0.2, 0.2]       # Retry-After honoured, not a guess
    assert fake.count("POST", "/v1/responses") == 5
    # 429s are transport retries, not attempts: every cost row is attempt 1
    assert {r["attempt"] for r in a.costs} == {1}


def test_failures_retried_then_reported(fake, tmp_path, tiny_corpus):
    imgs = images_frame(tiny_corpus, 5)
    ids = imgs["image_id"].to_list()
    calls: dict[str, int] = {}

    def fail(custom_id, body):
        key = next((i for i in range(5) if _mentions(body, imgs.row(i, named=True))), None)
        calls[key] = calls.get(key, 0) + 1
        if key == 0 and calls[key] == 1:
            return "invalid_json"
        if key == 1 and calls[key] <= 2:
            return "schema"
        if key == 2 and calls[key] == 1:
            return "incomplete"
        if key == 3:
            return "http_400"       # fails every time
        return None

    fake.fail = fail
    a = OpenAIAnnotator(facets=FM, settings={**SETTINGS, "base_url": fake.base_url,
                                             "prompts": {"user": "id-tag {metadata.caption}"}},
                        image_root=str(tiny_corpus), cache_dir=str(tmp_path / "c"))
    loss = Losses("vision")
    ann = a.annotate(imgs, loss)
    assert sorted(ann["image_id"].to_list()) == sorted(ids[i] for i in (0, 1, 2, 4))
    assert len(loss) == 1
    row = loss.rows[0]
    assert row["item_id"] == ids[3] and row["reason"] == "api_error" and row["attempts"] == 3
    assert calls[0] == 2 and calls[1] == 3 and calls[2] == 2 and calls[3] == 3 and calls[4] == 1
    # paid failures (invalid json, schema violation, incomplete) are costed too, with their attempt
    paid = [r for r in a.costs if r["item_id"] == ids[1]]
    assert [r["attempt"] for r in paid] == [1, 2, 3]


def _mentions(body, row) -> bool:
    return f"id-tag {row['caption']}" in json.dumps(body)


def test_cost_table_and_overrides():
    u = usage_from_body({"usage": {"input_tokens": 1000, "output_tokens": 150,
                                   "input_tokens_details": {"cached_tokens": 200},
                                   "output_tokens_details": {"reasoning_tokens": 50}}})
    assert u == Usage(1000, 200, 150, 50)
    p = price_for("gpt-5-mini-2025-08-07")
    assert cost_usd(u, p) == pytest.approx(SYNC_COST)
    assert cost_usd(u, p, batch=True, batch_discount=0.5) == pytest.approx(SYNC_COST / 2)
    assert price_for("my-vllm-model").known is False
    q = price_for("my-vllm-model", {"input": 1.0, "output": 2.0})
    assert cost_usd(u, q) == pytest.approx((1000 * 1.0 + 150 * 2.0) / 1e6)
    chat = usage_from_body({"usage": {"prompt_tokens": 10, "completion_tokens": 5,
                                      "prompt_tokens_details": {"cached_tokens": 4}}})
    assert chat == Usage(10, 4, 5, 0)


def _plan_and_ann(imgs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    ids = imgs["image_id"].to_list()
    ann = pl.DataFrame([{"image_id": i, "summary": f"a {i.split('/')[0]} shape", "tags": ["red", "circle"],
                         "confidence": {"color": 0.9, "shape": 0.8, "is_bright": 0.5}, "annotator": "t",
                         "color": i.split("/")[0], "shape": "circle", "is_bright": True} for i in ids])
    plan = pl.DataFrame([
        {"query_id": "tiny_q0001", "seed_image_ids": [ids[0]], "candidate_image_ids": ids[0:4],
         "candidates": [{"image_id": ids[0], "pool": "seed", "reason": "seed"}]
         + [{"image_id": i, "pool": "hard", "reason": "x"} for i in ids[1:4]], "difficulty": 0.5, "shortfall": []},
        {"query_id": "tiny_q0002", "seed_image_ids": [ids[4]], "candidate_image_ids": [ids[4], ids[5]],
         "candidates": [{"image_id": ids[4], "pool": "seed", "reason": "seed"},
                        {"image_id": ids[5], "pool": "easy", "reason": "x"}], "difficulty": 0.5, "shortfall": []},
    ], schema_overrides={"shortfall": pl.List(pl.Struct({"pool": pl.String, "wanted": pl.Int64, "got": pl.Int64,
                                                          "reason": pl.String}))})
    return plan, ann


def _written(fake, tmp_path, tiny_corpus, plan, ann, imgs, api="responses"):
    """The plan with the queries the OpenAI writer wrote (the ``queries`` stage), and its request bodies."""
    fake.answer = lambda body, schema: {"query_text": f"a circle {len(fake.log)}", "narrative": "Shows a circle."}
    w = OpenAIWriter(facets=FM, settings={**SETTINGS, "api": api, "base_url": fake.base_url},
                     image_root=str(tiny_corpus), cache_dir=str(tmp_path / "wc"))
    loss = Losses("queries")
    q = w.write(plan, ann, imgs, loss)
    assert len(loss) == 0 and q["writer"].to_list() == [w.name] * 2
    bodies = [b for m, p, b in fake.log]
    fake.log.clear()
    return plan.join(q.drop("writer"), on="query_id", maintain_order="left"), bodies, w


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_queries_written_from_the_seed_alone_then_judged_without_a_query_field(fake, tmp_path, tiny_corpus, api):
    imgs = images_frame(tiny_corpus, 6)
    plan, ann = _plan_and_ann(imgs)
    plan, wbodies, w = _written(fake, tmp_path, tiny_corpus, plan, ann, imgs, api)
    # one writer request per query: its seed's pixels at low detail and its annotation row, nothing of the pool
    assert len(wbodies) == 2 and sum(r["cost_usd"] for r in w.costs) == pytest.approx(2 * SYNC_COST)
    for b, seed in zip(wbodies, plan["seed_image_ids"]):
        text = fake_openai.request_text(b)
        assert "SEEDS:" in text and "CANDIDATES" not in text and "s1 |" in text and "c01" not in text
        parts = b["input"][0]["content"] if api == "responses" else b["messages"][1]["content"]
        images = [p for p in parts if p["type"] in ("input_image", "image_url")]
        assert len(images) == len(seed) == 1
        assert (images[0].get("detail") or images[0]["image_url"]["detail"]) == "low"
        sch = b["text"]["format"]["schema"] if api == "responses" else b["response_format"]["json_schema"]["schema"]
        assert sch["required"] == ["query_text", "narrative"]
    # the writer's cache: asked again, nothing is sent
    _written(fake, tmp_path, tiny_corpus, plan.drop("query_text", "narrative"), ann, imgs, api)
    assert fake.log == []

    def answer(body, schema):
        obj = fake_openai.answer_for(fake_openai.request_text(body), schema)
        second = len(obj["judgments"]) == 2          # query 2 has two candidates
        for j in obj["judgments"].values():
            j.update(label=0 if second else 2, rationale="because")
        return obj

    fake.answer = answer
    s = {"labels": "graded", "rationale": True, **SETTINGS, "api": api, "base_url": fake.base_url}
    j = OpenAIJudge(facets=FM, settings=s, image_root=str(tiny_corpus), cache_dir=str(tmp_path / "jc"))
    loss = Losses("judge")
    judged = j.judge(plan, ann, imgs, loss)
    path = "/v1/chat/completions" if api == "chat" else "/v1/responses"
    bodies = [b for m, p, b in fake.log if p == path]
    assert len(bodies) == 2
    for b in bodies:
        # the labeller is given the query and narrative; the seed is one unmarked candidate among the others
        text = fake_openai.request_text(b)
        [q] = [q for q in plan.iter_rows(named=True) if f"QUERY: {q['query_text']}\n" in text]
        assert "NARRATIVE: Shows a circle." in text
        assert "SEEDS" not in text and "s1 |" not in text
        assert len(fake_openai.data_keys(text)) == len(q["candidate_image_ids"])
    blob = json.dumps(bodies)
    for i in imgs["image_id"].to_list():           # no file name, path or license reaches the judge
        assert i not in blob and i.split("/")[1] not in blob
    assert "CC0" not in blob and "tiny_q000" not in blob
    schemas = [b["text"]["format"]["schema"] if api == "responses" else b["response_format"]["json_schema"]["schema"]
               for b in bodies]
    # one schema for every query with a pool of the same size (it leads the cacheable prefix): the keys
    # are positional, and the schema requires exactly the keys of the request's data (one label each)
    for b, sch in zip(bodies, schemas):
        assert list(sch["properties"]) == ["judgments"] and sch["required"] == ["judgments"]   # no query field
        js = sch["properties"]["judgments"]
        assert js["additionalProperties"] is False and js["required"] == list(js["properties"])
        assert js["required"] == sorted(fake_openai.data_keys(fake_openai.request_text(b))) == \
            [f"c{i:02d}" for i in range(1, len(js["required"]) + 1)]
    assert judge_spec_schema(4) is judge_spec_schema(4)
    from benchmaker.providers.parse import validate_answer

    ok = {"judgments": {f"c0{i}": {"label": 1, "rationale": "r"} for i in range(1, 5)}}
    assert validate_answer(ok, judge_spec_schema(4)) is None
    # a key outside the pool, or one left out, breaks the schema itself: a model that follows it cannot
    # answer for a candidate it was not given, nor skip one
    bad = {"judgments": {**ok["judgments"], "c05": {"label": 1, "rationale": "r"}}}
    assert validate_answer(bad, judge_spec_schema(4)) is not None
    short = {"judgments": {k: v for k, v in ok["judgments"].items() if k != "c04"}}
    assert validate_answer(short, judge_spec_schema(4)) is not None
    one = schemas[0]["properties"]["judgments"]["properties"]["c01"]
    assert one["required"] == ["label", "rationale"] and one["properties"]["label"]["enum"] == [0, 1, 2, 3]
    assert sorted(len(fake_openai.data_keys(fake_openai.request_text(b))) for b in bodies) == [2, 4]
    out = finalize(plan, judged, loss, judge_name=j.name, graded=True)
    validate_table(out, "qrels")
    assert out.height == 6 and set(out.filter(pl.col("query_id") == "tiny_q0001")["relevance_label"]) == {2}
    assert out.select("query_id", "query_text", "narrative").unique(maintain_order=True).rows() == \
        plan.select("query_id", "query_text", "narrative").rows()
    assert out.filter(pl.col("query_id") == "tiny_q0002")["seed_not_relevant"].all()
    assert out["rationale"].drop_nulls().len() == 6
    assert sum(r["cost_usd"] for r in j.costs) == pytest.approx(2 * SYNC_COST)


def judge_spec_schema(n: int) -> dict:
    from benchmaker.judge.prompts import _schema

    return _schema(True, True, n)


def test_judge_answer_with_wrong_keys_is_retried_then_lost(fake, tmp_path, tiny_corpus):
    imgs = images_frame(tiny_corpus, 6)
    plan, ann = _plan_and_ann(imgs)
    plan = _written(fake, tmp_path, tiny_corpus, plan, ann, imgs)[0]

    def answer(body, schema):
        obj = fake_openai.answer_for(fake_openai.request_text(body), schema)
        obj["judgments"].pop("c01")                           # one planned candidate missing
        obj["judgments"]["c99"] = 1                           # a key it was not given
        return obj

    fake.answer = answer
    j = OpenAIJudge(facets=FM, settings={**SETTINGS, "max_attempts": 2, "base_url": fake.base_url},
                    image_root=str(tiny_corpus), cache_dir=None)
    loss = Losses("judge")
    judged = j.judge(plan, ann, imgs, loss)
    assert judged.height == 0
    assert {r["reason"] for r in loss.rows} == {"schema_violation"} and {r["attempts"] for r in loss.rows} == {2}
    assert fake.count("POST", "/v1/responses") == 4
    out = finalize(plan, judged, loss, judge_name=j.name)
    assert out.height == 0 and len(loss) == 2        # not reported twice


def test_price_table_matches_exact_names_and_dated_snapshots_only():
    from benchmaker.providers.cost import PRICES, PRICES_DATE

    assert PRICES_DATE >= "2026"
    assert price_for("gpt-5.4") == price_for("gpt-5.4-2026-03-05") and price_for("gpt-5.4").input == 2.50
    assert price_for("gpt-5.4-mini-2026-03-17").output == 4.50
    assert price_for("o3-pro").input == 20.0 and price_for("o3-2025-04-16").input == 2.0
    # a model that merely looks like a listed one is unknown, never priced as its lookalike
    for lookalike in ("gpt-5.3-codex", "gpt-5.4-turbo", "o3-deep-research", "gpt-4o-audio-preview"):
        assert not price_for(lookalike).known, lookalike
    for name, (p_in, p_cached, p_out) in PRICES.items():    # plausible: cached <= input < output
        assert 0 < p_cached <= p_in < p_out, name


def test_vision_confidence_is_percentages_on_the_wire_and_facet_floats_in_annotations():
    """The answer carries confidences as a list of percentages in facet order (no facet names, no
    ``0.``); the annotation row has them back as {facet: 0..1}; an answer cached in the object form
    before still reads the same."""
    from benchmaker.providers.parse import validate_answer
    from benchmaker.vision.openai import answer_row
    from benchmaker.vision.prompts import check_answer, vision_schema

    schema = vision_schema(FM)
    conf = schema["properties"]["confidence"]
    assert conf["type"] == "array" and conf["minItems"] == conf["maxItems"] == len(FM.names)
    assert conf["items"] == {"type": "integer", "minimum": 0, "maximum": 100}
    assert ", ".join(FM.names) in conf["description"]
    base = {"summary": "a red circle", "color": "red", "shape": "circle", "is_bright": True,
            "tags": ["red", "circle"]}
    wire = {**base, "confidence": [87, 60, 5]}
    assert validate_answer(wire, schema, check_answer(FM)) is None
    assert validate_answer({**base, "confidence": [87, 60]}, schema) is not None          # one per facet
    assert validate_answer({**base, "confidence": [0.87, 0.6, 0.05]}, schema) is not None  # whole numbers
    row = answer_row("a.png", wire, FM, "openai:m")
    assert row["confidence"] == dict(zip(FM.names, [0.87, 0.6, 0.05]))
    legacy = {**base, "confidence": dict(zip(FM.names, [0.87, 0.6, 0.05]))}
    assert answer_row("a.png", legacy, FM, "openai:m")["confidence"] == row["confidence"]
    # fewer characters written than the object form (what output tokens are billed by)
    assert len(json.dumps(wire)) < len(json.dumps(legacy)) - 30


def test_judge_schema_of_a_huge_pool_stays_within_the_enum_limit():
    """The object form repeats the label enum per key; past OpenAI's 1,000 enum values per schema the
    judge falls back to a list of {key, label} with the keys in one enum, read the same way."""
    from benchmaker.judge.prompts import ENUM_BUDGET, check_answer, judge_schema, judgments_by_key, positional_keys
    from benchmaker.providers.parse import validate_answer

    def n_enum(s):
        if isinstance(s, dict):
            return len(s.get("enum", ())) + sum(n_enum(v) for v in s.values())
        return sum(n_enum(v) for v in s) if isinstance(s, list) else 0

    small, big = positional_keys(225), positional_keys(226)
    assert judge_schema(small, graded=True, rationale=False)["properties"]["judgments"]["type"] == "object"
    sch = judge_schema(big, graded=True, rationale=False)
    assert sch["properties"]["judgments"]["type"] == "array"
    assert n_enum(judge_schema(small, graded=True, rationale=True)) == 225 * 4 == ENUM_BUDGET
    assert n_enum(sch) == 226 + 4 <= 1000
    ans = {"judgments": [{"key": k, "label": 3} for k in big]}
    assert validate_answer(ans, sch, check_answer(big)) is None
    assert judgments_by_key(ans)["c226"]["label"] == 3
    assert validate_answer({**ans, "judgments": ans["judgments"][1:]}, sch, check_answer(big)) is not None


def test_labelling_with_images_sends_each_candidate_once_at_low_detail(fake, tmp_path, tiny_corpus):
    """``send_thumbnails``: the judge sees each candidate's image (one per candidate, after its key, at
    the judge's image_detail: low by default), besides its annotation row; the seed is one of them."""
    imgs = images_frame(tiny_corpus, 6)
    plan, ann = _plan_and_ann(imgs)
    plan = _written(fake, tmp_path, tiny_corpus, plan, ann, imgs)[0]
    fake.answer = lambda body, schema: fake_openai.answer_for(fake_openai.request_text(body), schema)
    j = OpenAIJudge(facets=FM, settings={**SETTINGS, "base_url": fake.base_url, "send_thumbnails": True},
                    image_root=str(tiny_corpus), cache_dir=None)
    loss = Losses("judge")
    judged = j.judge(plan, ann, imgs, loss)
    assert len(loss) == 0 and judged.height == 6
    for b in [b for m, p, b in fake.log if p == "/v1/responses"]:
        parts = b["input"][0]["content"]
        keys = fake_openai.data_keys(fake_openai.request_text(b))
        images = [p for p in parts if p["type"] == "input_image"]
        assert len(images) == len(keys) and {p["detail"] for p in images} == {"low"}
        # each image right after its key
        labels = [parts[i - 1]["text"] for i, p in enumerate(parts) if p["type"] == "input_image"]
        assert labels == [f"{k}:" for k in sorted(keys)]

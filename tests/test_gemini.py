"""Gemini adapters against a fake Gemini API, driven by the real google-genai SDK: vision and judge
round trips (sync and batch), the cache (a rerun sends nothing), 429 RESOURCE_EXHAUSTED and 5xx back-off,
retries then losses, finishReason handling, costs from usageMetadata, batch resume without
resubmitting, and the API key never written anywhere."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import fake_gemini
import polars as pl
import pytest
from openai_helpers import images_frame
from support import TINY_FACETS

from benchmaker.formats import FacetModel, read_table, validate_table, write_table
from benchmaker.judge import finalize
from benchmaker.judge.gemini import GeminiJudge
from benchmaker.losses import Losses
from benchmaker.providers import gemini as gm
from benchmaker.providers.batch_wait import BatchPending
from benchmaker.providers.cost import Usage, cost_usd
from benchmaker.vision.gemini import GeminiAnnotator
from benchmaker.vision.openai import vision_items

FM = FacetModel.from_config(TINY_FACETS)
KEY = fake_gemini.KEY
# the fake's usage per request: 1000 prompt (200 cached), 100 candidate + 50 thinking; 2.5 Flash prices
SYNC_COST = (800 * 0.30 + 200 * 0.03 + 150 * 2.50) / 1e6


@pytest.fixture()
def fake(monkeypatch):
    f = fake_gemini.start()
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    yield f
    fake_gemini.stop(f)


def settings(fake, **kw) -> dict:
    return {"model": "gemini-2.5-flash", "base_url": fake.base_url, "mode": "sync", "api_key_env": "OPENAI_API_KEY",
            "max_attempts": 3, "concurrency": 4, "image_max_side": 64, "poll_seconds": 0, "batch_discount": 0.5,
            "reasoning_effort": "low", **kw}


def no_key_under(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            assert KEY.encode() not in p.read_bytes(), f"API key written to {p}"


def test_vision_sync_round_trip_cost_cache_and_no_key(fake, tmp_path, tiny_corpus, caplog):
    caplog.set_level(logging.DEBUG)
    imgs = images_frame(tiny_corpus, 6)
    s = settings(fake, prompts={"user": "Collection caption: {metadata.caption}."})
    a = GeminiAnnotator(facets=FM, settings=s, image_root=str(tiny_corpus), cache_dir=str(tmp_path / "cache"))
    loss = Losses("vision")
    ann = a.annotate(imgs, loss)
    assert ann.height == 6 and len(loss) == 0 and a.name == "gemini:gemini-2.5-flash"
    out = tmp_path / "out" / "annotations.jsonl"
    write_table(ann, "annotations", out, facets=FM)
    back = read_table("annotations", out, facets=FM)
    validate_table(back, "annotations", facets=FM)
    assert back["image_id"].to_list() == imgs["image_id"].to_list()
    assert set(back["color"]) <= set(TINY_FACETS["taxonomy"]["color"])
    assert all(2 <= len(t) <= 4 for t in back["tags"])

    calls = fake.generate_calls()
    assert len(calls) == 6
    assert all(p == "/v1/models/gemini-2.5-flash:generateContent" for m, p, _ in fake.log)
    body = calls[0]
    assert body["systemInstruction"]["parts"][0]["text"].startswith("You are labeling images")
    parts = body["contents"][0]["parts"]
    assert parts[0]["text"].startswith("Collection caption: caption of ")     # static text first, image last
    img = fake_gemini.inline_images(body)[0]
    from PIL import Image

    with Image.open(io.BytesIO(img)) as im:                                   # downscaled as configured
        assert max(im.size) <= 64
    gc = body["generationConfig"]
    assert gc["responseMimeType"] == "application/json"
    schema = gc["responseJsonSchema"]
    assert schema["properties"]["color"]["enum"] == TINY_FACETS["taxonomy"]["color"]
    assert schema["properties"]["tags"]["minItems"] == 2 and schema["properties"]["tags"]["maxItems"] == 4
    assert gc["mediaResolution"] == "MEDIA_RESOLUTION_LOW" and gc["maxOutputTokens"] == 4000
    assert json.dumps(gc["thinkingConfig"]).replace("thinkingBudget", "thinking_budget") == '{"thinking_budget": 1024}'
    # the key travels in the header only
    assert all(h.get("x-goog-api-key") == KEY for h in fake.headers)
    assert KEY not in json.dumps(fake.log)

    rows = a.costs
    assert len(rows) == 6 and not any(r["cached"] for r in rows)
    assert rows[0]["input_tokens"] == 1000 and rows[0]["cached_input_tokens"] == 200
    assert rows[0]["output_tokens"] == 150 and rows[0]["reasoning_tokens"] == 50
    assert sum(r["cost_usd"] for r in rows) == pytest.approx(6 * SYNC_COST)

    # a rerun is served from the cache: zero requests, same annotations, nothing paid
    n = len(fake.log)
    a2 = GeminiAnnotator(facets=FM, settings=s, image_root=str(tiny_corpus), cache_dir=str(tmp_path / "cache"))
    ann2 = a2.annotate(imgs, Losses("vision"))
    assert len(fake.log) == n and ann2.equals(ann)
    assert all(r["cached"] and r["cost_usd"] == 0 for r in a2.costs)
    # a changed prompt changes every key
    a3 = GeminiAnnotator(facets=FM, settings=settings(fake), image_root=str(tiny_corpus),
                         cache_dir=str(tmp_path / "cache"))
    a3.annotate(imgs, Losses("vision"))
    assert len(fake.generate_calls()) == 12
    no_key_under(tmp_path)
    assert KEY not in caplog.text


def test_cached_rerun_needs_no_key(fake, tmp_path, tiny_corpus, monkeypatch):
    imgs = images_frame(tiny_corpus, 2)
    GeminiAnnotator(facets=FM, settings=settings(fake), image_root=str(tiny_corpus),
                    cache_dir=str(tmp_path / "c")).annotate(imgs, Losses("vision"))
    monkeypatch.delenv("GEMINI_API_KEY")
    a = GeminiAnnotator(facets=FM, settings=settings(fake), image_root=str(tiny_corpus), cache_dir=str(tmp_path / "c"))
    assert a.annotate(imgs, Losses("vision")).height == 2
    with pytest.raises(gm.MissingKey, match="GEMINI_API_KEY or GOOGLE_API_KEY"):
        GeminiAnnotator(facets=FM, settings=settings(fake), image_root=str(tiny_corpus),
                        cache_dir=None).annotate(imgs, Losses("vision"))
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)           # the fallback variable
    assert GeminiAnnotator(facets=FM, settings=settings(fake), image_root=str(tiny_corpus),
                           cache_dir=None).annotate(imgs, Losses("vision")).height == 2
    monkeypatch.setenv("MY_GEMINI_KEY", KEY)            # a named variable is the only one used
    monkeypatch.delenv("GOOGLE_API_KEY")
    assert gm.api_key({"api_key_env": "MY_GEMINI_KEY"}) == ("MY_GEMINI_KEY", KEY)


def test_429_resource_exhausted_and_503_then_success(fake, tmp_path, tiny_corpus):
    fake.rate_limit, fake.retry_delay = 3, "0.2s"
    a = GeminiAnnotator(facets=FM, settings=settings(fake, concurrency=1), image_root=str(tiny_corpus),
                        cache_dir=None)
    tr = gm.GeminiTransport(client_factory=lambda: a.runner.client, concurrency=1, base_delay=0.01)
    loss = Losses("vision")
    items = list(vision_items(images_frame(tiny_corpus, 2), FM, a.settings, str(tiny_corpus)))
    ans = a.runner.run_sync(items, loss, transport=tr)
    assert len(ans) == 2 and len(loss) == 0
    assert tr.waits[:3] == [0.2, 0.2, 0.2]            # the server's RetryInfo delay, not a guess
    assert len(fake.generate_calls()) == 5 and tr.sent == 5
    assert {r["attempt"] for r in a.costs} == {1}      # rate limits are not attempts
    # 503 UNAVAILABLE twice, then an answer
    seen: dict[str, int] = {}

    def fail(req):
        t = fake_gemini.request_text(req)
        seen[t] = seen.get(t, 0) + 1
        return "http_503" if seen[t] <= 2 else None

    fake.fail = fail
    tr2 = gm.GeminiTransport(client_factory=lambda: a.runner.client, concurrency=1, base_delay=0.01)
    ans = a.runner.run_sync(list(vision_items(images_frame(tiny_corpus, 3).tail(1), FM, a.settings,
                                              str(tiny_corpus))), loss, transport=tr2)
    assert len(ans) == 1 and len(loss) == 0 and tr2.sent == 3 and len(tr2.waits) == 2


def test_failures_retried_then_reported_in_losses(fake, tmp_path, tiny_corpus):
    imgs = images_frame(tiny_corpus, 6)
    ids = imgs["image_id"].to_list()
    calls: dict[int, int] = {}

    def which(req) -> int:
        t = fake_gemini.request_text(req)
        return next(i for i, c in enumerate(imgs["caption"]) if f"id-tag {c}." in t)

    def fail(req):
        k = which(req)
        calls[k] = calls.get(k, 0) + 1
        if k == 0 and calls[k] == 1:
            return "invalid_json"
        if k == 1 and calls[k] <= 2:
            return "schema"
        if k == 2 and calls[k] == 1:
            return "max_tokens"
        if k == 3:
            return "safety"           # every time
        if k == 4:
            return "http_400"         # every time
        return None

    fake.fail = fail
    a = GeminiAnnotator(facets=FM, settings=settings(fake, prompts={"user": "id-tag {metadata.caption}."}),
                        image_root=str(tiny_corpus), cache_dir=str(tmp_path / "c"))
    loss = Losses("vision")
    ann = a.annotate(imgs, loss)
    assert sorted(ann["image_id"].to_list()) == sorted(ids[i] for i in (0, 1, 2, 5))
    by = {r["item_id"]: r for r in loss.rows}
    assert set(by) == {ids[3], ids[4]}
    assert by[ids[3]]["reason"] == "incomplete" and "SAFETY" in by[ids[3]]["detail"] and by[ids[3]]["attempts"] == 3
    assert "HARM_CATEGORY_DANGEROUS_CONTENT" in by[ids[3]]["detail"]
    assert by[ids[4]]["reason"] == "api_error" and "400" in by[ids[4]]["detail"] and by[ids[4]]["attempts"] == 3
    assert calls == {0: 2, 1: 3, 2: 2, 3: 3, 4: 3, 5: 1}
    # paid failures are costed with their attempt; an HTTP 400 is not paid
    assert [r["attempt"] for r in a.costs if r["item_id"] == ids[1]] == [1, 2, 3]
    assert not [r for r in a.costs if r["item_id"] == ids[4]]
    # the losses file round trip
    loss.write(tmp_path / "losses.jsonl")
    assert read_table("losses", tmp_path / "losses.jsonl").height == 2


def test_finish_reasons_and_usage_parsing():
    ok = {"candidates": [{"content": {"parts": [{"text": "thinking", "thought": True}, {"text": '{"a": 1}'}]},
                          "finishReason": "STOP"}],
          "usageMetadata": {"promptTokenCount": 10, "cachedContentTokenCount": 4, "candidatesTokenCount": 5,
                            "thoughtsTokenCount": 3}}
    oc = gm.parse_response(ok)
    assert oc.ok and oc.obj == {"a": 1} and oc.usage == Usage(10, 4, 8, 3) and oc.paid
    mt = gm.parse_response({**ok, "candidates": [{**ok["candidates"][0], "finishReason": "MAX_TOKENS"}]})
    assert not mt.ok and mt.reason == "incomplete" and "MAX_TOKENS" in mt.detail and mt.paid
    rec = gm.parse_response({"candidates": [{"finishReason": "RECITATION"}]})
    assert rec.reason == "incomplete" and not rec.paid
    blk = gm.parse_response({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}})
    assert blk.reason == "refusal" and "PROHIBITED_CONTENT" in blk.detail
    # the SDK's snake_case dump parses the same
    snake = {"candidates": [{"content": {"parts": [{"text": '{"b": 2}'}]}, "finish_reason": "STOP"}],
             "usage_metadata": {"prompt_token_count": 7, "candidates_token_count": 2}}
    assert gm.parse_response(snake).obj == {"b": 2} and gm.usage_from_response(snake) == Usage(7, 0, 2, 0)


def test_prices_and_overrides():
    u = Usage(1000, 200, 150, 50)
    assert cost_usd(u, gm.gemini_price("gemini-2.5-flash")) == pytest.approx(SYNC_COST)
    assert cost_usd(u, gm.gemini_price("models/gemini-2.5-flash-preview-09-2025")) == pytest.approx(SYNC_COST)
    lite = gm.gemini_price("gemini-2.5-flash-lite")
    assert (lite.input, lite.cached_input, lite.output) == (0.10, 0.01, 0.40)
    pro = gm.gemini_price("gemini-2.5-pro")
    assert (pro.input, pro.output) == (1.25, 10.00)
    assert cost_usd(u, pro, batch=True) == pytest.approx((800 * 1.25 + 200 * 0.125 + 150 * 10.0) / 2e6)
    assert not gm.gemini_price("my-tuned-model").known
    ov = gm.gemini_price("gemini-2.5-flash", {"input": 1.0, "output": 2.0})
    assert (ov.input, ov.cached_input, ov.output) == (1.0, 0.03, 2.0)
    # the long-context tier of Pro applies per request (> 200k prompt tokens)
    r = gm.GeminiRunner(stage="t", item_type="image", settings={"model": "gemini-2.5-pro"}, cache_dir=None)
    assert r.price_of(Usage(300_000, 0, 10, 0)).input == 2.50 and r.price_of(Usage(1000, 0, 10, 0)).input == 1.25
    # the shared schema's OpenAI defaults mean Gemini's
    assert gm.gemini_settings({"model": "gpt-5-mini"})["model"] == "gemini-2.5-flash"
    assert gm.key_env_names({"api_key_env": "OPENAI_API_KEY"}) == ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    assert gm.split_base_url("https://x.example/v1beta/") == ("https://x.example/", "v1beta")


def test_legacy_model_gets_openapi_schema(fake, tmp_path, tiny_corpus):
    a = GeminiAnnotator(facets=FM, settings=settings(fake, model="gemini-2.0-flash"), image_root=str(tiny_corpus),
                        cache_dir=None)
    loss = Losses("vision")
    assert a.annotate(images_frame(tiny_corpus, 2), loss).height == 2 and len(loss) == 0
    gc = fake.generate_calls()[0]["generationConfig"]
    assert "responseJsonSchema" not in gc and "thinkingConfig" not in gc
    rs = gc["responseSchema"]
    assert rs["type"] == "OBJECT" and rs["properties"]["color"]["enum"] == TINY_FACETS["taxonomy"]["color"]
    assert "additionalProperties" not in json.dumps(rs)
    assert sum(r["cost_usd"] for r in a.costs) == pytest.approx(2 * (800 * 0.10 + 200 * 0.025 + 150 * 0.40) / 1e6)


# -- judge ----------------------------------------------------------------------------------------------
def _plan_and_ann(imgs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    ids = imgs["image_id"].to_list()
    ann = pl.DataFrame([{"image_id": i, "summary": f"a {i.split('/')[0]} shape", "tags": ["red", "circle"],
                         "confidence": {"color": 0.9, "shape": 0.8, "is_bright": 0.5}, "annotator": "t",
                         "color": i.split("/")[0], "shape": "circle", "is_bright": True} for i in ids])
    shortfall = pl.List(pl.Struct({"pool": pl.String, "wanted": pl.Int64, "got": pl.Int64, "reason": pl.String}))
    plan = pl.DataFrame([
        {"query_id": "tiny_q0001", "seed_image_ids": [ids[0]], "candidate_image_ids": ids[0:4],
         "candidates": [{"image_id": ids[0], "pool": "seed", "reason": "seed"}]
         + [{"image_id": i, "pool": "hard", "reason": "x"} for i in ids[1:4]], "difficulty": 0.5, "shortfall": []},
        {"query_id": "tiny_q0002", "seed_image_ids": [ids[4]], "candidate_image_ids": [ids[4], ids[5]],
         "candidates": [{"image_id": ids[4], "pool": "seed", "reason": "seed"},
                        {"image_id": ids[5], "pool": "easy", "reason": "x"}], "difficulty": 0.5, "shortfall": []},
    ], schema_overrides={"shortfall": shortfall})
    return plan, ann


def _judge_answer(req, schema):
    obj = fake_gemini.answer_for(fake_gemini.request_text(req), schema)
    if "judgments" not in obj:                        # the query writer
        color = fake_gemini.request_text(req).split("s1 | a ")[1].split(" ")[0]     # the seed's own row
        return {"query_text": f"a {color} circle", "narrative": "A circle, filling the image."}
    second = len(obj["judgments"]) == 2
    for k, j in obj["judgments"].items():
        if isinstance(j, dict):                       # with a rationale: {label, rationale}
            j.update(label=0 if second else 2, rationale="because")
        else:
            obj["judgments"][k] = 0 if second else 2
    return obj


def _written(plan):
    """The plan with a query text and narrative per query, as judge.run joins them from queries.jsonl."""
    return plan.with_columns(pl.format("a circle {}", pl.col("query_id")).alias("query_text"),
                             pl.lit("A circle, filling the image.").alias("narrative"))


def test_judge_round_trip_through_run_and_finalize(fake, tmp_path, tiny_corpus, caplog):
    """The queries stage writes each query from its seed alone (its pixels at MEDIA_RESOLUTION_LOW and
    its annotation), then the judge stage labels against queries.jsonl: no query field in its schema."""
    from benchmaker import judge as judge_stage
    from benchmaker import queries as queries_stage

    caplog.set_level(logging.INFO)
    imgs = images_frame(tiny_corpus, 6)
    plan, ann = _plan_and_ann(imgs)
    fake.answer = _judge_answer
    paths = {k: tmp_path / "in" / f"{k}.jsonl" for k in ("plan", "annotations", "images")}
    write_table(plan, "query_plan", paths["plan"])
    write_table(ann, "annotations", paths["annotations"], facets=FM)
    write_table(imgs, "images", paths["images"])
    out = tmp_path / "out"
    wkw = dict(plan=str(paths["plan"]), annotations=str(paths["annotations"]), images=str(paths["images"]),
               queries=str(out / "queries.jsonl"), losses=str(out / "wlosses.jsonl"), costs=str(out / "wcosts.jsonl"),
               adapter="gemini", settings=settings(fake), facets=TINY_FACETS, image_root=str(tiny_corpus), columns={},
               cache_dir=str(tmp_path / "wcache"))
    queries_stage.run(**wkw)
    written = read_table("queries", out / "queries.jsonl")
    seeds = [s[0].split("/")[0] for s in plan["seed_image_ids"]]
    assert written.select("query_id", "query_text", "writer").rows() == [
        ("tiny_q0001", f"a {seeds[0]} circle", "gemini:gemini-2.5-flash"),
        ("tiny_q0002", f"a {seeds[1]} circle", "gemini:gemini-2.5-flash")]
    wbodies = fake.generate_calls()
    wcost = read_table("costs", out / "wcosts.jsonl")["cost_usd"].sum()
    assert len(wbodies) == 2 and wcost == pytest.approx(2 * SYNC_COST)
    for b in wbodies:
        assert b["generationConfig"]["mediaResolution"] == "MEDIA_RESOLUTION_LOW"
        assert sum("inlineData" in p for p in b["contents"][0]["parts"]) == 1       # its one seed's pixels
        assert "CANDIDATES" not in fake_gemini.request_text(b)
    fake.log.clear()
    stage_settings = {"labels": "graded", "rationale": True, "adapter_settings": settings(fake)}
    kw = dict(plan=str(paths["plan"]), queries=str(out / "queries.jsonl"), annotations=str(paths["annotations"]),
              images=str(paths["images"]), qrels=str(out / "qrels.jsonl"), losses=str(out / "losses.jsonl"),
              costs=str(out / "costs.jsonl"),
              adapter="gemini", settings=stage_settings, facets=TINY_FACETS, image_root=str(tiny_corpus),
              columns={}, cache_dir=str(tmp_path / "cache"))
    judge_stage.run(**kw)
    q = read_table("qrels", out / "qrels.jsonl")
    validate_table(q, "qrels")
    assert q.height == 6 and set(q.filter(pl.col("query_id") == "tiny_q0001")["relevance_label"]) == {2}
    assert q.filter(pl.col("query_id") == "tiny_q0002")["seed_not_relevant"].all()
    assert set(q["judge"]) == {"gemini:gemini-2.5-flash"} and q["rationale"].drop_nulls().len() == 6
    assert read_table("losses", out / "losses.jsonl").height == 0
    costs = read_table("costs", out / "costs.jsonl")
    assert costs.height == 2 and costs["cost_usd"].sum() == pytest.approx(2 * SYNC_COST)
    bodies = fake.generate_calls()
    assert len(bodies) == 2
    blob = json.dumps(bodies)
    for i in imgs["image_id"].to_list():           # no file name, path or license reaches the judge
        assert i not in blob and i.split("/")[1] not in blob
    assert "CC0" not in blob and "tiny_q000" not in blob
    schemas = [b["generationConfig"]["responseJsonSchema"] for b in bodies]
    for b, sch in zip(bodies, schemas):             # one schema per pool size: a stable prefix
        assert list(sch["properties"]) == ["judgments"]                             # no query field
        assert "NARRATIVE: A circle, filling the image." in fake_gemini.request_text(b)
        assert not any("inlineData" in p for p in b["contents"][0]["parts"])         # text-only labelling
        js = sch["properties"]["judgments"]
        assert js["required"] == list(js["properties"]) == sorted(fake_gemini.data_keys(fake_gemini.request_text(b)))
    assert schemas[0]["properties"]["judgments"]["properties"]["c01"]["properties"]["label"]["enum"] == [0, 1, 2, 3]
    assert sorted(len(fake_gemini.data_keys(fake_gemini.request_text(b))) for b in bodies) == [2, 4]
    assert q.select("query_id", "query_text", "narrative").unique(maintain_order=True).rows() == \
        written.select("query_id", "query_text", "narrative").rows()
    # the rerun is served by the cache
    queries_stage.run(**wkw)
    judge_stage.run(**kw)
    assert len(fake.generate_calls()) == 2
    assert read_table("qrels", out / "qrels.jsonl").equals(q)
    no_key_under(tmp_path)
    assert KEY not in caplog.text


def test_judge_wrong_keys_retried_then_lost(fake, tmp_path, tiny_corpus):
    imgs = images_frame(tiny_corpus, 6)
    plan, ann = _plan_and_ann(imgs)
    plan = _written(plan)

    def answer(req, schema):
        obj = fake_gemini.answer_for(fake_gemini.request_text(req), schema)
        obj["judgments"].pop("c01")                           # one planned candidate missing
        obj["judgments"]["c99"] = 1                           # a key it was not given
        return obj

    fake.answer = answer
    j = GeminiJudge(facets=FM, settings=settings(fake, max_attempts=2), image_root=str(tiny_corpus), cache_dir=None)
    loss = Losses("judge")
    judged = j.judge(plan, ann, imgs, loss)
    assert judged.height == 0
    assert {r["reason"] for r in loss.rows} == {"schema_violation"} and {r["attempts"] for r in loss.rows} == {2}
    assert len(fake.generate_calls()) == 4
    out = finalize(plan, judged, loss, judge_name=j.name)
    assert out.height == 0 and len(loss) == 2


# -- batch mode -----------------------------------------------------------------------------------------
def test_vision_batch_round_trip_retry_round_and_cache(fake, tmp_path, tiny_corpus):
    imgs = images_frame(tiny_corpus, 5)
    calls: dict[str, int] = {}

    def fail(req):
        t = fake_gemini.request_text(req)
        calls[t] = calls.get(t, 0) + 1
        if imgs["caption"][0] in t and calls[t] == 1:
            return "invalid_json"
        if imgs["caption"][1] in t:
            return "max_tokens"
        return None

    fake.fail = fail
    s = settings(fake, mode="batch", max_attempts=2, prompts={"user": "id-tag {metadata.caption}."})
    a = GeminiAnnotator(facets=FM, settings=s, image_root=str(tiny_corpus), cache_dir=str(tmp_path / "cache"))
    loss = Losses("vision")
    ann = a.annotate(imgs, loss)
    ids = imgs["image_id"].to_list()
    assert sorted(ann["image_id"]) == sorted(ids[i] for i in (0, 2, 3, 4))
    assert [(r["item_id"], r["reason"], r["attempts"]) for r in loss.rows] == [(ids[1], "incomplete", 2)]
    assert fake.count("POST", r"/v1/models/gemini-2.5-flash:batchGenerateContent") == 2   # first round + retries
    assert not fake.generate_calls()
    first = [b for m, p, b in fake.log if p.endswith(":batchGenerateContent")][0]
    reqs = first["batch"]["inputConfig"]["requests"]["requests"]
    assert len(reqs) == 5 and all(r["metadata"]["key"].endswith("-a1") for r in reqs)
    assert "responseJsonSchema" in reqs[0]["request"]["generationConfig"]
    assert len(fake_gemini.inline_images(reqs[0]["request"])) == 1
    # 5 + 2 paid requests at the batch discount
    assert len(a.costs) == 7 and {r["mode"] for r in a.costs} == {"batch"}
    assert sum(r["cost_usd"] for r in a.costs) == pytest.approx(7 * SYNC_COST / 2)
    # a rerun: answered items from the cache; the lost item was attempted max_attempts times: nothing sent
    n = len(fake.log)
    a2 = GeminiAnnotator(facets=FM, settings=s, image_root=str(tiny_corpus), cache_dir=str(tmp_path / "cache"))
    loss2 = Losses("vision")
    assert a2.annotate(imgs, loss2).equals(ann)
    assert len(fake.log) == n and [r["reason"] for r in loss2.rows] == ["incomplete"]
    assert all(r["cost_usd"] == 0 for r in a2.costs)
    no_key_under(tmp_path)


def test_batch_resume_never_resubmits(fake, tmp_path, tiny_corpus):
    fake.steps = 4
    imgs = images_frame(tiny_corpus, 3)
    s = settings(fake, mode="batch", wait=False)
    cache = str(tmp_path / "cache")
    with pytest.raises(BatchPending):
        GeminiAnnotator(facets=FM, settings=s, image_root=str(tiny_corpus), cache_dir=cache).annotate(imgs, Losses("v"))
    assert fake.count("POST", r".*:batchGenerateContent") == 1
    state = next((Path(cache) / "gemini-batches").glob("vision-*"))      # the shared batch design's state
    journal = state / "journal.jsonl"
    events = [json.loads(x) for x in journal.read_text().splitlines()]
    batch = next(e for e in events if e["event"] == "batch")
    assert batch["batch_id"].startswith("batches/") and [e["event"] for e in events][:3] == ["round", "intent", "file"]
    # simulate a crash between the intent record and the job name: found again by its display name
    journal.write_text("".join(json.dumps(e) + "\n" for e in events if e["event"] != "batch"))
    (state / "submitted.json").unlink()
    with pytest.raises(BatchPending):
        GeminiAnnotator(facets=FM, settings=s, image_root=str(tiny_corpus), cache_dir=cache).annotate(imgs, Losses("v"))
    assert fake.count("POST", r".*:batchGenerateContent") == 1
    found = [json.loads(x) for x in journal.read_text().splitlines() if '"found_by"' in x]
    assert [e["batch_id"] for e in found] == [batch["batch_id"]]
    # wait: true collects the same job
    a = GeminiAnnotator(facets=FM, settings={**s, "wait": True}, image_root=str(tiny_corpus), cache_dir=cache)
    loss = Losses("v")
    assert a.annotate(imgs, loss).height == 3 and len(loss) == 0
    assert fake.count("POST", r".*:batchGenerateContent") == 1
    assert sum(not r["cached"] for r in a.costs) == 3     # paid once, reported once
    assert any('"terminal"' in x for x in journal.read_text().splitlines())


@pytest.mark.parametrize("end,reason", [("expired", None), ("cancelled", "batch_cancelled")])
def test_batch_expired_is_retried_cancelled_is_lost(fake, tmp_path, tiny_corpus, end, reason):
    imgs = images_frame(tiny_corpus, 4)
    fake.batch_end, fake.batch_keep = end, 2
    a = GeminiAnnotator(facets=FM, settings=settings(fake, mode="batch"), image_root=str(tiny_corpus),
                        cache_dir=str(tmp_path / "c"))
    loss = Losses("vision")
    ann = a.annotate(imgs, loss)
    if reason is None:                                 # expired: the rest goes in a new job
        assert ann.height == 4 and len(loss) == 0
        assert fake.count("POST", r".*:batchGenerateContent") == 2
    else:                                              # cancelled by a person: not retried
        assert ann.height == 2 and {r["reason"] for r in loss.rows} == {reason} and len(loss) == 2
        assert fake.count("POST", r".*:batchGenerateContent") == 1


def test_judge_batch_mode(fake, tmp_path, tiny_corpus):
    """The writer and the judge on Gemini's Batch API: one batch job writes the queries, then the
    judge's; labelling with images (send_thumbnails) sends each candidate's pixels once, at low detail."""
    from benchmaker.queries.gemini import GeminiWriter

    imgs = images_frame(tiny_corpus, 6)
    plan, ann = _plan_and_ann(imgs)
    fake.answer = _judge_answer
    w = GeminiWriter(facets=FM, settings=settings(fake, mode="batch"), image_root=str(tiny_corpus),
                     cache_dir=str(tmp_path / "wc"))
    wloss = Losses("queries")
    written = w.write(plan, ann, imgs, wloss)
    assert written["query_text"].to_list() == [f"a {s[0].split('/')[0]} circle" for s in plan["seed_image_ids"]]
    assert len(wloss) == 0
    assert fake.count("POST", r".*:batchGenerateContent") == 1
    assert {r["mode"] for r in w.costs} == {"batch"} and {r["stage"] for r in w.costs} == {"queries"}
    plan = plan.join(written.drop("writer"), on="query_id", maintain_order="left")
    fake.log.clear()
    j = GeminiJudge(facets=FM, settings={"labels": "binary", **settings(fake, mode="batch", send_thumbnails=True)},
                    image_root=str(tiny_corpus), cache_dir=str(tmp_path / "jc"))
    loss = Losses("judge")
    out = finalize(plan, j.judge(plan, ann, imgs, loss), loss, judge_name=j.name)
    validate_table(out, "qrels")
    # binary labels: the fake's label 2 is out of the schema's enum: retried, then lost
    assert out.height == 2 and len(loss) == 1 and loss.rows[0]["reason"] == "schema_violation"
    assert fake.count("POST", r".*:batchGenerateContent") == 3


def test_render_options_and_key_separation(tiny_corpus):
    from benchmaker.providers.spec import ImageRef, LLMSettings, RequestSpec, Text

    spec = RequestSpec(system="sys", parts=(Text("t"), ImageRef(sha256="ab" * 32, url="https://x.example/a.png")),
                       schema={"type": "object", "properties": {"n": {"type": "integer", "enum": [0, 1]}},
                               "required": ["n"], "additionalProperties": False}, schema_name="s")
    s = LLMSettings.from_config(gm.gemini_settings({"model": "gemini-3-pro-preview", "image_transport": "url",
                                                     "reasoning_effort": "medium", "image_detail": "auto"}))
    req = gm.render_request(spec, s)
    assert req["contents"][0]["parts"][1] == {"file_data": {"file_uri": "https://x.example/a.png",
                                                           "mime_type": "image/png"}}
    assert req["config"]["thinking_config"] == {"thinking_level": "high"} and "media_resolution" not in req["config"]
    assert gm.thinking_config("gemini-2.5-pro", "minimal") == {"thinking_budget": 128}
    assert gm.thinking_config("gemini-2.0-flash", "high") is None
    legacy = gm.to_openapi_schema(spec.schema)
    assert legacy["properties"]["n"] == {"type": "INTEGER", "minimum": 0, "maximum": 1}
    # the same spec under another model, thinking or provider never shares a cache entry
    from benchmaker.providers.spec import request_key

    k1 = gm.gemini_request_key(spec, s)
    k2 = gm.gemini_request_key(spec, LLMSettings.from_config(gm.gemini_settings(
        {"model": "gemini-3-pro-preview", "image_transport": "url", "reasoning_effort": "low",
         "image_detail": "auto"})))
    assert len({k1, k2, request_key(spec, s)}) == 3


@pytest.mark.slow
def test_workflow_vision_batch_judge_sync(fake, tmp_path, tiny_corpus, tiny_clip):
    """The Snakemake workflow with both stages on Gemini: vision in batch mode through the same
    build -> submit -> collect rules as OpenAI (one batch job per shard), judge in sync mode; a forced
    rerun sends nothing."""
    from support import snakemake, tiny_config, write_config

    llm = {"base_url": fake.base_url, "poll_seconds": 0.05, "image_max_side": 64, "model": "gemini-2.5-flash"}
    cfg = tiny_config(tmp_path, tiny_corpus, tiny_clip,
                      vision={"adapter": "gemini", "gemini": {**llm, "mode": "batch"}},
                      judge={"adapter": "gemini", "labels": "binary", "rationale": True,
                             "gemini": {**llm, "mode": "sync", "concurrency": 2}})
    config = write_config(tmp_path / "config.yaml", cfg)
    env = {"GEMINI_API_KEY": KEY}
    res = tmp_path / "results" / "tiny"
    target = f"{res}/qrels.jsonl"
    r = snakemake(["--cores", "2", target, f"{res}/costs/judge.jsonl", f"{res}/costs/queries.jsonl"], tmp_path,
                  config, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    assert fake.count("POST", r".*:batchGenerateContent") == 2       # one job per shard
    assert "vision_submit" in r.stderr and "vision_collect" in r.stderr
    q = read_table("qrels", res / "qrels.jsonl")
    assert q.height and set(q["judge"]) == {"gemini:gemini-2.5-flash"} and q["rationale"].drop_nulls().len() == q.height
    costs = pl.concat([read_table("costs", f) for f in sorted((res / "costs").rglob("*.jsonl"))])
    assert set(costs["stage"]) == {"vision", "queries", "judge"}
    assert set(read_table("queries", res / "queries.jsonl")["writer"]) == {"gemini:gemini-2.5-flash"}
    assert set(costs.filter(pl.col("stage") == "vision")["mode"]) == {"batch"}
    n = len(fake.log)
    no_key_under(tmp_path / "results")
    no_key_under(tmp_path / "logs") if (tmp_path / "logs").exists() else None
    r2 = snakemake(["--cores", "2", target, "--forcerun", "vision_build", "queries", "judge"], tmp_path, config,
                   env=env)
    assert r2.returncode == 0, r2.stderr[-4000:]
    assert len(fake.log) == n                                          # everything from the cache
    assert KEY not in r.stderr + r2.stderr + r.stdout + r2.stdout

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
    kw = dict(plan=str(paths["plan"]), queries=str(paths["queries"]), annotations=str(paths["annotations"]),
              images=str(paths["images"]), sub_plan=str(out / "plan.jsonl"), qrels=str(out / "qrels.jsonl"),
              losses=str(out / "losses.jsonl"), costs=str(out / "costs.jsonl"), adapter="openai", scope="all",
              facets=FACETS,
              settings={"labels": "binary", "adapter_settings": {**SETTINGS, "base_url": fake.base_url}},
              image_root=str(paths["image_root"]), columns={}, cache_dir=str(tmp_path / "cache"),
              ledger=str(ledger))
    judge2.run(**kw)
    on_record = [r for r in iter_jsonl(ledger) if "rid" in r]
    assert len(on_record) == len(fake.bill) == 3 and {r["stage"] for r in on_record} == {"audit_judge2"}
    t = cost_summary(read_costs([kw["costs"]]))
    assert t["stage"].to_list() == ["audit_judge2"]
    assert t["cost_usd"].sum() == pytest.approx(fake.billed_usd())


def test_gemini_expired_job_billed_rows_are_recorded(monkeypatch, tmp_path, tiny_corpus, caplog):
    """An expired Gemini job returns nothing (its docs), though what it processed is billed: the
    job's batchStats count it, the cost file records those rows (reason expired_unreturned) and
    equals the bill, the log says so, and the rest is sent again."""
    import logging

    import fake_gemini
    from openai_helpers import images_frame, write_images
    from support import TINY_FACETS

    from benchmaker.io import iter_jsonl
    from benchmaker.vision import run as vision_run

    fake = fake_gemini.start()
    monkeypatch.setenv("GEMINI_API_KEY", fake_gemini.KEY)
    caplog.set_level(logging.INFO)
    try:
        fake.batch_end, fake.batch_keep = "expired", 3
        imgs = images_frame(tiny_corpus, 5)
        kw = {"images": write_images(imgs, tmp_path / "images.jsonl"), "annotations": str(tmp_path / "ann.jsonl"),
              "losses": str(tmp_path / "loss.jsonl"), "costs": str(tmp_path / "costs.jsonl"), "adapter": "gemini",
              "settings": {"model": "gemini-2.5-flash", "base_url": fake.base_url, "mode": "batch",
                           "poll_seconds": 0, "image_max_side": 64, "reasoning_effort": "low"},
              "facets": TINY_FACETS, "image_root": str(tiny_corpus), "columns": {},
              "cache_dir": str(tmp_path / "cache"), "ledger": str(tmp_path / "ledger.jsonl")}
        vision_run(**kw)
        assert len(list(iter_jsonl(kw["annotations"]))) == 5
        assert len(fake.bill) == 5 + 3                  # 3 processed in the expired job, paid again
        costs = list(iter_jsonl(kw["costs"]))
        unret = [c for c in costs if c.get("reason") == "expired_unreturned"]
        assert len(unret) == 3 and len(costs) == 8
        assert sum(c["cost_usd"] for c in costs) == pytest.approx(fake.billed_usd())
        assert "3 request(s) processed that it did not return" in caplog.text
        vision_run(**kw)                                 # a rerun: everything from the cache, nothing twice
        costs2 = list(iter_jsonl(kw["costs"]))
        assert sum(c["cost_usd"] for c in costs2) == pytest.approx(fake.billed_usd()) and len(fake.bill) == 8
    finally:
        fake_gemini.stop(fake)


_VISION_CHILD = """
import sys
sys.path.insert(0, {src!r})
from benchmaker.vision import run
run(**{kw!r})
"""


def test_same_bytes_paid_once_across_concurrent_shards(fake, tmp_path, tiny_corpus):
    """Two shards whose files differ but become the same upload (the same pixels saved with other PNG
    settings, an opaque RGBA copy) run at the same time, in two processes: each distinct request is
    paid once (a claim on the bytes sent, shared through the cache), every image is annotated, and
    the cost files together equal the bill."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from openai_helpers import SETTINGS, images_frame, write_images
    from PIL import Image
    from support import TINY_FACETS

    from benchmaker.io import iter_jsonl

    root = tmp_path / "corpus"
    srcs = [p for p in sorted(tiny_corpus.rglob("*.jpg")) if "broken" not in p.parts][:6]
    for k, p in enumerate(srcs):
        im = Image.open(p).convert("RGB")
        for sub, level in (("a", 1), ("b", 9)):
            (root / sub).mkdir(parents=True, exist_ok=True)
            if sub == "b" and k % 2:
                im.convert("RGBA").save(root / sub / f"{k}.png")       # opaque alpha: composited on white
            else:
                im.save(root / sub / f"{k}.png", compress_level=level)
    assert (root / "a" / "0.png").read_bytes() != (root / "b" / "0.png").read_bytes()
    frame = images_frame(root)
    src = str(Path(__file__).resolve().parents[1] / "src")
    fake.delay = 0.2
    procs, kws = [], []
    for sub in ("a", "b"):
        imgs = frame.filter(frame["image_id"].str.starts_with(sub + "/"))
        d = tmp_path / sub
        d.mkdir()
        kw = {"images": write_images(imgs, d / "images.jsonl"), "annotations": str(d / "ann.jsonl"),
              "losses": str(d / "loss.jsonl"), "costs": str(d / "costs.jsonl"), "adapter": "openai",
              "settings": {**SETTINGS, "base_url": fake.base_url, "concurrency": 3}, "facets": TINY_FACETS,
              "image_root": str(root), "columns": {}, "cache_dir": str(tmp_path / "cache"),
              "ledger": str(d / "ledger.jsonl")}
        kws.append(kw)
        procs.append(subprocess.Popen([sys.executable, "-c", _VISION_CHILD.format(src=src, kw=kw)],
                                      env={**os.environ, "OPENAI_API_KEY": "sk-test"}))
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert len(fake.bill) == 6                                   # 12 images, 6 distinct uploads
    costs = [c for kw in kws for c in iter_jsonl(kw["costs"])]
    assert sum(not c["cached"] for c in costs) == 6 and len(costs) == 12
    assert sum(c["cost_usd"] for c in costs) == pytest.approx(fake.billed_usd())
    for kw in kws:
        assert len(list(iter_jsonl(kw["annotations"]))) == 6
    assert not [p for p in (tmp_path / "cache" / "claims").rglob("*") if p.is_file()]   # all released


def test_estimate_uses_each_providers_image_rule_and_billed_output(tmp_path):
    """Gemini images are priced by Gemini's rule (258 tokens per image up to 384 px, per 768-px tile
    above; Gemini 3 by media resolution), not OpenAI's; once answers are cached, the output estimate
    is what those answers were billed."""
    from benchmaker.estimate import _Stage
    from benchmaker.providers.spec import (
        ImageRef,
        LLMSettings,
        RequestSpec,
        Text,
        estimate_input_tokens,
        gemini_image_tokens,
    )

    # image_detail is sent as media_resolution, which decides first: LOW 64, HIGH 256 before Gemini 3
    low = LLMSettings(model="gemini-2.5-flash", image_detail="low", image_max_side=768)
    assert gemini_image_tokens(ImageRef("a", width=3000, height=2000), low) == 64
    assert gemini_image_tokens(ImageRef("a", width=300, height=200),
                               LLMSettings(model="gemini-2.5-flash", image_detail="high")) == 256
    # none sent (auto): 258 up to 384 px, else 258 per 768-px tile
    s = LLMSettings(model="gemini-2.5-flash", image_detail="auto", image_max_side=768)
    assert gemini_image_tokens(ImageRef("a", width=300, height=200), s) == 258
    assert gemini_image_tokens(ImageRef("a", width=3000, height=2000), s) == 258        # sent at 768 px
    url = LLMSettings(model="gemini-2.5-flash", image_transport="url", image_detail="auto")
    assert gemini_image_tokens(ImageRef("a", width=1000, height=800), url) == 4 * 258
    assert gemini_image_tokens(ImageRef("a"), LLMSettings(model="gemini-3-flash", image_detail="low")) == 280
    spec = RequestSpec(system="s", parts=(Text("t"), ImageRef("a", width=640, height=480)), schema={"type": "object"},
                       schema_name="x")
    assert estimate_input_tokens(spec, low, provider="gemini") - estimate_input_tokens(spec, low) == 64 - 85
    assert estimate_input_tokens(spec, s, provider="gemini") - estimate_input_tokens(spec, s) == 258 - (85 + 2 * 170)

    st = _Stage("vision", "openai", {"model": "gpt-5-mini", "mode": "sync"}, str(tmp_path / "cache"))
    schema = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"],
              "additionalProperties": False}
    specs = [RequestSpec(system="s", parts=(Text(f"item {i}"),), schema=schema, schema_name="x") for i in range(8)]
    for sp in specs[:5]:
        st.runner.cache.put(st.runner.request_key(sp), {"answer": {"summary": "x"}, "usage": {"output_tokens": 100}})
    for sp in specs:
        st.add(sp)
    line = st.line()
    assert line["cached"] == 5 and line["requests"] == 3
    assert line["output_tokens"] == 300 and "5 cached answers" in line["output_from"]


def test_estimate_prices_the_second_judge(tmp_path, tiny_corpus):
    """An API second judge (audit.second_judge) has its own line in `benchmaker estimate`: the
    sample's pairs before the sample exists (audit.sample_size), every query with scope all."""
    from support import tiny_config

    from benchmaker.config import validate_config
    from benchmaker.estimate import estimate

    llm = {"model": "gpt-5-mini", "mode": "sync"}
    base = tiny_config(tmp_path, tiny_corpus, tmp_path / "no-clip",
                       judge={"adapter": "openai", "openai": llm},
                       audit={"enabled": True, "sample_size": 6,
                              "second_judge": {"judge": {"openai": {"model": "gpt-5"}}}})
    lines = {ln["stage"]: ln for ln in estimate(validate_config(base))}
    j2 = lines["audit_judge2"]
    assert j2["model"] == "gpt-5" and j2["requests"] >= 1 and j2["usd"] > 0
    assert "sample_size (6 pairs)" in j2["source"]
    base["audit"]["second_judge"]["scope"] = "all"
    lines = {ln["stage"]: ln for ln in estimate(validate_config(base))}
    assert lines["audit_judge2"]["requests"] == lines["judge"]["requests"]

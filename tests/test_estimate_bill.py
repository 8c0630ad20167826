"""``benchmaker estimate`` against the bill (tests/estimate_bill.py: the stages' own functions against
the strict fakes counting tokens as each provider documents), with models whose answer and reasoning
lengths the estimator is never told (support.LengthModel):

* before any pilot, every stage's range (the writer's too) holds for the models measured so far (the
  issue's table and upstream's one published run) and for models drawn anywhere within what it
  assumes (estimate.REASONING_SEEN), and is at most 4x wide;
* after a pilot (at least 20 requests per stage, stratified, cached for the run), each stage's
  estimate is within 15 % of its bill, for models drawn with different means and spreads, far from
  the allowance too, in sync and batch mode, OpenAI and Gemini;
* the requests counted are the ones the run then sends: after an image change and a prompt change
  (here, on a finished run) and a plan edit (tests/test_openai_workflow.py, the workflow itself).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from estimate_bill import HEADER, STAGES, measure, run_judge, run_plan, run_queries, run_vision, table
from support import LengthModel

from benchmaker.config import deep_merge

ROOT = Path(__file__).resolve().parents[1]
# reasoning tokens per request billed by the models measured so far: the table (issue 34: output
# per request minus its answer: gpt-5-mini ~80 at low, ~90 / ~240 for the judge at low / medium; Gemini
# 2.5 Flash ~335 at its low thinking budget) and upstream's one published run (717 - ~250 at low,
# 1,481 - ~500 at medium)
SEEN = {"issue": {"low": 80, "medium": 240, "budget 1024": 335},
        "upstream": {"low": 467, "medium": 981, "budget 1024": 467}}


def _example(tmp_path: Path, adapter: str, settings: dict, **over) -> dict:
    raw = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return deep_merge(raw, {
        "paths": {"image_root": str(ROOT / "example" / "images"), "results": str(tmp_path / "results"),
                  "rights_map": str(ROOT / "example" / "rights_map.json")},
        "vision": {"adapter": adapter, adapter: settings}, "judge": {"adapter": adapter, adapter: settings}, **over})


def _corpus(root: Path, n: int) -> Path:
    """``n`` images of many sizes (64 to 1,400 px: one to many image tiles), so requests differ in size,
    each its own content (seeded blocks of colour: plain colours share one pHash, and the planner would
    see every image as a duplicate of every seed and plan each query as its seed alone)."""
    import random

    from PIL import Image

    root.mkdir(parents=True)
    for i in range(n):
        w, h = 64 + (i * 97) % 1337, 48 + (i * 61) % 900
        r = random.Random(f"corpus-{i}")
        im = Image.new("RGB", (8, 6))
        im.putdata([(r.randrange(256), r.randrange(256), r.randrange(256)) for _ in range(48)])
        im.resize((w, h), Image.NEAREST).save(root / f"im{i:03d}.jpg")
    return root


@pytest.fixture()
def gfake(monkeypatch):
    import fake_gemini

    f = fake_gemini.start()
    monkeypatch.setenv("GEMINI_API_KEY", fake_gemini.KEY)
    yield f
    fake_gemini.stop(f)


def _llm(provider: str, base_url: str, mode: str) -> dict:
    s = {"base_url": base_url, "mode": mode, "concurrency": 4}
    if provider == "gemini":
        return s | {"model": "gemini-2.5-flash", "image_detail": "auto"}
    return s | {"model": "gpt-5-mini"}


def test_every_paid_stage_has_an_estimate_entry():
    """A stage with a cost file (benchmaker/stages.py) is priced by its entry in estimate.PAID, or is
    in NOT_ESTIMATED, its declaration's ``not_estimated=`` saying why: a new paid stage cannot be left out of
    the estimate silently."""
    from benchmaker.estimate import NOT_ESTIMATED, PAID
    from benchmaker.stages import STAGES

    paid = {name for name, st in STAGES.items() if st.costs is not None}
    assert set(PAID) | set(NOT_ESTIMATED) == paid, sorted(paid ^ (set(PAID) | set(NOT_ESTIMATED)))
    assert not set(PAID) & set(NOT_ESTIMATED)


@pytest.mark.parametrize("provider,seen", [("openai", "issue"), ("gemini", "issue"), ("openai", "upstream")])
def test_range_holds_before_any_pilot(provider, seen, fake, gfake, tmp_path):
    f = gfake if provider == "gemini" else fake
    f.count_tokens = True
    f.lengths = LengthModel(7, means=SEEN[seen], spread=0.3)
    res = measure(_example(tmp_path, provider, _llm(provider, f.base_url, "sync")), tmp_path)
    print("\n" + HEADER + "\n" + "\n".join(table(f"{provider} {seen}", res)))
    for st in STAGES:
        e, b = res[st]["estimate"], res[st]["bill"]
        assert e["requests"] == b["requests"] > 0, st
        assert e["low_usd"] <= b["usd"] <= e["high_usd"], (st, e, b)
        assert e["high_usd"] <= 4 * e["low_usd"], st
        assert "reasoning" in " ".join(e["assumes"])
    assert f.billed_usd() == pytest.approx(sum(res[st]["bill"]["usd"] for st in STAGES), rel=1e-6)


@pytest.mark.parametrize("provider,mode,seed", [("openai", "sync", 1), ("gemini", "batch", 2)])
def test_range_holds_for_models_drawn_within_what_it_assumes(provider, mode, seed, fake, gfake, tmp_path):
    """The range's reasoning assumption is a domain, not the two models above: a model whose mean
    reasoning is anywhere between the least and the most seen at its effort (drawn log-uniformly from a
    seed: down to 0.18x the allowance) and whose requests vary by a drawn spread (up to 0.29, within
    the assumed 30 %) is inside every stage's range, on the example's 8-request stages too."""
    from benchmaker.estimate import REASONING_SEEN

    f = gfake if provider == "gemini" else fake
    f.count_tokens = True
    # the example's effort is low: Gemini 2.5 is sent it as a thinking budget of 1,024
    f.lengths = LengthModel.within(seed, {"budget 1024" if provider == "gemini" else "low": REASONING_SEEN["low"]})
    res = measure(_example(tmp_path, provider, _llm(provider, f.base_url, mode)), tmp_path)
    print(f"\n{f.lengths}\n" + HEADER + "\n" + "\n".join(table(f"{provider} {seed}", res)))
    for st in STAGES:
        e, b = res[st]["estimate"], res[st]["bill"]
        assert e["requests"] == b["requests"] > 0, st
        assert e["low_usd"] <= b["usd"] <= e["high_usd"], (st, e, b)


@pytest.mark.parametrize("seen", ["issue", "upstream"])
def test_range_on_pools_the_reuse_cap_limits_holds_and_is_at_most_4x(seen, fake, tmp_path):
    """FireBench's plan shape (issue 34's widest range): negatives-only pools that max_image_reuse caps
    at ~4 candidates, the writer and the judge at medium effort, at $0.125 / $1.00 per million input /
    output tokens (reasoning most of their bill). Before the plan, the pools are priced with the
    planner's own padding rule (estimate._quota_pools: the negatives are padded from any eligible
    image), and the planner then plans at least that share of the candidates priced; the writer's and
    the judge's bills are inside their ranges, each at most 4x wide."""
    import polars as pl

    from benchmaker.config import load_config, results_dir
    from benchmaker.estimate import _context, _quota_pools

    fake.count_tokens = True
    fake.lengths = LengthModel(7, means=SEEN[seen], spread=0.3)
    prices = {"input": 0.125, "cached_input": 0.0125, "output": 1.0}
    raw = _example(tmp_path, "openai", _llm("openai", fake.base_url, "sync") | {"prices": prices},
                   plan={"num_seeds": 50, "pos_total": 0, "neutral_total": 0, "neg_total": 40, "neg_hard": 25,
                         "neg_nearmiss": 10, "neg_easy": 5, "diversity_cap": 6, "max_image_reuse": 3})
    raw["judge"]["openai"]["reasoning_effort"] = "medium"
    raw["paths"]["image_root"] = str(_corpus(tmp_path / "images", 60))
    raw["paths"]["rights_map"] = None
    res = measure(raw, tmp_path)
    print("\n" + HEADER + "\n" + "\n".join(table(f"capped {seen}", res)))
    assert "max_image_reuse 3 over 60 images" in res["judge"]["estimate"]["source"]
    for st in ("queries", "judge"):
        e, b = res[st]["estimate"], res[st]["bill"]
        assert e["requests"] == b["requests"] == 50, st
        assert b["output_tokens"] * prices["output"] / 1e6 > 0.5 * b["usd"], st   # output (mostly reasoning)
        assert e["low_usd"] <= b["usd"] <= e["high_usd"], (st, e, b)
        assert e["high_usd"] <= 4 * e["low_usd"], (st, e)
    cfg = load_config(str(tmp_path / "config.yaml"))
    _n_q, _n_seed, per_query, _why, low = _quota_pools(_context(cfg))
    plan = pl.read_ndjson(Path(results_dir(cfg)) / "query_plan.jsonl")
    planned = sum(len(set(c) - set(s)) for c, s in zip(plan["candidate_image_ids"], plan["seed_image_ids"]))
    assert low * sum(per_query) <= planned <= sum(per_query), (low, per_query, planned)


@pytest.mark.parametrize("provider,mode,seed", [("openai", "sync", 11), ("openai", "batch", 12),
                                                ("gemini", "batch", 13)])
def test_a_pilot_calibrates_on_models_the_estimator_does_not_know(provider, mode, seed, fake, gfake, tmp_path):
    """Models drawn from a seed (reasoning 20..6,000 tokens per request, spreads 0.05..0.5, answers
    0.5..1.6x as wordy): after a pilot of 20 requests per stage the stage's estimate (the pilot's spend
    plus what is still to send) is within 15 % of its bill; the pilot's answers are reused by the run."""
    f = gfake if provider == "gemini" else fake
    f.count_tokens = True
    f.lengths = LengthModel.drawn(seed)
    raw = _example(tmp_path, provider, _llm(provider, f.base_url, mode),
                   plan={"num_seeds": 40})
    raw["paths"]["image_root"] = str(_corpus(tmp_path / "images", 160))
    raw["paths"]["rights_map"] = None
    res = measure(raw, tmp_path, pilot=20)
    print(f"\n{f.lengths}\n" + HEADER + "\n" + "\n".join(table(f"{provider} {mode}", res)))
    for st in STAGES:
        x = res[f"{st} after pilot"]
        e, b, p = x["estimate"], x["bill"], x["pilot"]
        assert p["requests"] == e["pilot"]["requests"] == 20, st          # min 20, and 2 % of 160 or 40 is less
        assert e["requests"] == b["requests"] > 0, st                      # the pilot's answers are not sent again
        assert e["total_usd"] == pytest.approx(b["usd"] + p["usd"], rel=0.15), (st, e, b, p)
        assert e["calibrated_on"] >= 20 and "measured on" in e["output_from"]
    assert len(f.bill) == sum(res[st]["bill"]["requests"] for st in STAGES)   # nothing paid twice
    # before it, the estimate says what a pilot would send and cost: sync, so in batch mode its requests'
    # batch figure plus the discount they forgo (the judge's real requests are known after vision only)
    before = res["vision"]["estimate"]
    nxt = before["next_pilot"]
    assert nxt["requests"] == 20 and res["judge"]["estimate"]["next_pilot"]["requests"] == 0
    assert nxt["usd"] - nxt["over_batch_usd"] == pytest.approx(before["usd"] * 20 / before["requests"], rel=1e-3)
    for st in ("vision", "judge"):
        p = res[f"{st} after pilot"]["estimate"]["pilot"]
        assert (p["over_batch_usd"] > 0) == (mode == "batch") and p["over_batch_usd"] < p["usd"], (st, p)


def test_counts_what_the_run_sends_after_an_image_and_a_prompt_change(fake, tmp_path):
    """On a finished run: a changed image is one vision request (and the judge waits for its
    annotation: a range); a changed vision prompt is every image again; the run then sends exactly
    that (the fake counts)."""
    from benchmaker.config import load_config
    from benchmaker.estimate import estimate

    fake.count_tokens = True
    fake.lengths = LengthModel.drawn(21)
    raw = _example(tmp_path, "openai", _llm("openai", fake.base_url, "sync"))
    raw["paths"]["image_root"] = str(_corpus(tmp_path / "images", 30))
    raw["paths"]["rights_map"] = None
    measure(raw, tmp_path)
    cfg_path = tmp_path / "config.yaml"
    res, cache = tmp_path / "results" / raw["benchmark"]["name"], tmp_path / "results" / ".cache"
    lines = {ln["stage"]: ln for ln in estimate(load_config(str(cfg_path)))}
    assert all(lines[st]["requests"] == 0 for st in STAGES)   # all answered
    assert lines["queries"]["source"].startswith("the planner's plan")
    assert lines["judge"]["source"].startswith("the planner's plan")
    from PIL import Image

    Image.new("RGB", (300, 200), (1, 2, 3)).save(Path(raw["paths"]["image_root"]) / "im005.jpg")
    lines = {ln["stage"]: ln for ln in estimate(load_config(str(cfg_path)))}
    assert lines["vision"]["requests"] == 1 and "inspection" in lines["vision"]["source"]
    assert lines["judge"]["source"].startswith("plan quotas")       # the plan waits for that annotation
    assert lines["queries"]["source"].startswith("plan quotas")
    from benchmaker.estimate import _images
    from benchmaker.formats import write_table

    cfg = load_config(str(cfg_path))
    write_table(_images(cfg, res)[0], "images", str(res / "images.jsonl"), columns=cfg["columns"])
    n = len(fake.bill)
    run_vision(cfg, res, cache)
    assert len(fake.bill) - n == 1
    lines = {ln["stage"]: ln for ln in estimate(cfg)}
    n = len(fake.bill)
    run_plan(cfg, res)
    run_queries(cfg, res, cache)
    assert len(fake.bill) - n == lines["queries"]["requests"]
    n = len(fake.bill)
    run_judge(cfg, res, cache)
    assert len(fake.bill) - n == lines["judge"]["requests"]
    raw["vision"]["openai"]["prompts"] = {"user": "Describe the image as JSON."}
    cfg_path.write_text(yaml.safe_dump(raw))
    cfg = load_config(str(cfg_path))
    assert {ln["stage"]: ln for ln in estimate(cfg)}["vision"]["requests"] == 30
    n = len(fake.bill)
    run_vision(cfg, res, cache)
    assert len(fake.bill) - n == 30


def test_recorded_estimate_is_validated(tmp_path):
    from benchmaker.estimate_file import read_estimate
    from benchmaker.formats import FormatError

    p = tmp_path / "estimate.json"
    p.write_text(json.dumps({"version": 1, "stages": {"vision": {"usd": "cheap"}}}))
    with pytest.raises(FormatError, match="benchmaker estimate CONFIG --record"):
        read_estimate(p)


def test_estimate_names_the_paid_rerankers_it_does_not_price(tmp_path, monkeypatch, capsys):
    """A reranker calls its provider once per query; the estimate does not price it (NOT_ESTIMATED) and
    says so, by name, also where the benchmark itself pays nothing (it printed only "nothing to pay")."""
    from benchmaker.cli import main

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    overlay = tmp_path / "rerank.yaml"
    overlay.write_text(yaml.safe_dump({"paths": {"results": str(tmp_path / "results")}, "evaluate": {"systems": [
        {"name": "vit", "kind": "clip", "model": "ViT-B-32", "pretrained": "laion2b_s34b_b79k"},
        {"name": "gpt-rerank", "kind": "rerank", "base": "vit", "k": 7, "llm": {"model": "gpt-5-mini"}}]}}))
    assert main(["estimate", "config/config.yaml", str(overlay)]) == 0
    out = capsys.readouterr().out
    assert "nothing to pay" in out
    assert "evaluate: gpt-rerank (rerank by openai, top 7 per query) is not priced here" in out
    assert "costs/evaluate/gpt-rerank.jsonl" in out

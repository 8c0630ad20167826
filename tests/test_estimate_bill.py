"""``benchmaker estimate`` within 15 % of the bill (tests/estimate_bill.py) on the example's images and
config with the OpenAI and the Gemini adapters, against the strict fakes counting tokens as each
provider documents; and a model that reasons twice what the allowance assumes: the estimate is off
before anything is cached, and within 15 % of the rest once a pilot's answers are cached."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from estimate_bill import HEADER, measure, reasoning_model, table

from benchmaker.config import deep_merge

ROOT = Path(__file__).resolve().parents[1]


def _example(tmp_path: Path, adapter: str, settings: dict) -> dict:
    raw = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return deep_merge(raw, {
        "paths": {"image_root": str(ROOT / "example" / "images"), "results": str(tmp_path / "results"),
                  "rights_map": str(ROOT / "example" / "rights_map.json")},
        "vision": {"adapter": adapter, adapter: settings},
        "judge": {"adapter": adapter, adapter: settings},
    })


def _check(name: str, res: dict, stages=("vision", "queries", "judge"), tol: float = 0.15) -> None:
    print("\n" + HEADER + "\n" + "\n".join(table(name, res)))
    for st in stages:
        e, b = res[st]["estimate"], res[st]["bill"]
        assert e["requests"] == b["requests"], st
        assert e["usd"] == pytest.approx(b["usd"], rel=tol), (st, e, b)


def test_estimate_within_15_percent_openai_example(fake, tmp_path):
    fake.count_tokens = True
    fake.reasoning_tokens = reasoning_model("openai", 1.0)
    raw = _example(tmp_path, "openai", {"base_url": fake.base_url, "mode": "sync", "concurrency": 2,
                                        "model": "gpt-5-mini"})
    res = measure(raw, tmp_path)
    _check("example", res)
    assert res["vision"]["estimate"]["usd"] > 0 and res["judge"]["bill"]["requests"] == raw["plan"]["num_seeds"]


@pytest.fixture()
def gfake(monkeypatch):
    import fake_gemini

    f = fake_gemini.start()
    monkeypatch.setenv("GEMINI_API_KEY", fake_gemini.KEY)
    yield f
    fake_gemini.stop(f)


def test_estimate_within_15_percent_gemini_example(gfake, tmp_path):
    """Gemini's own image rule (no media resolution sent: 258 per 768-px tile, the fake reads each
    image's real size) and thinking tokens billed as output."""
    gfake.count_tokens = True
    gfake.thoughts_tokens = reasoning_model("gemini", 1.0)
    raw = _example(tmp_path, "gemini", {"base_url": gfake.base_url, "mode": "sync", "concurrency": 2,
                                        "model": "gemini-2.5-flash", "image_detail": "auto"})
    res = measure(raw, tmp_path)
    _check("gemini", res)
    assert gfake.billed_usd() == pytest.approx(
        res["vision"]["bill"]["usd"] + res["queries"]["bill"]["usd"] + res["judge"]["bill"]["usd"], rel=1e-6)


def test_estimate_calibrates_on_a_pilot_when_the_model_reasons_more(fake, tmp_path):
    """A model that reasons 2x the allowance: before anything is cached the estimate is far too low
    (the documented uncertainty); after a pilot of a quarter of the images it is within 15 % of the
    rest, because the cached answers' billed reasoning replaces the allowance."""
    fake.count_tokens = True
    fake.reasoning_tokens = reasoning_model("openai", 2.0)
    raw = _example(tmp_path, "openai", {"base_url": fake.base_url, "mode": "sync", "concurrency": 2,
                                        "model": "gpt-5-mini", "image_detail": "high"})
    raw["judge"]["adapter"] = "rules"
    res = measure(raw, tmp_path, pilot=0.25)
    print("\n" + HEADER + "\n" + "\n".join(table("2x reason", res)))
    v, after = res["vision"], res["vision_after_pilot"]
    assert v["estimate"]["usd"] < 0.85 * v["bill"]["usd"]
    assert "cached answers" in after["estimate"]["output_from"]
    assert after["estimate"]["requests"] == after["bill"]["requests"] > 0
    assert after["estimate"]["usd"] == pytest.approx(after["bill"]["usd"], rel=0.15)

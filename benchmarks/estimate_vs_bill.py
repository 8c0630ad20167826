"""``benchmaker estimate`` vs the bill, per stage, on three configs (tests/estimate_bill.py):

* **example**: ``config/config.yaml`` on ``example/images`` with the OpenAI adapter for vision and
  judge (gpt-5-mini, its defaults), against the fake OpenAI server counting tokens;
* **gemini**: the same with the Gemini adapter (gemini-2.5-flash, ``image_detail: auto``: Gemini's
  258-token tiles of each image's real size), against the fake Gemini server counting tokens;
* **firebench** (with a path): FireBench's published ``config.toml`` (waggle-sensor/imsearch_benchmarks,
  ``FireBenchMaker/config.toml``) through ``benchmaker import-upstream``, unchanged except paths, on
  generated images (its image URLs are sent, as upstream does);

each first with a model that reasons as the allowance assumes (``--reasoning 1``), then the example
with a model that reasons twice as much, before and after a pilot of a quarter of the images.

    python benchmarks/estimate_vs_bill.py [FireBenchMaker/config.toml] [--reasoning 1.0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests"), str(ROOT / "benchmarks")]

import yaml  # noqa: E402


def example(tmp: Path, adapter: str, settings: dict) -> dict:
    from benchmaker.config import deep_merge

    raw = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return deep_merge(raw, {
        "paths": {"image_root": str(ROOT / "example" / "images"), "results": str(tmp / "results"),
                  "rights_map": str(ROOT / "example" / "rights_map.json")},
        "vision": {"adapter": adapter, adapter: settings}, "judge": {"adapter": adapter, adapter: settings}})


def firebench(tmp: Path, toml: Path, base_url: str, n_images: int) -> dict:
    from firebench_cost import imported_config

    raw, _, _ = imported_config(tmp, toml, n_images)
    raw["paths"]["rights_map"] = None
    net = {"base_url": base_url, "mode": "sync", "concurrency": 4, "prompt_cache_key": True}
    for st in ("vision", "judge"):
        ad = raw[st]["adapter"]
        raw[st][ad] = {**raw[st].get(ad, {}), **net}
    return raw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("toml", type=Path, nargs="?",
                    help="FireBenchMaker/config.toml of waggle-sensor/imsearch_benchmarks")
    ap.add_argument("--reasoning", type=float, default=1.0, help="the fake model reasons this x the allowance")
    ap.add_argument("--images", type=int, default=120, help="generated images for the FireBench config")
    a = ap.parse_args()

    import fake_gemini
    import fake_openai
    from estimate_bill import HEADER, measure, reasoning_model, table

    os.environ["OPENAI_API_KEY"] = "sk-test"
    os.environ["GEMINI_API_KEY"] = fake_gemini.KEY
    lines = [HEADER]
    runs = [("example", "openai", 1.0, 0.0), ("gemini", "gemini", 1.0, 0.0)]
    if a.toml:
        runs.append(("firebench", "openai", 1.0, 0.0))
    runs.append(("2x reason", "openai", 2.0, 0.25))
    for name, provider, factor, pilot in runs:
        fake = (fake_gemini if provider == "gemini" else fake_openai).start()
        fake.count_tokens = True
        if provider == "gemini":
            fake.thoughts_tokens = reasoning_model("gemini", factor * a.reasoning)
        else:
            fake.reasoning_tokens = reasoning_model("openai", factor * a.reasoning)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                tmp = Path(tmp)
                net = {"base_url": fake.base_url, "mode": "sync", "concurrency": 4}
                if name == "firebench":
                    raw = firebench(tmp, a.toml, fake.base_url, a.images)
                elif provider == "gemini":
                    raw = example(tmp, "gemini", {**net, "model": "gemini-2.5-flash", "image_detail": "auto"})
                else:
                    raw = example(tmp, "openai", {**net, "model": "gpt-5-mini"})
                lines += table(name, measure(raw, tmp, pilot=pilot))
        finally:
            (fake_gemini if provider == "gemini" else fake_openai).stop(fake)
        print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""``benchmaker estimate`` vs the bill, per stage (tests/estimate_bill.py: the stages' own functions
against the token-counting fakes), on three configs, in sync and batch mode:

* **example**: ``config/config.yaml`` on ``example/images`` with the OpenAI adapter for vision and
  judge (gpt-5-mini, its defaults);
* **gemini**: the same with the Gemini adapter (gemini-2.5-flash, ``image_detail: auto``: Gemini's
  258-token tiles of each image's real size);
* **firebench** (with a path): FireBench's published ``config.toml`` (waggle-sensor/imsearch_benchmarks,
  ``FireBenchMaker/config.toml``) through ``benchmaker import-upstream``, unchanged except paths, on
  generated images (its image URLs are sent, as upstream does) and its own plan (100 queries);

and with fake models whose lengths the estimator is not told (support.LengthModel):

* the **range** (no pilot) with the models measured so far: ``issue`` (the reasoning per request that
  issue 34's table implies: gpt-5-mini ~80 at low, ~240 at medium, Gemini ~335) and ``upstream``
  (upstream's one published run: ~467 at low, ~981 at medium): is the bill inside low..high, how wide;
* the **range** with ``--within`` models drawn within what it assumes (``LengthModel.within``: a
  mean reasoning log-uniform between the least and the most seen at each effort,
  ``estimate.REASONING_SEEN``, a per-request spread 0.05..0.29): how many bills are inside (the range
  is a 90 % interval for a model at the edge of that domain);
* the **pilot** (``--pilot`` requests per stage, default 20) with models drawn from seeds
  (``LengthModel.drawn``: reasoning means 20..6,000 tokens per request, spreads 0.05..0.5, answers
  0.5..1.6x as wordy): the stage's figure after its pilot (the pilot's spend + what is still to send)
  against its whole bill.

    python benchmarks/estimate_vs_bill.py [FireBenchMaker/config.toml] [--seeds 3] [--pilot 20] [--within 5]
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

SEEN = {"issue": {"low": 80, "medium": 240, "budget 1024": 335, "budget 8192": 335},
        "upstream": {"low": 467, "medium": 981, "budget 1024": 467, "budget 8192": 981}}


def example(tmp: Path, adapter: str, settings: dict) -> dict:
    from benchmaker.config import deep_merge

    raw = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return deep_merge(raw, {
        "paths": {"image_root": str(ROOT / "example" / "images"), "results": str(tmp / "results"),
                  "rights_map": str(ROOT / "example" / "rights_map.json")},
        "vision": {"adapter": adapter, adapter: settings}, "judge": {"adapter": adapter, adapter: settings}})


def distinct(corpus: Path, names: list[str]) -> None:
    """Give each generated image its own content (seeded noise, same size): the plain colours of
    firebench_cost.make_images share one pHash, so the planner saw every image as a duplicate of every
    seed and planned each query as its seed alone, a corpus no benchmark has."""
    import random

    from PIL import Image

    for i, name in enumerate(names):
        r = random.Random(f"firebench-image-{i}")
        im = Image.new("RGB", (8, 6))
        im.putdata([(r.randrange(256), r.randrange(256), r.randrange(256)) for _ in range(48)])
        im.resize((64, 48), Image.NEAREST).save(corpus / name, quality=80)


def firebench(tmp: Path, toml: Path, net: dict, n_images: int) -> dict:
    from firebench_cost import imported_config

    raw, corpus, imgs = imported_config(tmp, toml, n_images)
    distinct(corpus, imgs["image_id"].to_list())
    raw["paths"]["rights_map"] = None
    for st in ("vision", "judge"):
        ad = raw[st]["adapter"]
        raw[st][ad] = {**raw[st].get(ad, {}), **net, "prompt_cache_key": True}
    return raw


def one(name: str, mode: str, lengths, pilot: int | None, toml: Path | None, n_images: int) -> dict[str, dict]:
    import fake_gemini
    import fake_openai
    from estimate_bill import STAGES, measure

    provider = "gemini" if name == "gemini" else "openai"
    mod = fake_gemini if provider == "gemini" else fake_openai
    fake = mod.start()
    fake.count_tokens, fake.lengths = True, lengths
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            net = {"base_url": fake.base_url, "mode": mode, "concurrency": 4}
            if name == "firebench":
                raw = firebench(tmp, toml, net, n_images)
            elif provider == "gemini":
                raw = example(tmp, "gemini", {**net, "model": "gemini-2.5-flash", "image_detail": "auto"})
            else:
                raw = example(tmp, "openai", {**net, "model": "gpt-5-mini"})
            res = measure(raw, tmp, pilot=pilot)
            if pilot:    # the stage's whole figure after its pilot against its whole bill
                for st in STAGES:
                    x = res.pop(f"{st} after pilot")
                    e = {**x["estimate"], **{k: x["estimate"][f"total_{k}"] for k in ("usd", "low_usd", "high_usd")}}
                    for k in ("requests", "input_tokens", "cached_input_tokens", "output_tokens"):
                        e[k] += e["pilot"][k]
                    res[f"{st} after {e['pilot']['requests']}"] = {"estimate": e, "bill": res.pop(st)["bill"]}
            return res
    finally:
        mod.stop(fake)


def within(name: str, seed: int):
    """A model drawn within the range's reasoning assumption (estimate.REASONING_SEEN: a mean between the
    least and the most seen at each effort, a spread up to 0.29), as the provider is sent the effort."""
    from support import LengthModel

    from benchmaker.estimate import REASONING_SEEN

    efforts = {"low": "budget 1024", "medium": "budget 8192"} if name == "gemini" else {}
    return LengthModel.within(seed, {efforts.get(e, e): band for e, band in REASONING_SEEN.items()})


def coverage(rows: list[tuple[str, str, dict]]) -> list[str]:
    """Per config, mode and stage: how many bills were inside the range, and its widest high / low."""
    from collections import defaultdict

    got: dict[tuple[str, str], list[tuple[bool, float]]] = defaultdict(list)
    for key, st, x in rows:
        e, b = x["estimate"], x["bill"]
        got[(key, st)].append((e["low_usd"] - 5e-7 <= b["usd"] <= e["high_usd"] + 5e-7,
                               e["high_usd"] / max(e["low_usd"], 1e-12)))
    return [f"{key:10} {st:9} inside {sum(i for i, _ in v)} of {len(v)}, high / low at most {max(w for _, w in v):.2f}"
            for (key, st), v in got.items()]


def main() -> None:
    from estimate_bill import HEADER, table
    from support import LengthModel

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("toml", type=Path, nargs="?",
                    help="FireBenchMaker/config.toml of waggle-sensor/imsearch_benchmarks")
    ap.add_argument("--images", type=int, default=120, help="generated images for the FireBench config")
    ap.add_argument("--seeds", type=int, default=3, help="drawn models per config and mode for the pilot")
    ap.add_argument("--pilot", type=int, default=20, help="pilot requests per stage")
    ap.add_argument("--within", type=int, default=5,
                    help="models drawn within the range's reasoning assumption per config and mode (no pilot)")
    a = ap.parse_args()
    import fake_gemini

    os.environ["OPENAI_API_KEY"] = "sk-test"
    os.environ["GEMINI_API_KEY"] = fake_gemini.KEY
    configs = ["example", "gemini"] + (["firebench"] if a.toml else [])
    lines, ranges = [], []
    for name in configs:
        for mode in ("sync", "batch"):
            key = f"{name[:4]}-{mode[0]}"
            models = [(f"model {seen}", LengthModel(7, means=means, spread=0.3)) for seen, means in SEEN.items()]
            models += [(f"within {w}", within(name, w)) for w in range(a.within)]
            for label, lengths in models:
                res = one(name, mode, lengths, None, a.toml, a.images)
                ranges += [(key, st, x) for st, x in res.items()]
                lines += [f"{ln} range, {label}" for ln in table(key, res)]
                print(lines[-1], flush=True)
            for seed in range(a.seeds):
                lengths = LengthModel.drawn(100 + seed)
                lines += [f"{ln} pilot, {lengths!r}" for ln in table(key, one(name, mode, lengths, a.pilot, a.toml,
                                                                              a.images))]
                print(lines[-1], flush=True)
    print(HEADER)
    print("\n".join(lines))
    print("\nbefore any pilot (models seen and models drawn within the range's assumption):")
    print("\n".join(coverage(ranges)))


if __name__ == "__main__":
    main()

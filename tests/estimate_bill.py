"""``benchmaker estimate`` against the bill of a token-counting fake provider, per stage: the harness
of tests/test_estimate_bill.py and benchmarks/estimate_vs_bill.py.

1. ``estimate(cfg)`` before anything has run: vision from the inspection of ``image_root`` (what
   preprocess will accept), the judge from the ``plan`` settings (queries x candidates, annotation
   rows of typical length).
2. The vision stage runs (the real runner and SDK, sync) against the fake, which counts tokens as
   the provider documents (tests/fake_openai.py, tests/fake_gemini.py) and answers with a model's
   typical answer length (support.typical_answer). The bill is the cost rows of the run: the fake's
   usage at the config's prices.
3. The judge runs on a plan of the shape the ``plan`` settings give, over the real annotations.

``pilot`` (a fraction): the first part of the images is annotated first; the vision estimate is
then made again (calibrated on those cached answers) and compared with the bill of the rest.

The model's reasoning tokens are the one thing no estimate can know in advance: ``reasoning`` is the
factor by which the fake model reasons more than the allowance assumes (per request, varying
+-30 % around it).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

_GEMINI_EFFORT = {0: "minimal", 128: "minimal", 1024: "low", 8192: "medium", 24576: "high"}


def _jitter(body: Any) -> float:
    h = hashlib.sha1(repr(body).encode()).digest()
    return 0.7 + 0.6 * h[0] / 255


def reasoning_model(provider: str, factor: float):
    """A fake model's reasoning tokens per request: the allowance for the request's effort x ``factor``,
    +-30 %."""
    from benchmaker.providers.tokens import REASONING_OUTPUT

    if provider == "gemini":
        def gemini(req: dict) -> int:
            th = (req.get("generationConfig") or {}).get("thinkingConfig") or {}
            budget = th.get("thinkingBudget", th.get("thinking_budget"))
            effort = _GEMINI_EFFORT.get(budget) if budget is not None else None
            return round(REASONING_OUTPUT.get(effort, 0) * factor * _jitter(req.get("contents")))
        return gemini

    def openai(body: dict) -> int:
        effort = (body.get("reasoning") or {}).get("effort") or body.get("reasoning_effort")
        return round(REASONING_OUTPUT.get(effort, 0) * factor * _jitter(body.get("input") or body.get("messages")))
    return openai


def _bill(rows: list[dict]) -> dict:
    return {"usd": sum(r["cost_usd"] for r in rows), "input_tokens": sum(r["input_tokens"] for r in rows),
            "cached_input_tokens": sum(r["cached_input_tokens"] for r in rows),
            "output_tokens": sum(r["output_tokens"] for r in rows), "requests": sum(not r["cached"] for r in rows)}


def measure(raw: dict, tmp: Path, *, pilot: float = 0.0) -> dict[str, dict]:
    """{stage: {"estimate": line, "bill": totals}} for ``raw`` (a config mapping whose API settings
    already point at a fake); with ``pilot``, also "vision_after_pilot"."""
    import polars as pl

    from benchmaker.config import load_config, results_dir
    from benchmaker.estimate import _images, estimate
    from benchmaker.formats import FacetModel
    from benchmaker.judge.openai import judge_items, merged_settings
    from benchmaker.losses import Losses
    from benchmaker.providers.runners import provider_runner
    from benchmaker.providers.settings import query_settings
    from benchmaker.queries.openai import query_items, writer_settings
    from benchmaker.vision.openai import vision_items

    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(str(path))
    fm = FacetModel.from_config(cfg["facets"])
    results = Path(results_dir(cfg))
    cache = Path(cfg["paths"]["results"]) / ".cache"
    before = {ln["stage"]: ln for ln in estimate(cfg)}
    out: dict[str, dict] = {}

    ad = cfg["vision"]["adapter"]
    imgs = _images(cfg, results)[0]
    runner = provider_runner(ad, stage="vision", item_type="image", settings=cfg["vision"][ad],
                             cache_dir=str(cache / "vision"))
    items = list(vision_items(imgs, fm, runner.settings, cfg["paths"]["image_root"]))
    answers: dict[str, dict] = {}
    if pilot:
        k = max(1, round(len(items) * pilot))
        answers.update(runner.run_sync(items[:k], Losses("vision")))
        after = {ln["stage"]: ln for ln in estimate(load_config(str(path)))}["vision"]
        n_pilot = len(runner.cost_rows)
        answers.update(runner.run_sync(items, Losses("vision")))
        out["vision_after_pilot"] = {"estimate": after, "bill": _bill(
            [r for r in runner.cost_rows[n_pilot:] if not r["cached"]])}
    else:
        answers.update(runner.run_sync(items, Losses("vision")))
    out["vision"] = {"estimate": before["vision"], "bill": _bill([r for r in runner.cost_rows if not r["cached"]])}

    ad = cfg["judge"]["adapter"]
    if ad not in ("openai", "gemini"):
        return out
    ann = pl.DataFrame([{"image_id": i, **a} for i, a in answers.items()])
    ids = sorted(answers)
    p = cfg["plan"]
    n_seed = int(p["seeds_per_query"])
    n_c = n_seed + int(p["pos_total"]) + int(p["neutral_total"]) + int(p["neg_total"])
    plan = pl.DataFrame([{"query_id": f"q{q:04d}", "seed_image_ids": [ids[(q + j) % len(ids)] for j in range(n_seed)],
                          "candidates": [{"image_id": ids[(q + j) % len(ids)], "pool": "x", "reason": "x"}
                                         for j in range(n_c)]}
                         for q in range(int(p["num_seeds"]))])
    # the queries stage: one request per query from its seed alone, on the judge's adapter
    ws = writer_settings(query_settings(cfg["queries"], cfg["judge"]))
    wrunner = provider_runner(ad, stage="queries", item_type="query", settings=ws, cache_dir=str(cache / "queries"))
    witems = list(query_items(plan, ann, imgs, fm, wrunner.settings, cfg["paths"]["image_root"], Losses("queries")))
    written = wrunner.run_sync(witems, Losses("queries"))
    out["queries"] = {"estimate": before["queries"], "bill": _bill([r for r in wrunner.cost_rows if not r["cached"]])}
    plan = plan.with_columns(pl.col("query_id").replace_strict({q: a["query_text"] for q, a in written.items()})
                             .alias("query_text"),
                             pl.col("query_id").replace_strict({q: a["narrative"] for q, a in written.items()})
                             .alias("narrative"))
    js = merged_settings({**cfg["judge"][ad], "labels": cfg["judge"]["labels"], "rationale": cfg["judge"]["rationale"]})
    runner = provider_runner(ad, stage="judge", item_type="query", settings=js, cache_dir=str(cache / "judge"))
    jitems = [it for it, _ in judge_items(plan, ann, imgs, fm, runner.settings, cfg["paths"]["image_root"],
                                          Losses("judge"))]
    runner.run_sync(jitems, Losses("judge"))
    out["judge"] = {"estimate": before["judge"], "bill": _bill([r for r in runner.cost_rows if not r["cached"]])}
    return out


def table(name: str, res: dict[str, dict]) -> list[str]:
    lines = []
    for st, x in res.items():
        e, b = x["estimate"], x["bill"]
        lines.append(f"{name:10} {st:19} {e['requests']:>4} {b['requests']:>4} "
                     f"{e['input_tokens']:>8} {b['input_tokens']:>8} {e['cached_input_tokens']:>8} "
                     f"{b['cached_input_tokens']:>8} {e['output_tokens']:>7} {b['output_tokens']:>7} "
                     f"{e['usd']:>9.6f} {b['usd']:>9.6f} {e['usd'] / b['usd'] - 1:>+7.1%}")
    return lines


HEADER = (f"{'config':10} {'stage':19} {'req':>4} {'bill':>4} {'in est':>8} {'in bill':>8} {'cch est':>8} "
          f"{'cch bill':>8} {'out est':>7} {'out bil':>7} {'USD est':>9} {'USD bill':>9} {'error':>7}")

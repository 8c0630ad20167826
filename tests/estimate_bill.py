"""``benchmaker estimate`` against the bill of a token-counting fake provider, per stage: the harness
of tests/test_estimate_bill.py and benchmarks/estimate_vs_bill.py.

The run is the stages' own functions, as the workflow's rules call them, on one shard: preprocess's
images (the estimate's inspection, written as ``images.jsonl``), ``vision.run`` (sync) or
``vision.openai`` build / submit / collect (batch), the planner (``plan.run``), the query writer
(``queries.run`` or its batch functions), then ``judge.run`` or the judge's batch functions, against
the fake, which counts tokens as the provider documents (tests/fake_openai.py, tests/fake_gemini.py)
and answers and reasons as its ``lengths`` model says
(support.LengthModel: seeded means and spreads the estimator is never told). The bill is the cost
files the run writes (the fake's usage at the config's prices).

1. ``estimate(cfg)`` before anything has run: the range and its point figure.
2. With ``pilot`` (requests per stage): ``estimate(cfg, pilot=...)`` sends vision's pilot; vision
   runs (reusing the pilot's answers); ``estimate(cfg, pilot=...)`` again: the queries are now
   planned by the planner on the annotations the run will have, the writer's pilot is sent, then the
   judge's (queries the pilot wrote); the writer and the judge run.
   Each stage's estimate after its pilot is compared with what the run then paid for that stage.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

STAGES = ("vision", "queries", "judge")


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def _bill(rows: list[dict]) -> dict:
    rows = [r for r in rows if not r["cached"]]
    return {"usd": sum(r["cost_usd"] for r in rows), "input_tokens": sum(r["input_tokens"] for r in rows),
            "cached_input_tokens": sum(r["cached_input_tokens"] for r in rows),
            "output_tokens": sum(r["output_tokens"] for r in rows), "requests": len(rows)}


def _batch(kw: dict) -> dict:
    return {**kw, "poll_seconds": 0.02, "wait": True}


def run_vision(cfg: dict, res: Path, cache: Path) -> list[dict]:
    """The vision stage on one shard (its rule functions); its cost rows."""
    from benchmaker.vision import openai as vo
    from benchmaker.vision import run

    ad = cfg["vision"]["adapter"]
    s = cfg["vision"][ad]
    common = {"settings": s, "facets": cfg["facets"], "image_root": cfg["paths"]["image_root"],
              "columns": cfg["columns"], "cache_dir": str(cache / "vision")}
    out = {"images": str(res / "images.jsonl"), "annotations": str(res / "annotations.jsonl")}
    costs = res / "costs" / "vision" / "all.jsonl"
    costs.parent.mkdir(parents=True, exist_ok=True)
    if s["mode"] == "batch":
        api, state = res / "api" / "vision", res / ".batches" / "vision" / "all"
        api.mkdir(parents=True, exist_ok=True)
        vo.build(images=out["images"], requests=str(api / "requests.jsonl"), manifest=str(api / "manifest.jsonl"),
                 adapter=ad, **common)
        vo.submit(requests=str(api / "requests.jsonl"), submitted=str(api / "submitted.json"), settings=_batch(s),
                  state_dir=str(state), benchmark=cfg["benchmark"]["name"], cache_dir=common["cache_dir"], adapter=ad)
        vo.collect(manifest=str(api / "manifest.jsonl"), submitted=str(api / "submitted.json"),
                   losses=str(res / "losses" / "vision.jsonl"), costs=str(costs), state_dir=str(state),
                   benchmark=cfg["benchmark"]["name"], adapter=ad, **{**common, "settings": _batch(s)},
                   images=out["images"], annotations=out["annotations"])
    else:
        run(**out, losses=str(res / "losses" / "vision.jsonl"), adapter=ad, costs=str(costs), **common)
    return _rows(costs)


def run_plan(cfg: dict, res: Path) -> None:
    """The plan (the planner's own code)."""
    from benchmaker.plan import run as plan

    paths = cfg["paths"]
    plan(annotations=str(res / "annotations.jsonl"), images=str(res / "images.jsonl"),
         plan=str(res / "query_plan.jsonl"), losses=str(res / "losses" / "plan.jsonl"), settings=cfg["plan"],
         facets=cfg["facets"], benchmark_name=cfg["benchmark"]["name"], columns=cfg["columns"],
         seeds_file=None if paths.get("pools_file") else paths.get("seeds_file"), pools_file=paths.get("pools_file"))


def run_queries(cfg: dict, res: Path, cache: Path) -> list[dict]:
    """The query writer (its rule functions) on the plan; its cost rows."""
    from benchmaker.providers.settings import query_settings
    from benchmaker.queries import openai as qo
    from benchmaker.queries import run

    paths, ad = cfg["paths"], cfg["judge"]["adapter"]
    s = query_settings(cfg["queries"], cfg["judge"])
    files = {"plan": str(res / "query_plan.jsonl"), "annotations": str(res / "annotations.jsonl"),
             "images": str(res / "images.jsonl")}
    common = {"facets": cfg["facets"], "image_root": paths["image_root"], "columns": cfg["columns"],
              "cache_dir": str(cache / "queries"), "adapter": ad, "reuse": paths.get("judge_reuse_file"),
              "reuse_labels": cfg["judge"]["labels"] if paths.get("judge_reuse_file") else None}
    costs = res / "costs" / "queries.jsonl"
    out = {"queries": str(res / "queries.jsonl"), "losses": str(res / "losses" / "queries.jsonl")}
    if s["mode"] == "batch":
        api, state = res / "api" / "queries", res / ".batches" / "queries" / "all"
        api.mkdir(parents=True, exist_ok=True)
        qo.build(**files, requests=str(api / "requests.jsonl"), manifest=str(api / "manifest.jsonl"), settings=s,
                 **common)
        qo.submit(requests=str(api / "requests.jsonl"), submitted=str(api / "submitted.json"), settings=_batch(s),
                  state_dir=str(state), benchmark=cfg["benchmark"]["name"], cache_dir=common["cache_dir"], adapter=ad)
        qo.collect(**files, **out, manifest=str(api / "manifest.jsonl"), submitted=str(api / "submitted.json"),
                   costs=str(costs), settings=_batch(s), state_dir=str(state), benchmark=cfg["benchmark"]["name"],
                   **common)
    else:
        run(**files, **out, settings=s, costs=str(costs), **common)
    return _rows(costs)


def run_judge(cfg: dict, res: Path, cache: Path) -> list[dict]:
    """The judge (its rule functions) on the plan and the written queries; its cost rows."""
    from benchmaker.judge import openai as jo
    from benchmaker.judge import run
    from benchmaker.providers.settings import judge_settings

    paths = cfg["paths"]
    ad = cfg["judge"]["adapter"]
    s = judge_settings(cfg["judge"])
    files = {"plan": str(res / "query_plan.jsonl"), "queries": str(res / "queries.jsonl"),
             "annotations": str(res / "annotations.jsonl"), "images": str(res / "images.jsonl")}
    common = {"facets": cfg["facets"], "image_root": paths["image_root"], "columns": cfg["columns"],
              "cache_dir": str(cache / "judge"), "adapter": ad, "reuse": paths.get("judge_reuse_file")}
    costs = res / "costs" / "judge.jsonl"
    if cfg["judge"][ad]["mode"] == "batch":
        api, state = res / "api" / "judge", res / ".batches" / "judge" / "all"
        api.mkdir(parents=True, exist_ok=True)
        sb = {**s, "adapter_settings": _batch(s["adapter_settings"])}
        jo.build(**files, requests=str(api / "requests.jsonl"), manifest=str(api / "manifest.jsonl"), settings=s,
                 **common)
        jo.submit(requests=str(api / "requests.jsonl"), submitted=str(api / "submitted.json"), settings=sb,
                  state_dir=str(state), benchmark=cfg["benchmark"]["name"], cache_dir=common["cache_dir"], adapter=ad)
        jo.collect(**files, manifest=str(api / "manifest.jsonl"), submitted=str(api / "submitted.json"),
                   qrels=str(res / "qrels.jsonl"), losses=str(res / "losses" / "judge.jsonl"), costs=str(costs),
                   settings=sb, state_dir=str(state), benchmark=cfg["benchmark"]["name"], **common)
    else:
        run(**files, qrels=str(res / "qrels.jsonl"), losses=str(res / "losses" / "judge.jsonl"), settings=s,
            costs=str(costs), **common)
    return _rows(costs)


def measure(raw: dict, tmp: Path, *, pilot: int | None = None) -> dict[str, dict]:
    """{stage: {"estimate": line before anything, "bill": the stage's whole bill (pilot included)}};
    with ``pilot``, also {"<stage> after pilot": {"estimate": line after its pilot, "bill": what the
    run then paid for the stage}, with the pilot's own spend under "pilot"}."""
    from benchmaker.config import load_config, results_dir
    from benchmaker.estimate import _images, estimate
    from benchmaker.formats import write_table

    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(str(path))
    res = Path(results_dir(cfg))
    cache = Path(cfg["paths"]["results"]) / ".cache"
    before = {ln["stage"]: ln for ln in estimate(cfg)}
    out: dict[str, dict] = {}
    spent: list[dict] = []
    after: dict[str, dict] = {}
    if pilot:
        after["vision"] = {ln["stage"]: ln for ln in estimate(cfg, pilot=pilot, on_pilot=spent.extend)}["vision"]
    res.mkdir(parents=True, exist_ok=True)
    write_table(_images(cfg, res)[0], "images", str(res / "images.jsonl"), columns=cfg["columns"])
    bills = {"vision": run_vision(cfg, res, cache)}
    if cfg["judge"]["adapter"] in ("openai", "gemini"):
        run_plan(cfg, res)
        if pilot:
            lines = {ln["stage"]: ln for ln in estimate(cfg, pilot=pilot, on_pilot=spent.extend)}
            after |= {st: lines[st] for st in ("queries", "judge")}
        bills["queries"] = run_queries(cfg, res, cache)
        bills["judge"] = run_judge(cfg, res, cache)
    for st, rows in bills.items():
        mine = [r for r in spent if r["stage"] == st]
        out[st] = {"estimate": before[st], "bill": _bill(rows + mine)}
        if st in after:
            out[f"{st} after pilot"] = {"estimate": after[st], "bill": _bill(rows), "pilot": _bill(mine)}
    return out


def table(name: str, res: dict[str, dict]) -> list[str]:
    lines = []
    for st, x in res.items():
        e, b = x["estimate"], x["bill"]
        # the line's figures are rounded to 6 decimals (USD): inside within that rounding
        inside = "yes" if e["low_usd"] - 5e-7 <= b["usd"] <= e["high_usd"] + 5e-7 else "NO"
        lines.append(f"{name:10} {st:19} {e['requests']:>4} {b['requests']:>4} "
                     f"{e['input_tokens']:>8} {b['input_tokens']:>8} {e['cached_input_tokens']:>8} "
                     f"{b['cached_input_tokens']:>8} {e['output_tokens']:>7} {b['output_tokens']:>7} "
                     f"{e['usd']:>9.6f} {b['usd']:>9.6f} {e['usd'] / max(b['usd'], 1e-12) - 1:>+7.1%} "
                     f"{e['low_usd']:>9.6f} {e['high_usd']:>9.6f} {e['high_usd'] / max(e['low_usd'], 1e-12):>5.2f} "
                     f"{inside:>4}")
    return lines


HEADER = (f"{'config':10} {'stage':19} {'req':>4} {'bill':>4} {'in est':>8} {'in bill':>8} {'cch est':>8} "
          f"{'cch bill':>8} {'out est':>7} {'out bil':>7} {'USD est':>9} {'USD bill':>9} {'error':>7} "
          f"{'low':>9} {'high':>9} {'h/l':>5} {'in?':>4}")

"""The paid stages' entries of ``benchmaker estimate`` (the package's doc): one function per stage of
:data:`benchmaker.stages.STAGES` with a cost file (:data:`PAID`), or why it is not priced
(:data:`NOT_ESTIMATED`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..providers.tokens import _typical_row
from ..stages import STAGES
from .core import API_ADAPTERS, _Stage
from .requests import (
    Context,
    _annotations,
    _queries_stage,
    _query_items,
    _quota_pools,
    _typical_image,
    _vision_stage,
    _with_written_queries,
    judge_requests,
    pools_file_todo,
)


def _estimate_queries(ctx: Context) -> list[tuple[_Stage, dict]]:
    """The query writer (``queries`` stage): one request per planned query that ``paths.judge_reuse_file``
    does not fully label, each with its seeds' pixels at low detail and their annotation rows. The
    planner's plan once every image's annotation is known (the exact requests and cache keys), else
    stand-ins from ``paths.pools_file`` or the plan quotas with typical rows."""
    from ..queries.prompts import query_spec

    st = _queries_stage(ctx)
    if st is None:
        return []
    ann, complete = _annotations(ctx)
    if complete:
        plan, todo, items = _query_items(ctx, st, ann)
        for it in items:
            st.add(it.spec, item=it)
        return [(st, {"source": f"the planner's plan ({plan.height} queries) over the annotations the run will "
                                "have", "reused": plan.height - todo.height})]
    if ctx.cfg["paths"].get("pools_file"):
        rows, todo_rows = pools_file_todo(ctx.cfg, ctx.cfg["judge"]["labels"] == "graded")
        todo = [(q, n) for q, _ids, n in todo_rows]
        n_all, source = len(rows), f"paths.pools_file ({len(rows)} queries, typical annotation rows)"
    else:
        n_q, n_seed, _per, why, _low = _quota_pools(ctx)
        todo = [(f"q{q}", n_seed) for q in range(n_q)]
        n_all, source = n_q, f"plan quotas ({n_q} queries x {n_seed} seed(s){why}, typical annotation rows)"
    for k, (qid, n_seed) in enumerate(todo):
        seeds = [_typical_row(ctx.fm, k * 100 + j) for j in range(max(1, n_seed))]
        st.add(query_spec(seed_rows=seeds, seed_images=[_typical_image(f"{qid}/{r['image_id']}") for r in seeds],
                          meta_row={}, fm=ctx.fm, settings=st.s), check_cache=False)
    return [(st, {"source": source, "reused": n_all - len(todo)})]


def _labelling_modes(ctx: Context, s: Mapping[str, Any]) -> dict:
    """The judge's requests priced in both labelling modes (``send_thumbnails``: text-only, or with
    each candidate's image at the judge's ``image_detail``), whatever the cache holds: what labelling
    with images would add (docs/judge-rules.md, "Method")."""
    out = {}
    for mode, images in (("text_only", False), ("with_images", True)):
        st = _Stage("judge", ctx.cfg["judge"]["adapter"], {**s, "send_thumbnails": images}, None, item_type="query")
        req = judge_requests(ctx, st.s)
        st.pool_fill = req.pool_fill
        for spec, n, _item, fixed in req.specs:
            st.add(spec, n, check_cache=False, fixed=fixed)
        ln = st.line()
        out[mode] = {k: ln[k] for k in ("requests", "input_tokens", "cached_input_tokens", "output_tokens", "usd")}
    return out


def _judge_settings(judge: Mapping[str, Any]) -> tuple[str, dict]:
    ad = judge["adapter"]
    return ad, {**judge.get(ad, {}), "labels": judge["labels"], "rationale": judge["rationale"]}


# -- the paid stages: one entry each (benchmaker.stages.STAGES names) ------------------------------------
def _estimate_vision(ctx: Context) -> list[tuple[_Stage, dict]]:
    from ..vision.openai import vision_items

    st = _vision_stage(ctx)
    if st is None:
        return []
    imgs, source, n_quar = ctx.images()
    for it in vision_items(imgs, ctx.fm, st.s, ctx.cfg["paths"]["image_root"]):
        st.add(it.spec, item=it)
    return [(st, {"source": source, "quarantined": n_quar})]


def _estimate_judge(ctx: Context) -> list[tuple[_Stage, dict]]:
    ad, s = _judge_settings(ctx.cfg["judge"])
    if ad not in API_ADAPTERS:
        return []
    st = _Stage("judge", ad, s, f"{ctx.cache_root}/judge", item_type="query")
    req = judge_requests(ctx, st.s)
    st.pool_fill = req.pool_fill
    for spec, n, item, fixed in req.specs:
        st.add(spec, n, check_cache=req.real, item=item, fixed=fixed)
    return [(st, {"source": req.source, "reused": req.reused, "labelling_modes": _labelling_modes(ctx, s)})]


def _estimate_deepen(ctx: Context) -> list[tuple[_Stage, dict]]:
    """Pool deepening: the same judge, cache and prices (docs/deepen.md), with its budgets checked."""
    dp = ctx.cfg.get("deepen") or {}
    ad, s = _judge_settings(ctx.cfg["judge"])
    if not dp.get("enabled") or ad not in API_ADAPTERS:
        return []
    from ..deepen.label import estimate_specs

    st = _Stage("deepen", ad, s, f"{ctx.cache_root}/judge", item_type="query")
    specs, source, pairs, real = estimate_specs(ctx.cfg, ctx.fm, st.s, ctx.results)
    for spec, n in specs:
        st.add(spec, n, check_cache=real)
    usd = st.line()["usd"]
    ok = ((dp.get("max_pairs") is None or pairs <= dp["max_pairs"])
          and (dp.get("max_usd") is None or usd <= dp["max_usd"]))
    return [(st, {"source": source, "pairs": pairs, "max_pairs": dp.get("max_pairs"), "max_usd": dp.get("max_usd"),
                  "within_budget": ok})]


def _estimate_second_judge(ctx: Context) -> list[tuple[_Stage, dict]]:
    """The audit's second judge (``audit.second_judge``), when it is an API judge: priced like the
    judge, on the audit sample's pairs (scope ``sample``: the real sample once drawn, else
    ``audit.sample_size`` pairs) or on every query (scope ``all``), with its own response cache."""
    from ..settings_schema import filled

    cfg = ctx.cfg
    audit = filled("audit", cfg.get("audit"))
    sj = audit.get("second_judge") or {}
    if not audit.get("enabled") or sj.get("judge") is None:
        return []
    from ..config import deep_merge, validate_config

    judge = validate_config(deep_merge({k: v for k, v in cfg.items() if not str(k).startswith("_")},
                                       {"judge": sj["judge"]}))["judge"]
    ad, s = _judge_settings(judge)
    if ad not in API_ADAPTERS:
        return []
    st = _Stage("audit_judge2", ad, {**s, "mode": "sync"}, f"{ctx.cache_root}/judge-audit/{sj['name']}",
                item_type="query")
    req = judge_requests(ctx, st.s)
    st.pool_fill = req.pool_fill
    sample_p = ctx.results / "audit" / "sample.jsonl"
    if sj["scope"] != "sample":
        for spec, n, item, fixed in req.specs:
            st.add(spec, n, check_cache=req.real, item=item, fixed=fixed)
        return [(st, {"source": req.source, "reused": 0})]
    if req.real and sample_p.exists():
        from ..audit.files import read_sample
        from ..audit.judge2 import restrict_plan
        from ..judge.openai import judge_items
        from ..losses import Losses

        plan, written = _with_written_queries(ctx, restrict_plan(ctx.memo["plan"], read_sample(str(sample_p))))
        for it, keys in judge_items(plan, _annotations(ctx)[0], ctx.images()[0], ctx.fm, st.s,
                                    cfg["paths"]["image_root"], Losses("judge")):
            st.add(it.spec, len(keys), item=it if it.item_id in written else None)
        return [(st, {"source": "audit/sample.jsonl (the sampled pairs)", "reused": 0})]
    # before the sample: audit.sample_size pairs, spread over queries as the judge's pools are
    budget = int(audit["sample_size"])
    for spec, n, _item, _fixed in req.specs:
        if budget <= 0:
            break
        take = min(n, budget)
        st.add(spec, take, check_cache=False)
        budget -= take
    return [(st, {"source": f"audit.sample_size ({audit['sample_size']} pairs) over {req.source}", "reused": 0})]


# stage (benchmaker.stages.STAGES) -> its estimate: the (accumulated stage, extra line fields) it prices.
# A paid stage plugs in here: build its requests as the run does (its own items function) and add each to
# a _Stage with its item (``item=``: what a pilot sends); a stage with a cost file that is not priced is
# in NOT_ESTIMATED: its declaration says why (``Stage(not_estimated=...)``; tests/test_estimate_bill.py checks
# that every one is in one of the two).
PAID: dict[str, Callable[[Context], list[tuple[_Stage, dict]]]] = {
    "vision": _estimate_vision,
    "queries": _estimate_queries,       # before the judge: its pilot's texts are the judge's queries
    "judge": _estimate_judge,
    "deepen_system": _estimate_deepen,
    "audit_judge2": _estimate_second_judge,
}
NOT_ESTIMATED = {name: st.not_estimated for name, st in STAGES.items() if st.not_estimated}


def not_priced(cfg: Mapping[str, Any]) -> list[str]:
    """One line per configured paid request maker that the estimate leaves out (:data:`NOT_ESTIMATED`):
    today the rerank systems of ``evaluate.systems``, which call their provider once per query. Printed
    with the estimate, so that its total (or "nothing to pay") is never read as the whole bill."""
    from ..evaluate_settings import check_systems, system_settings

    out = []
    for s in check_systems(cfg.get("evaluate") or {}):
        if s.get("kind") == "rerank":
            s = system_settings(s)
            out.append(f"evaluate: {s['name']} (rerank by {s['provider']}, top {s['k']} per query) is not priced "
                       f"here: {NOT_ESTIMATED['evaluate_system']}; its spend is written to "
                       f"costs/evaluate/{s['name']}.jsonl")
    return out

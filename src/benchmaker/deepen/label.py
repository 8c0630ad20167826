"""Rule ``deepen_system``: the judge labels the pairs that one system brings into the pools.

The pairs come from :mod:`.pairs` (the same assignment in every job). They are judged by the
configured judge adapter with its own settings, prompts (the published query text and narrative,
as the judge labelled the pools under them), response cache (``.cache/judge``:
a request already answered is never paid again), crash-safe cost ledger and mode (sync, or the
provider's Batch API in one resumable job). One request per query holds the query's seeds and this
system's new candidates. Output: ``deepen/labels/<system>.jsonl`` (docs/deepen.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from ..evaluate_settings import deepen_systems
from ..formats import FacetModel, read_table, write_table
from ..logs import get_logger
from ..losses import Losses
from ..settings_schema import filled
from ..table_blocks import read_table_where
from .pairs import assign, cap_by_cost, read_group_members, run_paths, system_tops

__all__ = ["run", "plan_for", "assigned_pairs", "pair_costs", "estimate_specs", "LABEL_COLUMNS"]

log = get_logger("deepen")
# the length of a written narrative, for estimates made before the queries exist
TYPICAL_NARRATIVE = ("A relevant image shows the query's subject as its main content, clearly visible; an image "
                     "that shows it only as a background detail is not relevant.")
LABEL_COLUMNS = ("query_id", "image_id", "relevance_label", "judge", "system", "depth")


def plan_for(plan: pl.DataFrame, pairs: pl.DataFrame, qrels: pl.DataFrame) -> pl.DataFrame:
    """query_plan rows for ``pairs`` (query_id, image_id, depth): the query's seeds, profile and
    published text and narrative (``query_text``, ``narrative``: null for a query imported without
    one), its candidates = only the new images (pool ``deepen``), in depth order."""
    if not pairs.height:
        return plan.clear().with_columns(pl.lit(None, pl.String).alias("query_text"),
                                         pl.lit(None, pl.String).alias("narrative"))
    cands = (
        pairs.sort(["query_id", "depth", "image_id"])
        .with_columns(pl.struct(pl.col("image_id"), pl.lit("deepen").alias("pool"),
                                pl.format("depth {}", pl.col("depth")).alias("reason")).alias("c"))
        .group_by("query_id", maintain_order=True)
        .agg(pl.col("image_id").alias("candidate_image_ids"), pl.col("c").alias("candidates"))
    )
    narrative = pl.col("narrative") if "narrative" in qrels.columns else pl.lit(None, pl.String).alias("narrative")
    texts = qrels.select("query_id", "query_text", narrative).unique("query_id", keep="first")
    base = plan.drop("candidate_image_ids", "candidates")
    out = base.join(cands, on="query_id", how="inner").join(texts, on="query_id", how="inner")
    return out.cast({"candidates": plan.schema["candidates"]}).sort("query_id")


def assigned_pairs(*, qrels: pl.DataFrame, runs: Mapping[str, str], k: int, max_pairs: int | None,
                   groups: pl.DataFrame | None = None) -> pl.DataFrame:
    """Every deepen system's holes with owner and contributors (before the dollar cap); ``groups``
    (:func:`.pairs.read_group_members`): one member per duplicate group and query."""
    queries = qrels["query_id"].unique().to_list()
    return assign(system_tops(runs, k, queries), qrels, max_pairs, groups=groups)


def pair_costs(assigned: pl.DataFrame, plan: pl.DataFrame, qrels: pl.DataFrame, ann: pl.DataFrame,
               imgs: pl.DataFrame, fm: FacetModel, settings: Mapping[str, Any], adapter: str,
               image_root: str) -> pl.DataFrame:
    """(query_id, image_id, usd): each pair's share of its request's estimated price (one request per
    query and owner; benchmaker estimate's token rules, no cache and no prompt-cache discount, so the
    cap does not depend on what the cache holds)."""
    from ..judge.openai import judge_items
    from ..providers.cost import Usage, cost_usd
    from ..providers.runners import provider_runner
    from ..providers.spec import estimate_input_tokens
    from ..providers.tokens import out_tokens

    runner = provider_runner(adapter, stage="deepen", item_type="query", settings=dict(settings), cache_dir=None)
    batch = runner.settings["mode"] == "batch"
    rows = []
    for name in assigned["system"].unique(maintain_order=True).to_list():
        mine = assigned.filter(pl.col("system") == name)
        for it, keys in judge_items(plan_for(plan, mine, qrels), ann, imgs, fm, runner.settings, image_root,
                                    Losses("deepen")):
            n = len(keys)
            usage = Usage(estimate_input_tokens(it.spec, runner.llm), 0,
                          out_tokens(it.spec.schema, runner.settings, n), 0)
            usd = cost_usd(usage, runner.price, batch=batch,
                           batch_discount=float(runner.settings["batch_discount"]))
            rows += [(it.item_id, image_id, usd / n) for image_id in keys]
    return pl.DataFrame(rows, schema={"query_id": pl.String, "image_id": pl.String, "usd": pl.Float64}, orient="row")


def _judge(adapter: str, plan: pl.DataFrame, ann: pl.DataFrame, imgs: pl.DataFrame, fm: FacetModel,
           settings: Mapping[str, Any], *, image_root: str, cache_dir: str | None, ledger: str | None,
           batch_dir: str | None, benchmark: str, threads: int, losses: Losses) -> tuple[pl.DataFrame, str, Any]:
    """(labels frame, judge name, runner or None) from the configured adapter, sync or batch."""
    from ..judge.base import get_judge

    judge = get_judge(adapter, facets=fm, settings=dict(settings), image_root=image_root, cache_dir=cache_dir,
                      threads=threads)
    runner = getattr(judge, "runner", None)
    name = getattr(judge, "name", adapter)
    if runner is None:                       # the offline rules judge
        return (judge.judge(plan, ann, imgs, losses) if plan.height else pl.DataFrame()), name, None
    runner.stage = "deepen"                  # its cost rows count as deepening in the totals
    if ledger:
        from ..providers.records import attach_ledger

        attach_ledger(runner, ledger)
    try:
        if runner.settings["mode"] != "batch":
            return (judge.judge(plan, ann, imgs, losses) if plan.height else pl.DataFrame()), name, runner
        from ..judge.openai import answers_to_frame, judge_items
        from ..providers.batch import run_batch

        pairs = list(judge_items(plan, ann, imgs, fm, runner.settings, image_root, losses))
        if batch_dir is None:
            raise ValueError("deepen: batch mode needs a batch state folder (batch_dir)")
        answers = run_batch(runner, [it for it, _ in pairs], losses, state_dir=batch_dir,
                            wait=bool(runner.settings["wait"]),
                            poll_seconds=float(runner.settings["poll_seconds"]),
                            benchmark=benchmark) if pairs else {}
        return (answers_to_frame(answers, {it.item_id: kk for it, kk in pairs}, name,
                                 bool(runner.settings.get("rationale"))), name, runner)
    finally:
        if runner.ledger is not None:
            runner.ledger.close()


def run(*, qrels: str, plan: str, annotations: str, images: str, runs: Sequence[str] | str, system: str,
        labels: str, losses: str, costs: str, adapter: str, settings: Mapping[str, Any],
        deepen: Mapping[str, Any], facets: Mapping[str, Any], image_root: str, columns: Mapping[str, str],
        cache_dir: str | None = None, ledger: str | None = None, batch_dir: str | None = None,
        benchmark: str = "benchmaker", threads: int = 1, version: str | None = None) -> dict:
    """Stage ``deepen_system``: judge the pairs ``system`` owns; write its labels, losses and costs."""
    fm = FacetModel.from_config(facets)
    d = filled("deepen", deepen)
    systems = list(d["systems"])
    k = int(d["k"])
    q = read_table("qrels", qrels, columns=columns)
    plan_df = read_table("query_plan", plan, columns=columns)
    s = dict(settings)
    judge_settings = {**dict(s.pop("adapter_settings", {}) or {}), **s}
    graded = judge_settings.get("labels") == "graded"
    groups = read_group_members(images, columns=columns)
    assigned = assigned_pairs(qrels=q, runs=run_paths(runs, systems), k=k, max_pairs=d.get("max_pairs"),
                              groups=groups)
    seeds = plan_df.select(pl.col("seed_image_ids").explode())["seed_image_ids"].drop_nulls()
    used = pl.concat([seeds, assigned["image_id"]]).unique()
    ann = read_table_where("annotations", annotations, key="image_id", values=used, columns=columns, facets=fm)
    imgs = read_table_where("images", images, key="image_id", values=used, columns=columns)
    if d.get("max_usd") is not None and adapter in ("openai", "gemini"):
        before = assigned.height
        assigned = cap_by_cost(assigned, pair_costs(assigned, plan_df, q, ann, imgs, fm, judge_settings, adapter,
                                                    image_root), d["max_usd"])
        if assigned.height < before:
            log.warning("deepen: deepen.max_usd %.4f keeps %d of %d new pairs (shallowest first)",
                        float(d["max_usd"]), assigned.height, before)
    mine = assigned.filter(pl.col("system") == system)
    loss = Losses("deepen")
    sub = plan_for(plan_df, mine, q)
    log.info("deepen[%s]: %d new pairs in %d queries (k=%d; %d pairs over all %d systems)", system, mine.height,
             sub.height, k, assigned.height, len(systems))
    judged, name, runner = _judge(adapter, sub, ann, imgs, fm, judge_settings, image_root=image_root,
                                  cache_dir=cache_dir, ledger=ledger, batch_dir=batch_dir, benchmark=benchmark,
                                  threads=threads, losses=loss)
    max_label = 3 if graded else 1
    if judged.height:
        judged = judged.select("query_id", "image_id", pl.col("relevance_label").cast(pl.Int64),
                               *(["rationale"] if "rationale" in judged.columns else []),
                               pl.col("judge") if "judge" in judged.columns else pl.lit(name).alias("judge"))
    else:
        judged = pl.DataFrame(schema={"query_id": pl.String, "image_id": pl.String, "relevance_label": pl.Int64,
                                      "judge": pl.String})
    out = mine.join(judged, on=["query_id", "image_id"], how="left")
    lost_q = set(r["item_id"] for r in loss.rows if r["item_type"] == "query")
    bad = out.filter(pl.col("relevance_label").is_null() | (pl.col("relevance_label") < 0)
                     | (pl.col("relevance_label") > max_label))
    for qid, n in bad.group_by("query_id").len().sort("query_id").iter_rows():
        if qid not in lost_q:
            loss.add("query", qid, "incomplete_judgment", f"{n} new pair(s) without a valid label")
    bad_q = set(bad["query_id"].to_list()) | lost_q
    out = out.filter(~pl.col("query_id").is_in(sorted(bad_q)))
    keep = [c for c in ("rationale",) if c in out.columns and out[c].null_count() < out.height]
    out = out.select(*LABEL_COLUMNS, *keep).sort(["query_id", "depth", "image_id"])
    write_table(out, "deepen_labels", labels, columns=columns)
    loss.write(losses)
    from ..providers.records import write_costs

    write_costs(list(getattr(runner, "cost_rows", []) or []), costs, getattr(runner, "ledger", None))
    log.info("deepen[%s]: %d labels (%d relevant), %d losses", system, out.height,
             out.filter(pl.col("relevance_label") > 0).height, len(loss))
    return {"pairs": out.height}


def estimate_specs(cfg: Mapping[str, Any], fm: FacetModel, settings: Mapping[str, Any], results) -> tuple:
    """For ``benchmaker estimate``: (iterable of (request spec, candidates) to price, where they come
    from, new pairs, whether they are the real requests). From the real runs and qrels when every deepen
    system's run exists (the exact requests, before the budgets cut them); else an upper bound: every
    system's top k unjudged, one request per query and system with typical annotation rows."""
    from pathlib import Path

    from ..evaluate.systems import check_systems
    from ..judge.openai import judge_items
    from ..judge.prompts import candidate_keys, judge_spec
    from ..providers.tokens import _typical_row

    results = Path(results)
    d = filled("deepen", cfg.get("deepen"))
    systems = deepen_systems(d, check_systems(cfg.get("evaluate") or {}))
    k = int(d["k"])
    cols = cfg["columns"]
    runs = [results / "evaluate" / "runs" / f"{s}.trec" for s in systems]
    files = [results / f for f in ("qrels.jsonl", "query_plan.jsonl", "annotations.jsonl", "images.jsonl")]
    if systems and all(p.exists() for p in runs + files):
        q = read_table("qrels", files[0], columns=cols)
        plan_df = read_table("query_plan", files[1], columns=cols)
        assigned = assigned_pairs(qrels=q, runs=run_paths([str(p) for p in runs], systems), k=k, max_pairs=None,
                                  groups=read_group_members(str(files[3]), columns=cols))
        ann = read_table("annotations", files[2], columns=cols, facets=fm)
        imgs = read_table("images", files[3], columns=cols)

        def real():
            for name in systems:
                mine = assigned.filter(pl.col("system") == name)
                for it, keys in judge_items(plan_for(plan_df, mine, q), ann, imgs, fm, settings,
                                            cfg["paths"]["image_root"], Losses("deepen")):
                    yield it.spec, len(keys)

        return real(), "evaluate/runs + qrels.jsonl (the exact requests)", assigned.height, True
    n_q = int(cfg["plan"]["num_seeds"])
    if files[0].exists():
        n_q = read_table("qrels", files[0], columns=cols)["query_id"].n_unique()
    n_seed = int(cfg["plan"]["seeds_per_query"])

    def typical():
        for j, _name in enumerate(systems):
            for i in range(n_q):
                rows = [_typical_row(fm, (j * n_q + i) * (k + n_seed) + c) for c in range(k + n_seed)]
                qid = f"q{j}-{i}"     # each system's request of a query has its own candidates
                keys = candidate_keys(qid, [r["image_id"] for r in rows[n_seed:]])
                yield judge_spec(query_text=f"typical query {qid}", narrative=TYPICAL_NARRATIVE,
                                 candidates=rows[n_seed:], keys=keys, meta_row={}, fm=fm, settings=settings), k

    return (typical(), f"upper bound before the runs exist ({len(systems)} systems x {n_q} queries x top {k}, "
            "typical annotation rows)", len(systems) * n_q * k, False)

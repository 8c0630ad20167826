"""Judge stage: label every planned candidate against the query written for it.

The queries are written before, from the seed alone, by the ``queries`` stage (:mod:`benchmaker.queries`,
``queries.jsonl``: query text and narrative); the judge reads them and never writes one. A planned
query with no row there was lost writing it (``losses/queries.jsonl``) and is not labelled.
Adapters (``judge.adapter``) implement :class:`benchmaker.judge.base.Judge`. Whatever the adapter,
``finalize`` enforces the contract of qrels.jsonl: a query is kept only if its judgment covers exactly
the planned candidates (otherwise it goes to the losses file), labels are in range, rows are ordered
seed first then in plan order, ``is_seed`` and ``seed_not_relevant`` are set, and every row carries
its query's ``query_text`` and ``narrative``. Queries that
``paths.judge_reuse_file`` fully labels are answered from it and never reach the adapter
(:mod:`benchmaker.reuse`).
"""

from __future__ import annotations

from typing import Any, Mapping

import polars as pl

from ..formats import FacetModel, read_table, write_table
from ..logs import get_logger
from ..losses import Losses
from ..reuse import split_reused
from ..table_blocks import read_table_where
from .base import get_judge

__all__ = ["run", "finalize", "planned_pairs"]

log = get_logger("judge")


def planned_pairs(plan: pl.DataFrame) -> pl.DataFrame:
    """(query_id, image_id, pool, position) for every planned candidate, seeds first as planned."""
    return (
        plan.select("query_id", "candidates")
        .explode("candidates")
        .with_columns(pl.int_range(pl.len()).over("query_id").alias("position"))
        .unnest("candidates")
        .select("query_id", "image_id", "pool", "position")
    )


def finalize(plan: pl.DataFrame, judged: pl.DataFrame, losses: Losses, *, judge_name: str,
             graded: bool = False) -> pl.DataFrame:
    """qrels rows from ``judged`` (query_id, image_id, relevance_label[, rationale, judge]) and the
    plan with each query's ``query_text`` and ``narrative`` (:func:`with_queries`)."""
    max_label = 3 if graded else 1
    pairs = planned_pairs(plan)
    if "rationale" not in judged.columns:
        judged = judged.with_columns(pl.lit(None, pl.String).alias("rationale"))
    if "judge" not in judged.columns:
        judged = judged.with_columns(pl.lit(judge_name).alias("judge"))
    texts = plan.select("query_id", pl.col("query_text").cast(pl.String), pl.col("narrative").cast(pl.String))
    judged = judged.select(
        pl.col("query_id").cast(pl.String), pl.col("image_id").cast(pl.String),
        pl.col("relevance_label").cast(pl.Int64),
        pl.col("rationale").cast(pl.String), pl.col("judge").cast(pl.String),
    ).unique(subset=["query_id", "image_id"], keep="first", maintain_order=True)

    merged = (pairs.join(judged, on=["query_id", "image_id"], how="left")
              .join(texts, on="query_id", how="left"))
    bad_q: dict[str, str] = {}
    missing = merged.filter(pl.col("relevance_label").is_null()).group_by("query_id").len()
    for qid, n in missing.iter_rows():
        bad_q.setdefault(qid, f"judgment misses {n} planned candidate(s)")
    out_of_range = merged.filter((pl.col("relevance_label") < 0) | (pl.col("relevance_label") > max_label))
    for qid in out_of_range["query_id"].unique().to_list():
        bad_q.setdefault(qid, f"relevance label outside 0..{max_label}")
    no_text = merged.filter(pl.col("query_text").is_null() | (pl.col("query_text").str.strip_chars() == ""))
    for qid in no_text["query_id"].unique().to_list():
        bad_q.setdefault(qid, "no query text")
    extra = judged.join(pairs, on=["query_id", "image_id"], how="anti")
    if extra.height:
        log.warning("judge returned %d unplanned (query, image) pairs; ignored", extra.height)
    already_lost = {r["item_id"] for r in losses.rows if r["item_type"] == "query"}
    judged_q = set(judged["query_id"].unique().to_list())
    for qid in plan["query_id"].to_list():
        if qid not in judged_q and qid not in already_lost:
            bad_q.setdefault(qid, "no judgment returned")
    for qid, reason in bad_q.items():
        if qid not in already_lost:
            losses.add("query", qid, "incomplete_judgment", reason)
    kept = merged.filter(~pl.col("query_id").is_in(list(bad_q)))
    kept = kept.with_columns((pl.col("pool") == "seed").alias("is_seed"))
    seed_bad = (
        kept.filter(pl.col("is_seed")).group_by("query_id")
        .agg((pl.col("relevance_label") == 0).any().alias("seed_not_relevant"))
    )
    kept = kept.join(seed_bad, on="query_id", how="left").with_columns(pl.col("seed_not_relevant").fill_null(False))
    order = plan.select("query_id").with_row_index("q_order")
    kept = (
        kept.join(order, on="query_id", how="left")
        .sort(["q_order", "position"])
        .select("query_id", "query_text", "image_id", "relevance_label", "pool", "is_seed",
                "seed_not_relevant", "judge", "narrative", "rationale")
    )
    dup_text = (texts.filter(~pl.col("query_id").is_in(list(bad_q)))
                .group_by("query_text").len().filter(pl.col("len") > 1))
    if dup_text.height:
        log.warning("%d query texts are shared by several queries (evaluators that dedupe by text "
                    "will merge them): %s", dup_text.height, dup_text["query_text"].head(5).to_list())
    n_flag = kept.filter(pl.col("is_seed") & pl.col("seed_not_relevant")).select("query_id").n_unique()
    if n_flag:
        log.warning("%d queries have a seed judged not relevant to its own query (a bad query signal)", n_flag)
    if kept["rationale"].null_count() == kept.height:   # judge.rationale: false: no empty column downstream
        kept = kept.drop("rationale")
    if kept["narrative"].null_count() == kept.height:   # every text imported (a reuse file): no narratives
        kept = kept.drop("narrative")
    return kept


def with_queries(plan: pl.DataFrame, queries: str, columns=None) -> pl.DataFrame:
    """The planned queries that have a written query (queries.jsonl: the others were lost writing it),
    in plan order, with their ``query_text`` and ``narrative``."""
    q = read_table("queries", queries, columns=columns).select("query_id", "query_text", "narrative")
    return plan.join(q, on="query_id", how="inner", maintain_order="left")


def read_planned(plan: str, annotations: str, images: str, columns, fm: FacetModel, queries: str):
    """(plan with the written queries, annotations, images) with only the planned images' rows of the
    two image tables, read block by block: the judge's memory is bounded by the pairs, not by the corpus."""
    plan_df = with_queries(read_table("query_plan", plan, columns=columns), queries, columns)
    used = plan_df.select(pl.concat_list("seed_image_ids", "candidate_image_ids").alias("i")).explode("i")["i"]
    used = used.drop_nulls().unique()
    return (plan_df,
            read_table_where("annotations", annotations, key="image_id", values=used, columns=columns, facets=fm),
            read_table_where("images", images, key="image_id", values=used, columns=columns))


def run(
    *,
    plan: str,
    queries: str,
    annotations: str,
    images: str,
    qrels: str,
    losses: str,
    adapter: str,
    settings: Mapping[str, Any],
    facets: Mapping[str, Any],
    image_root: str,
    columns: Mapping[str, str],
    costs: str | None = None,
    cache_dir: str | None = None,
    ledger: str | None = None,
    threads: int = 1,
    version: str | None = None,
    reuse: str | None = None,
    stage: str = "judge",
) -> None:
    """``stage``: the name on the cost rows (``audit_judge2`` for the audit's second judge, so that
    the totals tell its spend apart)."""
    fm = FacetModel.from_config(facets)
    plan_df, ann, imgs = read_planned(plan, annotations, images, columns, fm, queries)
    settings = dict(settings)
    adapter_settings = dict(settings.pop("adapter_settings", {}) or {})
    judge_settings = {**adapter_settings, **settings}
    graded = settings.get("labels") == "graded"
    loss = Losses("judge")
    judge = get_judge(adapter, facets=fm, settings=judge_settings, image_root=image_root,
                      cache_dir=cache_dir, threads=threads)
    log.info("judge[%s]: %d planned queries", adapter, plan_df.height)
    todo, reused, reuse_costs = split_reused(plan_df, reuse, graded=graded, columns=columns)
    runner = getattr(judge, "runner", None)
    if runner is not None:
        runner.stage = stage
    if runner is not None and ledger:      # API adapters: each paid row on record as it arrives
        from ..providers.records import attach_ledger

        attach_ledger(runner, ledger)
    try:
        judged = judge.judge(todo, ann, imgs, loss) if todo.height else reused.clear()
    finally:
        if runner is not None and runner.ledger is not None:
            runner.ledger.close()
    judged = pl.concat([reused, judged], how="diagonal_relaxed") if reused.height else judged
    out = finalize(plan_df, judged, loss, judge_name=getattr(judge, "name", adapter), graded=graded)
    n = write_table(out, "qrels", qrels, columns=columns)
    loss.write(losses)
    if costs:  # API adapters report one row per paid request; the others write an empty file
        from ..providers.records import write_costs

        write_costs(reuse_costs + list(getattr(judge, "costs", []) or []), costs, getattr(runner, "ledger", None))
    log.info("judge[%s]: wrote %d qrels rows for %d queries; %d losses", adapter, n,
             out["query_id"].n_unique(), len(loss))

"""Queries stage: each planned query written from its seed image(s) alone, before any labelling.

A query is a ``query_text`` (what a person would type) and a ``narrative`` (one or two sentences on
what a relevant image must show: TREC's description and narrative). The writer sees the seeds'
pixels (API writers, at low detail) and their annotations, never the pool it will be judged on: a
writer that sees the candidates can word the query around what the pool happens to hold, and the
labels would then grade the writer's own wording (docs/judge-rules.md, "Method"). The judge
(:mod:`benchmaker.judge`) reads ``queries.jsonl`` and labels; it never writes a query.

The writer runs on the judge's adapter (``rules`` offline, ``openai``, ``gemini``; sync or batch) with
its own prompts, response cache (``.cache/queries``), losses and cost rows. Queries that
``paths.judge_reuse_file`` fully labels are not written: their text is taken from the file (narrative
null, ``writer`` = the file's judge), as the judge takes their labels (:mod:`benchmaker.reuse`).
Output: ``queries.jsonl`` (docs/formats.md), ``losses/queries.jsonl``, ``costs/queries.jsonl``.
"""

from __future__ import annotations

from typing import Any, Mapping

import polars as pl

from ..formats import FacetModel, read_table, write_table
from ..logs import get_logger
from ..losses import Losses
from ..table_blocks import read_table_where
from .base import get_writer

__all__ = ["run", "to_write", "finish"]

log = get_logger("queries")
COLUMNS = ("query_id", "query_text", "narrative", "writer")


def to_write(plan: str, annotations: str, images: str, columns, facets: Mapping[str, Any], reuse: str | None,
             reuse_labels: str | None):
    """(facet model, the full plan, the plan of the queries to write, the imported queries, annotations,
    images): the imported ones are the queries the reuse file fully labels (on the judge's scale,
    ``reuse_labels``: judge.labels); annotations and images: the planned images' rows (the offline
    writer ranks tags by how rare they are among them)."""
    from ..reuse import split_reused

    fm = FacetModel.from_config(facets)
    plan_df = read_table("query_plan", plan, columns=columns)
    todo, reused, _ = split_reused(plan_df, reuse, graded=reuse_labels == "graded", columns=columns)
    imported = (reused.group_by("query_id", maintain_order=True)
                .agg(pl.col("query_text").first(), pl.col("judge").first().alias("writer"))
                .select("query_id", "query_text", pl.lit(None, pl.String).alias("narrative"), "writer"))
    used = plan_df.select(pl.concat_list("seed_image_ids", "candidate_image_ids").alias("i")).explode("i")["i"]
    used = used.drop_nulls().unique()
    ann = read_table_where("annotations", annotations, key="image_id", values=used, columns=columns, facets=fm)
    imgs = read_table_where("images", images, key="image_id", values=used, columns=columns)
    return fm, plan_df, todo, imported, ann, imgs


def finish(*, plan: pl.DataFrame, written: pl.DataFrame, imported: pl.DataFrame, loss: Losses, queries: str,
           losses: str, costs: str | None, cost_rows: list[dict], ledger: Any, columns) -> pl.DataFrame:
    """Write queries.jsonl (plan order), the losses and the cost rows."""
    out = pl.concat([imported.select(COLUMNS), written.select(COLUMNS)], how="vertical_relaxed")
    order = plan.select("query_id").with_row_index("_order")
    out = out.join(order, on="query_id", how="inner").sort("_order").drop("_order")
    dup = out.group_by("query_text").len().filter(pl.col("len") > 1)
    if dup.height:
        log.warning("%d query texts are shared by several queries (evaluators that dedupe by text will merge "
                    "them): %s", dup.height, dup["query_text"].head(5).to_list())
    write_table(out, "queries", queries, columns=columns)
    loss.write(losses)
    if costs:
        from ..providers.records import write_costs

        write_costs(cost_rows, costs, ledger)
    return out


def run(*, plan: str, annotations: str, images: str, queries: str, losses: str, adapter: str,
        settings: Mapping[str, Any], facets: Mapping[str, Any], image_root: str, columns: Mapping[str, str],
        costs: str | None = None, cache_dir: str | None = None, ledger: str | None = None, threads: int = 1,
        version: str | None = None, reuse: str | None = None, reuse_labels: str | None = None) -> None:
    """The ``queries`` rule (offline, or an API writer in sync mode)."""
    fm, plan_df, todo, imported, ann, imgs = to_write(plan, annotations, images, columns, facets, reuse,
                                                       reuse_labels)
    loss = Losses("queries")
    writer = get_writer(adapter, facets=fm, settings=dict(settings), image_root=image_root, cache_dir=cache_dir,
                        threads=threads)
    log.info("queries[%s]: %d planned queries, %d to write, %d imported", adapter, plan_df.height, todo.height,
             imported.height)
    runner = getattr(writer, "runner", None)
    if runner is not None and ledger:      # API writers: each paid row on record as it arrives
        from ..providers.records import attach_ledger

        attach_ledger(runner, ledger)
    try:
        written = writer.write(todo, ann, imgs, loss) if todo.height else pl.DataFrame(schema=dict.fromkeys(
            COLUMNS, pl.String))
    finally:
        if runner is not None and runner.ledger is not None:
            runner.ledger.close()
    out = finish(plan=plan_df, written=written, imported=imported, loss=loss, queries=queries, losses=losses,
                 costs=costs, cost_rows=list(getattr(writer, "costs", []) or []),
                 ledger=getattr(runner, "ledger", None), columns=columns)
    log.info("queries[%s]: wrote %d queries; %d losses", adapter, out.height, len(loss))

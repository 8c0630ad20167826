"""Rule ``audit_judge2``: a second judge configuration over the audit sample or the whole benchmark.

It is the judge stage itself (:func:`benchmaker.judge.run`) with the judge section overridden
(``audit.second_judge.judge`` deep-merged into ``judge``), so any adapter (rules, openai, gemini) can be
the second judge. With ``scope: sample`` the plan is cut down to the sampled pairs first
(``audit/judge2/<name>/plan.jsonl``: the sampled queries, each with only its sampled candidates; seeds stay
in ``seed_image_ids``). API adapters run in sync mode here, with their own response cache
(``<paths.results>/.cache/judge-audit/<name>/``), so the same judge configuration under a new name is asked
again: that measures the judge's consistency with itself instead of reading back its cached answers.
Each paid request is on record as it arrives in the crash-safe ledger
(``<paths.results>/.ledger/audit-judge2/<name>.jsonl``), and the cost file
(``audit/judge2/<name>/costs.jsonl``) is one of the summary's cost files: its spend is in every total.

The second judge labels under the very queries the judge labelled under (``queries.jsonl``: written
once, from the seed alone, by the ``queries`` stage), so the two judges' labels differ by the judges
only, never by the wording of the query.
"""

from __future__ import annotations

from typing import Any, Mapping

import polars as pl

from ..formats import read_table, write_table
from ..logs import get_logger
from ..settings_schema import default
from .files import read_sample

__all__ = ["run", "restrict_plan"]

log = get_logger("audit")


def restrict_plan(plan: pl.DataFrame, sample: pl.DataFrame) -> pl.DataFrame:
    """The plan's sampled queries, each with only its sampled candidates (plan order kept)."""
    keep = sample.select("query_id", "image_id").with_columns(pl.lit(True).alias("_keep"))
    cands = (
        plan.select("query_id", "candidates").with_row_index("_q").explode("candidates")
        .with_columns(pl.int_range(pl.len()).over("query_id").alias("_pos"))
        .with_columns(pl.col("candidates").struct.field("image_id").alias("image_id"))
        .join(keep, on=["query_id", "image_id"], how="inner")
        .sort("_q", "_pos")
        .group_by("query_id", maintain_order=True)
        .agg(pl.col("candidates"), pl.col("image_id").alias("candidate_image_ids"))
    )
    out = plan.drop("candidates", "candidate_image_ids").join(cands, on="query_id", how="inner")
    return out.select(plan.columns)


def run(*, plan: str, queries: str, annotations: str, images: str, sub_plan: str, qrels: str, losses: str,
        costs: str, adapter: str, settings: Mapping[str, Any],
        scope: str = default("audit.second_judge.scope"), sample: str | None = None,
        facets: Mapping[str, Any],
        image_root: str, columns: Mapping[str, str] | None = None, cache_dir: str | None = None,
        threads: int = 1, version: str | None = None, ledger: str | None = None) -> None:
    from ..judge import run as judge_run

    p = read_table("query_plan", plan, columns=columns)
    if scope == "sample":
        if not sample:
            raise ValueError("audit second judge: scope 'sample' needs the audit sample (input `sample`)")
        p = restrict_plan(p, read_sample(sample))
    elif scope != "all":
        raise ValueError(f"audit.second_judge.scope: {scope!r} is neither 'sample' nor 'all'")
    write_table(p, "query_plan", sub_plan, columns=columns)
    log.info("audit second judge [%s]: %d queries, %d pairs (scope %s)", adapter, p.height,
             int(p["candidates"].list.len().sum() or 0), scope)
    judge_run(plan=sub_plan, queries=queries, annotations=annotations, images=images, qrels=qrels, losses=losses,
              costs=costs, adapter=adapter, settings=settings, facets=facets, image_root=image_root, columns=columns,
              cache_dir=cache_dir, threads=threads, version=version, ledger=ledger,
              stage="audit_judge2")

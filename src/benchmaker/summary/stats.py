"""Statistics of a built benchmark, vectorized with polars (canonical column names in, tables out).

Every function returns a small aggregated table; nothing here holds more than the input frames.
A pair is *positive* when ``relevance_label > 0`` (binary labels: 1; graded labels: 1..3).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import polars as pl

from ..formats import FacetModel

__all__ = [
    "relevance_overview", "query_stats", "facet_distribution", "relevance_by_facet", "clip_stats_by_relevance",
    "clip_overall_stats", "clip_histogram", "clip_by_query", "pool_mix", "shortfalls", "difficulty_distribution",
    "loss_counts", "quarantine_counts", "top_tags", "top_tags_counts", "facet_distribution_counts", "cost_summary",
    "clip_ranking", "dataset_summary_stats", "cost_coverage", "estimate_vs_bill",
    "query_length_stats", "shortfall_cause",
]

POS = pl.col("relevance_label") > 0


def relevance_overview(scored: pl.DataFrame) -> pl.DataFrame:
    """Pairs per relevance label with their share of all pairs."""
    n = max(scored.height, 1)
    return (scored.group_by("relevance_label").agg(pl.len().alias("pairs"),
                                                   pl.col("query_id").n_unique().alias("queries"))
            .with_columns((pl.col("pairs") / n).round(6).alias("share"))
            .sort("relevance_label"))


def query_stats(scored: pl.DataFrame) -> pl.DataFrame:
    """One row per query (in file order): pool size, positives, relevance rate, seed flags."""
    return (
        scored.group_by("query_id", maintain_order=True).agg(
            pl.col("query_text").first(),
            pl.col("relevance_label").sum().alias("sum"),
            pl.len().alias("count"),
            POS.sum().cast(pl.Int64).alias("positives"),
            pl.col("is_seed").sum().cast(pl.Int64).alias("seeds"),
            (pl.col("is_seed") & POS).sum().cast(pl.Int64).alias("relevant_seeds"),
            pl.col("seed_not_relevant").any().alias("seed_not_relevant"),
            pl.col("clip_score").is_null().sum().cast(pl.Int64).alias("missing_clip_score"),
        )
        .with_columns(
            (pl.col("positives") / pl.col("count")).round(6).alias("relevance_rate"),
            (pl.col("positives") == 0).alias("no_positives"),
        )
        .select("query_id", "query_text", "sum", "count", "relevance_rate", "positives", "no_positives", "seeds",
                "relevant_seeds", "seed_not_relevant", "missing_clip_score")
    )


def query_length_stats(queries: pl.DataFrame) -> pl.DataFrame:
    """Query text length (characters and words) per query."""
    return queries.select(
        "query_id",
        pl.col("query_text").str.len_chars().alias("chars"),
        pl.col("query_text").str.split(" ").list.len().alias("words"),
    )


def facet_distribution(annotations: pl.DataFrame, fm: FacetModel) -> pl.DataFrame:
    """Images per facet value (every configured value listed, zero counts included); booleans as true/false."""
    from .inputs import facet_counts

    return facet_distribution_counts(facet_counts(annotations, fm), annotations.height, fm)


def facet_distribution_counts(by_facet: dict[str, pl.DataFrame], n_annotations: int, fm: FacetModel) -> pl.DataFrame:
    """:func:`facet_distribution` from per-facet counts (``value``, ``images``) of ``n_annotations`` images."""
    n = max(n_annotations, 1)
    parts = []
    for name, values in fm.taxonomy.items():
        counts = by_facet[name]
        frame = _in_config_order(pl.DataFrame({"value": values}, schema={"value": pl.String}).join(
            counts, on="value", how="full", coalesce=True).with_columns(pl.col("images").fill_null(0)), values)
        parts.append(frame.with_columns(pl.lit(name).alias("facet"), pl.lit("taxonomy").alias("type")))
    for name in fm.boolean:
        counts = by_facet[name]
        frame = _in_config_order(pl.DataFrame({"value": ["true", "false"]}).join(
            counts, on="value", how="full", coalesce=True), ["true", "false"])
        parts.append(frame.with_columns(pl.col("images").fill_null(0), pl.lit(name).alias("facet"),
                                        pl.lit("boolean").alias("type")))
    if not parts:
        return pl.DataFrame(schema={"facet": pl.String, "type": pl.String, "value": pl.String,
                                    "images": pl.Int64, "share": pl.Float64})
    return (pl.concat([p.select("facet", "type", pl.col("value").fill_null("null"),
                                pl.col("images").cast(pl.Int64)) for p in parts])
            .with_columns((pl.col("images") / n).round(6).alias("share")))


def _in_config_order(frame: pl.DataFrame, values: list) -> pl.DataFrame:
    """Rows of a full join in a fixed order (a full join has none): the configured values in their
    order, then any other value (one the annotations have but the config does not) sorted, null last."""
    order = {str(v): i for i, v in enumerate(values)}
    return (frame.with_columns(pl.col("value").replace_strict(order, default=len(order), return_dtype=pl.Int64)
                               .fill_null(len(order) + 1).alias("_o"))
            .sort("_o", "value", nulls_last=True).drop("_o"))


def relevance_by_facet(scored: pl.DataFrame, annotations: pl.DataFrame, fm: FacetModel) -> pl.DataFrame:
    """Pairs, positives and relevance rate per facet value of the judged image."""
    if not fm.names:
        return pl.DataFrame(schema={"facet": pl.String, "value": pl.String, "pairs": pl.Int64,
                                    "positives": pl.Int64, "relevance_rate": pl.Float64})
    joined = scored.select("image_id", "relevance_label").join(
        annotations.select("image_id", *fm.names), on="image_id", how="left")
    parts = []
    for name in fm.names:
        parts.append(
            joined.group_by(pl.col(name).cast(pl.String).fill_null("(not annotated)").alias("value"))
            .agg(pl.len().cast(pl.Int64).alias("pairs"), POS.sum().cast(pl.Int64).alias("positives"))
            .with_columns(pl.lit(name).alias("facet")))
    return (pl.concat(parts).select("facet", "value", "pairs", "positives")
            .with_columns((pl.col("positives") / pl.col("pairs")).round(6).alias("relevance_rate"))
            .sort("facet", "value"))


def _describe(col: str) -> list[pl.Expr]:
    c = pl.col(col)
    return [c.count().alias("Count"), c.mean().alias("Mean"), c.median().alias("Median"),
            c.std().alias("Std Dev"), c.min().alias("Min"), c.max().alias("Max"),
            c.quantile(0.25, "linear").alias("P25"), c.quantile(0.75, "linear").alias("P75")]


def clip_stats_by_relevance(scored: pl.DataFrame) -> pl.DataFrame:
    """Upstream's ``clip_score_stats_by_relevance.csv`` (plus quartiles and the null count)."""
    return (scored.group_by(pl.col("relevance_label").alias("Relevance Label"))
            .agg(*_describe("clip_score"), pl.col("clip_score").is_null().sum().alias("Missing"))
            .sort("Relevance Label"))


def clip_overall_stats(scored: pl.DataFrame) -> pl.DataFrame:
    """Upstream's ``clip_score_overall_stats.csv`` (Metric, Value)."""
    c = pl.col("clip_score")
    row = scored.select(
        c.count().alias("Total Scored"), c.is_null().sum().alias("Missing"), c.mean().alias("Mean"),
        c.median().alias("Median"), c.std().alias("Std Dev"), c.min().alias("Min"), c.max().alias("Max"),
        c.quantile(0.25, "linear").alias("P25"), c.quantile(0.75, "linear").alias("P75"),
        c.filter(POS).mean().alias("Mean (relevant)"), c.filter(~POS).mean().alias("Mean (not relevant)"),
    ).row(0, named=True)
    return pl.DataFrame({"Metric": list(row), "Value": [None if v is None else float(v) for v in row.values()]},
                        schema={"Metric": pl.String, "Value": pl.Float64})


def clip_histogram(scored: pl.DataFrame, bins: int = 40) -> pl.DataFrame:
    """Histogram of clip_score per relevance label on shared bin edges (bin_start, bin_end, label, pairs)."""
    s = scored.filter(pl.col("clip_score").is_not_null())
    schema = {"bin_start": pl.Float64, "bin_end": pl.Float64, "relevance_label": pl.Int64, "pairs": pl.Int64}
    if not s.height:
        return pl.DataFrame(schema=schema)
    lo, hi = s.select(pl.col("clip_score").min().alias("lo"), pl.col("clip_score").max().alias("hi")).row(0)
    width = (hi - lo) / bins if hi > lo else 1.0
    return (s.select(((pl.col("clip_score") - lo) / width).floor().clip(0, bins - 1).cast(pl.Int64).alias("bin"),
                     "relevance_label")
            .group_by("bin", "relevance_label").len("pairs")
            .select((lo + pl.col("bin") * width).alias("bin_start"),
                    (lo + (pl.col("bin") + 1) * width).alias("bin_end"),
                    "relevance_label", pl.col("pairs").cast(pl.Int64))
            .sort("bin_start", "relevance_label"))


def clip_by_query(scored: pl.DataFrame) -> pl.DataFrame:
    """Upstream's ``clip_score_by_query_stats.csv``, plus the mean gap between positives and the rest."""
    c = pl.col("clip_score")
    return (scored.group_by(pl.col("query_id").alias("Query ID"), maintain_order=True)
            .agg(c.mean().alias("Mean clip_score"), c.std().alias("Std Dev"), c.count().alias("Count"),
                 (c.filter(POS).mean() - c.filter(~POS).mean()).alias("Positive Minus Negative Mean")))


def pool_mix(scored: pl.DataFrame, plan: pl.DataFrame) -> pl.DataFrame:
    """Per pool: candidates planned, pairs judged, positives, relevance rate and mean clip_score."""
    judged = scored.group_by("pool").agg(
        pl.len().cast(pl.Int64).alias("judged_pairs"), POS.sum().cast(pl.Int64).alias("positives"),
        pl.col("clip_score").mean().alias("mean_clip_score"))
    if plan.height:
        planned = (plan.select(pl.col("candidates")).explode("candidates").drop_nulls()
                   .select(pl.col("candidates").struct.field("pool").alias("pool"))
                   .group_by("pool").len("planned_candidates"))
    else:
        planned = pl.DataFrame(schema={"pool": pl.String, "planned_candidates": pl.UInt32})
    out = planned.join(judged, on="pool", how="full", coalesce=True).with_columns(
        pl.col("planned_candidates").fill_null(0).cast(pl.Int64), pl.col("judged_pairs").fill_null(0),
        pl.col("positives").fill_null(0))
    order = {p: i for i, p in enumerate(("seed", "positive", "neutral", "hard", "nearmiss", "easy"))}
    return (out.with_columns((pl.col("positives") / pl.col("judged_pairs")).round(6).alias("relevance_rate"),
                             pl.col("pool").replace_strict(order, default=99, return_dtype=pl.Int64).alias("_o"))
            .sort("_o", "pool").drop("_o")
            .select("pool", "planned_candidates", "judged_pairs", "positives", "relevance_rate", "mean_clip_score"))


def shortfall_cause(reason: pl.Expr) -> pl.Expr:
    """The general cause of a shortfall: the planner's reason up to its first ': ' (the rest is per-query
    search detail such as 'searched 4 images ...', which would make every query a group of its own)."""
    return reason.str.split_exact(": ", 1).struct.field("field_0")


def shortfalls(plan: pl.DataFrame) -> pl.DataFrame:
    """Plan shortfalls per pool and cause: queries affected, candidates wanted, got and missing.

    ``reason`` is the general cause (see :func:`shortfall_cause`); the full per-query text stays in
    query_plan.jsonl.
    """
    schema = {"pool": pl.String, "reason": pl.String, "queries": pl.Int64, "wanted": pl.Int64, "got": pl.Int64,
              "missing": pl.Int64}
    if not plan.height:
        return pl.DataFrame(schema=schema)
    ex = plan.select("query_id", "shortfall").explode("shortfall").drop_nulls("shortfall")
    if not ex.height:
        return pl.DataFrame(schema=schema)
    return (ex.unnest("shortfall").with_columns(shortfall_cause(pl.col("reason")).alias("reason"))
            .group_by("pool", "reason")
            .agg(pl.col("query_id").n_unique().cast(pl.Int64).alias("queries"), pl.col("wanted").sum(),
                 pl.col("got").sum())
            .with_columns((pl.col("wanted") - pl.col("got")).alias("missing"))
            .select(list(schema)).cast(schema).sort("pool", "reason"))


def difficulty_distribution(plan: pl.DataFrame) -> pl.DataFrame:
    """Queries per difficulty value; a struct difficulty is reported field by field (field, value, queries)."""
    schema = {"field": pl.String, "value": pl.String, "queries": pl.Int64}
    if not plan.height or "difficulty" not in plan.columns:
        return pl.DataFrame(schema=schema)
    d = plan.select("difficulty")
    cols = d.unnest("difficulty") if isinstance(d.schema["difficulty"], pl.Struct) else d
    parts = []
    for name, dtype in cols.schema.items():
        col = pl.col(name)
        if dtype.is_float():
            col = col.round(2)
        if isinstance(dtype, (pl.List, pl.Struct, pl.Array)):
            col = col.cast(pl.String) if not isinstance(dtype, pl.List) else col.list.join(",") \
                if dtype.inner == pl.String else col.cast(pl.List(pl.String)).list.join(",")
        parts.append(cols.select(col.cast(pl.String).fill_null("null").alias("value"))
                     .group_by("value").len("queries").with_columns(pl.lit(name).alias("field")))
    return pl.concat(parts).select(list(schema)).cast(schema).sort("field", "value")


def loss_counts(losses: pl.DataFrame) -> pl.DataFrame:
    """Losses per stage, item type and reason."""
    return (losses.group_by("stage", "item_type", "reason").len("count")
            .with_columns(pl.col("count").cast(pl.Int64)).sort("stage", "item_type", "reason"))


def outside_note(counts: pl.DataFrame, outside: Sequence[str]) -> str:
    """The sentence under the losses by stage (``counts``: :func:`loss_counts`) that tells apart the rows
    that are not the benchmark's own losses (``outside``: Inputs.outside_stages), or "" without any."""
    rows = counts.filter(pl.col("stage").is_in(list(outside)))
    if not rows.height:
        return ""
    names = ", ".join(f'"{s}"' for s in sorted(set(rows["stage"].to_list())))
    return (f"{int(rows['count'].sum())} of the {int(counts['count'].sum())} losses are not the benchmark's "
            f"(stages {names}): they are what a retrieval system under evaluation (\"evaluate: <system>\") or "
            "the judge audit's second judge (\"audit_judge2\") could not rank, answer or label, and remove "
            "nothing from the benchmark, whose own losses are the other stages' rows.")


def cost_coverage(costs: pl.DataFrame, stages: Sequence[str]) -> str:
    """Which stages a cost total covers (``costs``: :func:`cost_summary`; ``stages``: every stage whose
    cost files were counted, Inputs.cost_stages): 'over the stages "vision", "judge" (no request recorded:
    "evaluate: bm25")'; without any row just 'over the stages ...'; "" when the caller named none. A
    stage that paid nothing is named too, so a total that leaves a stage out can be told from one that
    counted it."""
    if not stages:
        return ""
    paid = set(costs["stage"].to_list()) if costs.height else set()
    # rows under a stage not among the named ones (a caller that relabels nothing): named too
    named = list(stages) + sorted(paid - set(stages))
    some = [s for s in named if s in paid]
    none = [s for s in named if s not in paid]

    def q(xs: Sequence[str]) -> str:
        return ", ".join(f'"{s}"' for s in xs)

    if not some:      # the caller says that no request was recorded
        return f"over the stages {q(none)}"
    return f"over the stages {q(some)}" + (f" (no request recorded: {q(none)})" if none else "")


def quarantine_counts(quarantine: pl.DataFrame) -> pl.DataFrame:
    return quarantine.group_by("reason").len("files").with_columns(pl.col("files").cast(pl.Int64)).sort("reason")


def top_tags(annotations: pl.DataFrame, n: int = 50) -> pl.DataFrame:
    """Most frequent tags over unique images (upstream counted qrels rows; images in many pools weighed more)."""
    from .inputs import tag_counts

    return top_tags_counts(tag_counts(annotations), n)


def top_tags_counts(counts: pl.DataFrame, n: int = 50) -> pl.DataFrame:
    """:func:`top_tags` from tag counts (``Tag``, ``Images``)."""
    return counts.sort(["Images", "Tag"], descending=[True, False]).head(n)


def cost_summary(costs: pl.DataFrame | None) -> pl.DataFrame:
    """Requests, tokens by type and USD per stage, model and mode (cached requests cost nothing now)."""
    schema = {"stage": pl.String, "model": pl.String, "mode": pl.String, "requests": pl.Int64,
              "cached_requests": pl.Int64, "input_tokens": pl.Int64, "cached_input_tokens": pl.Int64,
              "output_tokens": pl.Int64, "reasoning_tokens": pl.Int64, "cost_usd": pl.Float64,
              "cost_usd_last_run": pl.Float64}
    if costs is None or not costs.height:
        return pl.DataFrame(schema=schema)
    if "last_run" not in costs.columns:
        costs = costs.with_columns(pl.lit(True).alias("last_run"))
    # cost_usd: the spend to date (every paid request across reruns); cost_usd_last_run: the latest run's
    return (costs.group_by("stage", "model", "mode")
            .agg(pl.len().alias("requests"), pl.col("cached").sum().alias("cached_requests"),
                 pl.col("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens").sum(),
                 pl.col("cost_usd").sum(),
                 pl.col("cost_usd").filter(pl.col("last_run")).sum().alias("cost_usd_last_run"))
            .select(list(schema)).cast(schema).sort("stage", "model", "mode"))


def estimate_vs_bill(stages: Mapping[str, Mapping[str, Any]], costs: pl.DataFrame) -> pl.DataFrame:
    """The recorded estimate (``benchmaker estimate --record``, docs/formats.md ``estimate``: ``stages``)
    beside the bill per stage (``costs``: :func:`cost_summary`, the spend to date; a deepening's
    ``deepen: <system>`` rows are the estimate's ``deepen``): the estimate, its range, what its pilot
    paid, the paid requests and USD billed, their ratio and whether the bill fell inside the range."""
    schema = {"stage": pl.String, "estimated_requests": pl.Int64, "estimate_usd": pl.Float64,
              "low_usd": pl.Float64, "high_usd": pl.Float64, "pilot_usd": pl.Float64, "billed_requests": pl.Int64,
              "billed_usd": pl.Float64, "bill_over_estimate": pl.Float64, "within_range": pl.Boolean,
              "estimate_from": pl.String}
    rows = []
    for stage, e in sorted(stages.items()):
        mine = costs.filter((pl.col("stage") == stage) | pl.col("stage").str.starts_with(f"{stage}: "))
        paid = int((mine["requests"] - mine["cached_requests"]).sum() or 0) if mine.height else 0
        usd = float(mine["cost_usd"].sum() or 0.0) if mine.height else 0.0
        rows.append({"stage": stage, "estimated_requests": int(e["requests"]), "estimate_usd": float(e["usd"]),
                     "low_usd": float(e["low_usd"]), "high_usd": float(e["high_usd"]),
                     "pilot_usd": float(e["pilot_usd"]), "billed_requests": paid, "billed_usd": usd,
                     "bill_over_estimate": usd / e["usd"] if e["usd"] else None,
                     "within_range": bool(e["low_usd"] - 1e-9 <= usd <= e["high_usd"] + 1e-9),
                     "estimate_from": str(e["output_from"])})
    return pl.DataFrame(rows, schema=schema)


RANKING_METRICS = ("ndcg@10", "mrr", "map", "precision@10", "recall@10", "r-precision")


def clip_ranking(scored: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """Rank every query's judged pool by clip_score and evaluate the ranking against the labels.

    The metrics follow ranx's definitions exactly (linear-gain nDCG, MRR without cutoff, MAP,
    precision@10 over 10, recall@10, R-precision) and are checked against ranx in the tests; they
    are computed here with polars because ranx's numba JIT costs 15-30 s per process, more than the
    whole summary of a million pairs. Positives without a clip_score count as not retrieved; queries
    without a positive (metrics undefined) are left out and counted. Ties are broken by image_id.
    Returns (per-query metrics, overall means, info dict).
    """
    info: dict[str, Any] = {}
    rel, pos = pl.col("relevance_label"), pl.col("relevance_label") > 0
    base = scored.select("query_id", "image_id", "relevance_label", "clip_score")
    ideal = (base.filter(pos).sort(["query_id", "relevance_label"], descending=[False, True])
             .with_columns(pl.int_range(1, pl.len() + 1).over("query_id").alias("r"))
             .group_by("query_id").agg(pos.sum().cast(pl.Int64).alias("num_pos"),
                                       (rel / (pl.col("r") + 1).log(2)).filter(pl.col("r") <= 10).sum().alias("idcg")))
    ranked = (base.filter(pl.col("clip_score").is_not_null())
              .join(ideal, on="query_id", how="inner")
              .sort(["query_id", "clip_score", "image_id"], descending=[False, True, False])
              .with_columns(pl.int_range(1, pl.len() + 1).over("query_id").alias("rank"),
                            pos.cast(pl.Int64).cum_sum().over("query_id").alias("cum_pos")))
    k = pl.col("rank") <= 10
    per = (ranked.group_by("query_id").agg(
        ((rel / (pl.col("rank") + 1).log(2)).filter(k).sum() / pl.col("idcg").first()).alias("ndcg@10"),
        (1.0 / pl.col("rank").filter(pos).min()).fill_null(0.0).alias("mrr"),
        ((pl.col("cum_pos") / pl.col("rank")).filter(pos).sum() / pl.col("num_pos").first()).alias("map"),
        (pos & k).sum().alias("_hits10"),
        (pos & (pl.col("rank") <= pl.col("num_pos"))).sum().alias("_hitsR"),
        pl.col("num_pos").first(),
    ).select(
        "query_id", "ndcg@10", "mrr", "map",
        (pl.col("_hits10") / 10.0).alias("precision@10"),
        (pl.col("_hits10") / pl.col("num_pos")).alias("recall@10"),
        (pl.col("_hitsR") / pl.col("num_pos")).alias("r-precision"),
    ).sort("query_id"))
    # a query whose positives all lack a clip_score has no ranked row but still counts, with zeros
    missing = ideal.join(per, on="query_id", how="anti").select("query_id")
    if missing.height:
        per = pl.concat([per, missing.with_columns(pl.lit(0.0).alias(m) for m in RANKING_METRICS)]).sort("query_id")
    info["evaluated_queries"] = per.height
    info["skipped_queries_without_positive"] = int(scored["query_id"].n_unique() - per.height)
    info["pairs_without_clip_score"] = int(scored["clip_score"].null_count())
    rnd = ranked.group_by("query_id").agg(pos.mean().alias("r"))["r"].mean()
    overall = pl.DataFrame({
        "metric": [*RANKING_METRICS, "random_expected_precision"],
        "value": [safe_float(per[m].mean()) if per.height else None for m in RANKING_METRICS] + [safe_float(rnd)],
    }, schema={"metric": pl.String, "value": pl.Float64})
    return per, overall, info


def dataset_summary_stats(scored: pl.DataFrame, queries: pl.DataFrame, n_images: int, n_annotations: int,
                          unique_values: Mapping[str, int], fm: FacetModel) -> pl.DataFrame:
    """Upstream's one-row ``dataset_summary_stats.csv`` (same first columns), plus a few more."""
    pos = int(scored.select(POS.sum()).item() or 0)
    n = scored.height
    row: dict[str, Any] = {
        "Total Qrel Rows": n,
        "Unique Queries": queries.height,
        "Unique Images": scored["image_id"].n_unique(),
        "Relevant Pairs": pos,
        "Not Relevant Pairs": n - pos,
        "Relevance Rate": f"{(100 * pos / n if n else 0):.2f}%",
    }
    for name in fm.taxonomy:
        row[f"Unique {name} values"] = unique_values[name] if n_annotations else 0
    row["Images In Corpus"] = n_images
    row["Annotated Images"] = n_annotations
    row["Mean Positives Per Query"] = round(float(queries["positives"].mean() or 0), 4)
    row["Queries Without Positives"] = int(queries["no_positives"].sum())
    row["Queries With Seed Not Relevant"] = int(queries["seed_not_relevant"].sum())
    return pl.DataFrame([row])


def safe_float(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return None if math.isnan(f) or math.isinf(f) else f

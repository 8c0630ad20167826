"""The summary's charts (altair; written as PNG by :func:`benchmaker.pages.charts.save`). Every chart
is drawn from an aggregated table, never from the pair-level rows, so chart size does not grow with
the benchmark."""

from __future__ import annotations

import altair as alt
import polars as pl

from ..formats import POOLS as POOL_ORDER
from ..pages.charts import (
    LOSS_COLORS,
    POOL_MIX_COLORS,
    QUARANTINE_COLOR,
    REL_COLORS,
    REL_EXTRA,
    SHORTFALL_COLORS,
    STATUS_COLORS,
)

__all__ = ["relevance_overview", "positives_per_query", "facet_distributions",
           "relevance_by_facet", "clip_analysis", "clip_ranking_by_query", "pool_mix", "shortfalls", "losses",
           "difficulty", "query_length"]

alt.data_transformers.disable_max_rows()  # every chart gets pre-aggregated data
NOTE = "#888888"
COUNT_AXIS = {"tickMinStep": 1, "format": "d"}  # counts: no 0.5-query ticks
FLAT = alt.Axis(labelAngle=0, labelLimit=160)  # category labels written horizontally


def _rel_color(labels, title: str = "relevance label") -> alt.Color:
    """A categorical colour per relevance label present (the same colours in every chart)."""
    present = sorted({int(v) for v in labels if v is not None})
    extra = [v for v in present if v not in REL_COLORS]
    rng = [REL_COLORS[v] if v in REL_COLORS else REL_EXTRA[extra.index(v) % len(REL_EXTRA)] for v in present]
    return alt.Color("relevance_label:O", title=title, scale=alt.Scale(domain=present, range=rng))


def _category_color(field: str, values, palette, **kw) -> alt.Color:
    """Colours for a category field whose values come from the data: in sorted order from ``palette``."""
    domain = sorted({str(v) for v in values if v is not None})
    return alt.Color(f"{field}:N", scale=alt.Scale(domain=domain, range=[palette[i % len(palette)]
                                                                          for i in range(len(domain))]), **kw)


def _empty(title: str) -> alt.Chart:
    return alt.Chart(pl.DataFrame({"text": ["no data"]})).mark_text(size=14, color=NOTE).encode(
        text="text:N").properties(title=title, width=300, height=60)


def relevance_overview(overview: pl.DataFrame, pools: pl.DataFrame) -> alt.TopLevelMixin:
    if not overview.height:
        return _empty("Relevance overview")
    base = alt.Chart(overview).encode(x=alt.X("relevance_label:O", title="relevance label", axis=FLAT))
    bars = base.mark_bar().encode(y=alt.Y("pairs:Q", title="pairs", axis=alt.Axis(**COUNT_AXIS)),
                                  color=_rel_color(overview["relevance_label"]).legend(None),
                                  tooltip=["relevance_label", "pairs", "share"])
    text = base.mark_text(dy=-6).encode(y="pairs:Q", text=alt.Text("share:Q", format=".1%"))
    left = (bars + text).properties(title="Pairs per relevance label", width=220, height=240)
    pools = pools.filter(pl.col("judged_pairs") > 0).with_columns(
        pl.format("{} of {}", "positives", "judged_pairs").alias("label"))
    pbase = alt.Chart(pools).encode(
        x=alt.X("pool:N", sort=pools["pool"].to_list(), title="candidate pool", axis=FLAT),
        y=alt.Y("relevance_rate:Q", title="share relevant", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
    )
    right = (pbase.mark_bar().encode(tooltip=["pool", "judged_pairs", "positives", "relevance_rate"])
             + pbase.mark_text(dy=-6).encode(text="label:N")
             ).properties(title="Share relevant by candidate pool (positives of judged)", width=300, height=240)
    return alt.hconcat(left, right)


def positives_per_query(queries: pl.DataFrame) -> alt.TopLevelMixin:
    if not queries.height:
        return _empty("Positives per query")
    counts = (queries.group_by("positives").len("queries").sort("positives")
              .with_columns(pl.when(pl.col("positives") == 0).then(pl.lit("no positive (flagged)"))
                            .otherwise(pl.lit("has positives")).alias("status")))
    n0 = int(queries["no_positives"].sum())
    return alt.Chart(counts).mark_bar().encode(
        x=alt.X("positives:O", title="positive pairs in the query's pool", axis=FLAT),
        y=alt.Y("queries:Q", title="queries", axis=alt.Axis(**COUNT_AXIS)),
        color=alt.Color("status:N", scale=alt.Scale(domain=list(STATUS_COLORS), range=list(STATUS_COLORS.values())),
                        title=None),
        tooltip=["positives", "queries"],
    ).properties(title=f"Positives per query ({n0} of {queries.height} queries have none)", width=420, height=240)


def facet_distributions(dist: pl.DataFrame) -> alt.TopLevelMixin:
    if not dist.height:
        return _empty("Facet distributions (images)")
    charts = []
    for facet in dist["facet"].unique(maintain_order=True):
        sub = dist.filter(pl.col("facet") == facet)
        charts.append(alt.Chart(sub).mark_bar().encode(
            y=alt.Y("value:N", sort=sub["value"].to_list(), title=None),
            x=alt.X("images:Q", title="images", axis=alt.Axis(**COUNT_AXIS)),
            tooltip=["value", "images", "share"],
        ).properties(title=f"{facet} ({sub['type'][0]})", width=220, height=alt.Step(14)))
    rows = [alt.hconcat(*charts[i:i + 3]) for i in range(0, len(charts), 3)]
    return alt.vconcat(*rows).properties(title="Facet distributions over annotated images")


def relevance_by_facet(rel: pl.DataFrame, facet: str) -> alt.TopLevelMixin:
    sub = rel.filter(pl.col("facet") == facet)
    if not sub.height:
        return _empty(f"Relevance by {facet}")
    sub = sub.with_columns(pl.format("{} of {} pairs", "positives", "pairs").alias("label"))
    base = alt.Chart(sub).encode(
        y=alt.Y("value:N", sort="-x", title=facet),
        x=alt.X("relevance_rate:Q", title="share of pairs relevant", axis=alt.Axis(format="%", tickCount=5),
                scale=alt.Scale(domain=[0, 1])),
    )
    bars = base.mark_bar().encode(tooltip=["value", "pairs", "positives", "relevance_rate"])
    text = base.mark_text(align="left", dx=4, color="#444").encode(text="label:N")
    return (bars + text).properties(title=f"Share of relevant pairs by {facet} of the image", width=360,
                                    height=alt.Step(18))


def clip_analysis(hist: pl.DataFrame, by_rel: pl.DataFrame) -> alt.TopLevelMixin:
    if not hist.height:
        return _empty("clip_score by relevance (no scores)")
    color = _rel_color(hist["relevance_label"], "relevance")
    h = alt.Chart(hist).mark_bar(binSpacing=0).encode(
        x=alt.X("bin_start:Q", bin="binned", title="clip_score (cosine)"),
        x2="bin_end:Q",
        y=alt.Y("pairs:Q", stack="zero", title="pairs (stacked by label)", axis=alt.Axis(**COUNT_AXIS)),
        color=color,
        order=alt.Order("relevance_label:O"),
        tooltip=["bin_start", "bin_end", "relevance_label", "pairs"],
    ).properties(title="clip_score histogram by relevance label", width=360, height=240)
    box = by_rel.rename({"Relevance Label": "relevance_label"}).filter(pl.col("Count") > 0)
    b = alt.Chart(box).encode(y=alt.Y("relevance_label:O", title="relevance label"))
    whisk = b.mark_rule().encode(x=alt.X("Min:Q", title="clip_score", scale=alt.Scale(zero=False)), x2="Max:Q")
    iqr = b.mark_bar(size=14).encode(x="P25:Q", x2="P75:Q", color=color)
    med = b.mark_tick(color="black", size=14).encode(x="Median:Q")
    right = (whisk + iqr + med).properties(title="clip_score quartiles (min to max) by label", width=300,
                                           height=alt.Step(30))
    return alt.hconcat(h, right)


def clip_ranking_by_query(per_query: pl.DataFrame, overall: pl.DataFrame) -> alt.TopLevelMixin:
    if not per_query.height:
        return _empty("Ranking the pool by clip_score (no evaluable query)")
    vals = dict(zip(overall["metric"], overall["value"]))
    long = per_query.select("query_id", "ndcg@10", "mrr").unpivot(index="query_id", variable_name="metric")
    return alt.Chart(long).mark_bar().encode(
        x=alt.X("value:Q", bin=alt.Bin(maxbins=20, extent=[0, 1]), title="per-query value"),
        y=alt.Y("count():Q", title="queries", axis=alt.Axis(**COUNT_AXIS)),
        column=alt.Column("metric:N", title=None),
    ).properties(
        title=(f"Ranking each pool by clip_score: mean nDCG@10 {vals.get('ndcg@10', 0):.3f}, "
               f"MRR {vals.get('mrr', 0):.3f}"), width=240, height=200)


def pool_mix(pools: pl.DataFrame) -> alt.TopLevelMixin:
    if not pools.height:
        return _empty("Pool mix")
    names = ["planned candidates", "judged pairs"]
    long = pools.select("pool", pl.col("planned_candidates").alias(names[0]),
                        pl.col("judged_pairs").alias(names[1])).unpivot(
        index="pool", variable_name="count", value_name="n")
    return alt.Chart(long).mark_bar().encode(
        x=alt.X("pool:N", sort=pools["pool"].to_list(), title="candidate pool", axis=FLAT),
        xOffset=alt.XOffset("count:N", sort=names),
        y=alt.Y("n:Q", title="candidates / pairs", axis=alt.Axis(**COUNT_AXIS)),
        color=alt.Color("count:N", title=None, sort=names,
                        scale=alt.Scale(domain=names, range=[POOL_MIX_COLORS[n] for n in names])),
        tooltip=["pool", "count", "n"],
    ).properties(title="Pool mix: candidates planned and pairs judged", width=360, height=240)


def shortfalls(short: pl.DataFrame) -> alt.TopLevelMixin:
    if not short.height:
        return _empty("Plan shortfalls: none")
    return alt.Chart(short).mark_bar().encode(
        x=alt.X("pool:N", title="pool", axis=FLAT),
        y=alt.Y("missing:Q", title="candidates missing (all queries)", axis=alt.Axis(**COUNT_AXIS)),
        color=_category_color("reason", short["reason"], SHORTFALL_COLORS, title="cause",
                              legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=600)),
        tooltip=["pool", "reason", "queries", "wanted", "got", "missing"],
    ).properties(title="Plan shortfalls: candidates wanted but not found", width=320, height=220)


def losses(loss: pl.DataFrame, quarantine: pl.DataFrame) -> alt.TopLevelMixin:
    parts = []
    if loss.height:
        parts.append(alt.Chart(loss).mark_bar().encode(
            y=alt.Y("stage:N", title="stage"), x=alt.X("count:Q", title="items lost", axis=alt.Axis(**COUNT_AXIS)),
            color=_category_color("reason", loss["reason"], LOSS_COLORS),
            tooltip=["stage", "item_type", "reason", "count"],
        ).properties(title="Losses by stage and reason", width=320, height=alt.Step(22)))
    else:
        parts.append(_empty("Losses by stage: none"))
    if quarantine.height:
        parts.append(alt.Chart(quarantine).mark_bar(color=QUARANTINE_COLOR).encode(
            y=alt.Y("reason:N", title="reason"), x=alt.X("files:Q", title="files", axis=alt.Axis(**COUNT_AXIS)),
            tooltip=["reason", "files"],
        ).properties(title="Quarantined files by reason", width=260, height=alt.Step(22)))
    else:
        parts.append(_empty("Quarantine: none"))
    return alt.hconcat(*parts).resolve_scale(color="independent")


def _numeric_order(values: pl.Series) -> list[str]:
    """Category strings in numeric order where they are integers ("2" before "10"), the rest after."""
    def key(v: str):
        try:
            return (0, int(v), v)
        except (TypeError, ValueError):
            return (1, 0, str(v))
    return sorted(values.unique().to_list(), key=key)


def difficulty(dist: pl.DataFrame) -> alt.TopLevelMixin:
    if not dist.height:
        return _empty("Query difficulty: not in the plan")
    return alt.Chart(dist).mark_bar().encode(
        x=alt.X("value:N", title="candidates from this pool", axis=FLAT, sort=_numeric_order(dist["value"])),
        y=alt.Y("queries:Q", axis=alt.Axis(**COUNT_AXIS)),
        column=alt.Column("field:N", title=None, sort=list(POOL_ORDER)),
        tooltip=["field", "value", "queries"],
    ).resolve_scale(x="independent").properties(
        title="Query difficulty: how many candidates each query got from each pool", width=160, height=180)


def query_length(lengths: pl.DataFrame) -> alt.TopLevelMixin:
    if not lengths.height:
        return _empty("Query text length")
    counts = lengths.group_by("words").len("queries").sort("words")
    return alt.Chart(counts).mark_bar().encode(
        x=alt.X("words:O", title="words in the query text", axis=FLAT),
        y=alt.Y("queries:Q", axis=alt.Axis(**COUNT_AXIS)),
    ).properties(title="Query text length", width=360, height=200)

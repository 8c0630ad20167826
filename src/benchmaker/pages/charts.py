"""A chart (altair) as a PNG file, rendered by vl-convert in the house style: the one way every stage
writes its charts (the summary's, evaluate's leaderboard)."""

from __future__ import annotations

from pathlib import Path

import altair as alt

from ..chart_png import PngProcess, write

__all__ = ["VL_VERSION", "save", "spec", "NEUTRAL", "REL_COLORS", "REL_EXTRA", "STATUS_COLORS", "QUARANTINE_COLOR",
           "POOL_MIX_COLORS", "SHORTFALL_COLORS", "LOSS_COLORS", "JUDGE_COLORS"]

# the Vega-Lite version vl-convert renders with: altair's (altair.utils._importers.vl_version_for_vl_convert)
VL_VERSION = "_".join(alt.SCHEMA_VERSION.split(".")[:2])
# One meaning per colour across the report (summary and leaderboard charts; tests/test_charts_readable.py):
# every colour a chart uses comes from here and means one thing. Bars that encode nothing are NEUTRAL.
NEUTRAL = "#7f8c99"
# relevance labels: 0 (not relevant) grey, positives in distinct colours (binary 0/1, graded 0..3, more)
REL_COLORS = {0: "#9e9e9e", 1: "#4c78a8", 2: "#f58518", 3: "#54a24b"}
REL_EXTRA = ("#72b7b2", "#b279a2", "#ff9da6", "#eeca3b")
STATUS_COLORS = {"has positives": "#1f4e79", "no positive (flagged)": "#c0392b"}
QUARANTINE_COLOR = "#e45756"
POOL_MIX_COLORS = {"planned candidates": "#9d755d", "judged pairs": "#bab0ac"}
SHORTFALL_COLORS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666")
LOSS_COLORS = ("#66c2a5", "#fc8d62", "#8da0cb", "#e78ac3", "#a6d854", "#ffd92f", "#e5c494", "#b3b3b3")
# the leaderboard's charts: a system that reads the annotator's text (what the judge saw) or not
JUDGE_COLORS = {False: "#264653", True: "#e76f51"}


def spec(chart: alt.TopLevelMixin) -> dict:
    """The chart's Vega-Lite spec in the house style, validated, data inlined: what ``Chart.save``
    hands vl-convert."""
    chart = chart.configure_view(stroke=None).configure_title(anchor="start", fontSize=14).configure_bar(
        color=NEUTRAL).configure_point(color=NEUTRAL)
    with alt.data_transformers.enable("default"), alt.data_transformers.disable_max_rows():
        return chart.to_dict(context={"pre_transform": False})


def save(chart: alt.TopLevelMixin, path: Path, scale_factor: float, png: PngProcess | None = None) -> Path:
    """Write the chart as PNG, in ``png``'s helper process when given (the file is complete once
    ``png.close()`` returns), else here; the same bytes as ``Chart.save`` either way."""
    if png is not None:
        png.submit(spec(chart), VL_VERSION, scale_factor, path)
    else:
        write(spec(chart), VL_VERSION, scale_factor, path)
    return path

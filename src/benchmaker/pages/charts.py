"""A chart (altair) as a PNG file, rendered by vl-convert in the house style: the one way every stage
writes its charts (the summary's, evaluate's leaderboard)."""

from __future__ import annotations

from pathlib import Path

import altair as alt

from ..chart_png import PngProcess, write

__all__ = ["VL_VERSION", "save", "spec"]

# the Vega-Lite version vl-convert renders with: altair's (altair.utils._importers.vl_version_for_vl_convert)
VL_VERSION = "_".join(alt.SCHEMA_VERSION.split(".")[:2])


def spec(chart: alt.TopLevelMixin) -> dict:
    """The chart's Vega-Lite spec in the house style, validated, data inlined: what ``Chart.save``
    hands vl-convert."""
    chart = chart.configure_view(stroke=None).configure_title(anchor="start", fontSize=14)
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

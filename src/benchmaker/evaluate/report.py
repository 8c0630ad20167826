"""The leaderboard where people look: a section of the summary report and of the dataset card.

Both read ``evaluate/leaderboard.csv`` (written by :mod:`.metrics`); the charts are altair, rendered to
PNG like the summary's own charts. Systems that read the annotator's text (what the judge labelled
from) are marked "sees what the judge saw".
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl

__all__ = [
    "JUDGE_NOTE",
    "RESULT_FILES",
    "card_markdown",
    "copy_results",
    "leaderboard_table",
    "summary_section",
    "write_charts",
]

RESULT_FILES = ("leaderboard.csv", "leaderboard.json", "drilldown.csv", "significance.csv")
JUDGE_NOTE = ("Systems marked \"sees what the judge saw\" read the vision annotator's summaries and tags, the text "
              "the judge labelled from: their scores are optimistic and not comparable to image-only systems.")
CHARTS = ("leaderboard.png", "quality_vs_latency.png")


def _first_k(board: pl.DataFrame, prefix: str) -> str | None:
    return next((c for c in board.columns if c.startswith(prefix)), None)


def leaderboard_table(board: pl.DataFrame) -> pl.DataFrame:
    """The compact table shown in the report and the card (one row per system and scope)."""
    if not board.height:
        return board
    keep = ["system", "kind", "scope"]
    for prefix in ("ndcg@", "map", "mrr", "precision@", "recall@", "hit_rate@", "diversity@", "judged@"):
        c = _first_k(board, prefix)
        if c:
            keep.append(c)
    keep += [c for c in ("images_per_s", "query_latency_ms", "cost_usd") if c in board.columns]
    out = board.select(keep).with_columns(
        pl.when(board["sees_judge_text"].cast(pl.Boolean)).then(pl.lit("yes")).otherwise(pl.lit(""))
        .alias("sees what the judge saw"))
    return out.with_columns(pl.col(pl.Float64).round(4))


def write_charts(board: pl.DataFrame, out_dir: Path, scale_factor: float = 2.0) -> list[str]:
    """``leaderboard.png`` (main metric per system and scope) and ``quality_vs_latency.png``."""
    import altair as alt

    from ..summary.charts import save

    if not board.height:
        return []
    metric = _first_k(board, "ndcg@") or "map"
    data = board.select("system", "scope", pl.col(metric).alias("value"),
                        pl.col("query_latency_ms").cast(pl.Float64), pl.col("sees_judge_text").cast(pl.Boolean))
    bars = alt.Chart(data).mark_bar().encode(
        y=alt.Y("system:N", sort="-x", title=None), x=alt.X("value:Q", title=metric),
        color=alt.Color("sees_judge_text:N", title="sees what the judge saw"),
        row=alt.Row("scope:N", title=None)).properties(width=360, title=f"{metric} by system and scope")
    save(bars, out_dir / CHARTS[0], scale_factor)
    pts = data.filter(pl.col("scope") == "pool").drop_nulls("query_latency_ms")
    if pts.height:
        scatter = alt.Chart(pts).mark_point(filled=True, size=80).encode(
            x=alt.X("query_latency_ms:Q", scale=alt.Scale(type="symlog"), title="query latency (ms, per query)"),
            y=alt.Y("value:Q", title=f"{metric} (pool)"), tooltip=["system", "value", "query_latency_ms"],
            color=alt.Color("system:N")).properties(width=360, height=240, title="quality vs compute")
        text = scatter.mark_text(dx=8, align="left").encode(text="system:N")
        save(scatter + text, out_dir / CHARTS[1], scale_factor)
        return list(CHARTS)
    return [CHARTS[0]]


def summary_section(leaderboard_csv: str | Path, out_dir: Path, scale_factor: float = 2.0):
    """A :class:`benchmaker.summary.report.Section` with the leaderboard, its charts and files."""
    from ..summary.report import Section

    src = Path(leaderboard_csv).parent
    board = pl.read_csv(leaderboard_csv) if Path(leaderboard_csv).stat().st_size else pl.DataFrame()
    (out_dir / "evaluate").mkdir(exist_ok=True)
    for f in RESULT_FILES:
        if (src / f).is_file():
            shutil.copyfile(src / f, out_dir / "evaluate" / f)
    charts = write_charts(board, out_dir / "evaluate", scale_factor) if board.height else []
    text = ("Retrieval systems scored on this benchmark (docs/evaluate.md). Scope pool ranks each query's judged "
            "pool (as the Sage evaluator does); corpus ranks the whole benchmark corpus (unjudged images count as "
            "not relevant; judged@k says how much of the top k was judged); condensed drops the unjudged images "
            "first. " + JUDGE_NOTE)
    return Section("Retrieval leaderboard", text=text, images=[f"evaluate/{c}" for c in charts],
                   table=leaderboard_table(board) if board.height else pl.DataFrame({"system": []}),
                   files=[f"evaluate/{f}" for f in RESULT_FILES], max_rows=60,
                   empty="No retrieval system is configured (evaluate.systems).")


def card_markdown(leaderboard_csv: str | Path) -> str:
    """The card's leaderboard section (markdown)."""
    from ..summary.report import md_table

    path = Path(leaderboard_csv)
    board = pl.read_csv(path) if path.is_file() and path.stat().st_size else pl.DataFrame()
    if not board.height:
        return ""
    return ("## Leaderboard\n\nRetrieval systems evaluated on this benchmark with ranx (pool: each query's judged "
            "pool; corpus: the whole corpus, unjudged = not relevant; condensed: unjudged removed). "
            + JUDGE_NOTE + " Per-facet, per-pool and per-difficulty results and paired significance tests are in "
            "`evaluate/` (drilldown.csv, significance.csv); charts in `summary/evaluate/`.\n\n"
            + md_table(leaderboard_table(board), max_rows=60))


def copy_results(leaderboard_csv: str | Path, dest: Path) -> list[str]:
    """Copy the result files beside the leaderboard into ``dest``; returns the names copied."""
    src = Path(leaderboard_csv).parent
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for f in RESULT_FILES:
        if (src / f).is_file():
            shutil.copyfile(src / f, dest / f)
            copied.append(f)
    return copied

"""The leaderboard where people look: a section of the summary report and of the dataset card.

Both read ``evaluate/leaderboard.csv`` (written by :mod:`.stage`); the charts are altair, rendered to
PNG like the summary's own charts. Systems that read the annotator's text (what the judge labelled
from) are marked "sees what the judge saw".
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import polars as pl

from ..settings_schema import default

__all__ = [
    "JUDGE_NOTE",
    "RESULT_FILES",
    "card_markdown",
    "check_results",
    "copy_results",
    "leaderboard_table",
    "quality_vs_compute_chart",
    "RUN_FACT_COLUMNS",
    "run_facts",
    "sage_section",
    "sage_table",
    "summary_section",
    "summary_sections",
    "write_charts",
]

RESULT_FILES = ("leaderboard.csv", "leaderboard.json", "drilldown.csv", "significance.csv", "sage_leaderboard.csv")
JUDGE_NOTE = ("Systems marked \"sees what the judge saw\" read the vision annotator's summaries and tags, the text "
              "the judge labelled from: their scores are optimistic and not comparable to image-only systems.")
CHARTS = ("leaderboard.png", "quality_vs_latency.png")
# what varies from run to run (timings): kept in evaluate/ of the results folder and in the dataset's
# run_facts.json (docs/export.md), left out of the copies in the report and the dataset, and of their tables
RUN_FACT_COLUMNS = ("images_per_s", "query_latency_ms", "seconds")
RUN_FACT_KEYS = ("seconds", "timing")
SAGE_NOTE = ("The same runs scored as the Sage team's evaluator (imsearch_eval) reports them, so they compare with "
             "historical query_eval_metrics.csv files: the judged pools together are the collection (an image in "
             "two pools is two objects), each distinct query text returns the top `limit` objects, and precision, "
             "NDCG and reciprocal rank are taken over that returned list, other queries' rows included "
             "(docs/evaluate.md, \"Comparing with the Sage evaluator\"). Per-query values in evaluate/sage/.")
# the columns shown (means over the queries; pandas-style, NaN skipped), in imsearch_eval's names
SAGE_SHOWN = ("accuracy", "precision", "recall", "hit", "diversity")


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
    keep += [c for c in ("cost_usd",) if c in board.columns]  # timings: run facts (RUN_FACT_COLUMNS)
    out = board.select(keep).with_columns(
        pl.when(board["sees_judge_text"].cast(pl.Boolean)).then(pl.lit("yes")).otherwise(pl.lit(""))
        .alias("sees what the judge saw"))
    return out.with_columns(pl.col(pl.Float64).round(4))


def _read(path: Path) -> pl.DataFrame:
    return pl.read_csv(path) if path.is_file() and path.stat().st_size else pl.DataFrame()


def check_results(leaderboard_csv: str | Path) -> None:
    """Every result file the evaluate rule writes beside the leaderboard is there (RESULT_FILES and a
    ``sage/<system>.csv`` per system of the sage leaderboard): the report and the dataset show them
    all, so a missing one is an error naming it, never a report with less. A job that reads them must
    declare them (rules/common.smk ``evaluate_report_inputs``): a pod has only what it declares."""
    from ..errors import UserError

    folder = Path(leaderboard_csv).parent
    missing = [f for f in RESULT_FILES if not (folder / f).is_file()]
    sage = _read(folder / "sage_leaderboard.csv")
    if sage.height and "system" in sage.columns:
        missing += [f"sage/{name}.csv" for name in sage["system"].unique(maintain_order=True)
                    if not (folder / "sage" / f"{name}.csv").is_file()]
    if missing:
        raise UserError(f"{folder}: {', '.join(missing)} missing beside {Path(leaderboard_csv).name}: the evaluate "
                        "rule writes them; a job that reads them must declare them as inputs (rules/common.smk "
                        "evaluate_report_inputs), or rerun the evaluate target")


def sage_table(sage_board: pl.DataFrame) -> pl.DataFrame:
    """The compact sage table (one row per system): limit, complete queries, the means."""
    if not sage_board.height:
        return sage_board
    ranked = [c for c in sage_board.columns if c.endswith(("_NDCG", "_reciprocal_rank"))]
    keep = ["system", "kind", "queries", "complete_queries", "limit", *ranked, *SAGE_SHOWN]
    out = sage_board.select([c for c in keep if c in sage_board.columns]).with_columns(
        pl.when(sage_board["sees_judge_text"].cast(pl.Boolean)).then(pl.lit("yes")).otherwise(pl.lit(""))
        .alias("sees what the judge saw"))
    return out.with_columns(pl.col(pl.Float64).round(4))


def write_charts(board: pl.DataFrame, out_dir: Path,
                 scale_factor: float = default("summary.scale_factor"), png=None) -> list[str]:
    """``leaderboard.png`` (main metric per system and scope) and ``quality_vs_latency.png`` (rendered in
    ``png``, a :class:`benchmaker.chart_png.PngProcess`, when given: complete once it is closed)."""
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
    save(bars, out_dir / CHARTS[0], scale_factor, png)
    chart = quality_vs_compute_chart(board)
    if chart is not None:
        save(chart, out_dir / CHARTS[1], scale_factor, png)
        return list(CHARTS)
    return [CHARTS[0]]


def quality_vs_compute_chart(board: pl.DataFrame):
    """The main metric (pool scope) against the query latency on a **log** axis, so that a 1 ms system
    and a 10 s one both read (a linear or symlog axis squeezes everything below a few ms into one
    point); None when no system has a latency. Latencies are run facts: this chart is in the results
    folder's report only, not in the published dataset (docs/export.md)."""
    import altair as alt

    if not board.height or "query_latency_ms" not in board.columns:
        return None
    metric = _first_k(board, "ndcg@") or "map"
    pts = board.filter(pl.col("scope") == "pool").select(
        "system", pl.col(metric).alias("value"), pl.col("query_latency_ms").cast(pl.Float64)).filter(
        pl.col("query_latency_ms") > 0)
    if not pts.height:
        return None
    lo, hi = pts["query_latency_ms"].min(), pts["query_latency_ms"].max()
    domain = [10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi) + (hi == lo))]
    scatter = alt.Chart(pts).mark_point(filled=True, size=80).encode(
        x=alt.X("query_latency_ms:Q", scale=alt.Scale(type="log", domain=domain),
                axis=alt.Axis(format="~s"), title="query latency (ms per query, log scale)"),
        y=alt.Y("value:Q", title=f"{metric} (pool)"), tooltip=["system", "value", "query_latency_ms"],
        color=alt.Color("system:N", legend=None)).properties(width=420, height=260, title="quality vs compute")
    text = scatter.mark_text(dx=8, align="left").encode(text="system:N")
    return scatter + text


def summary_section(leaderboard_csv: str | Path, out_dir: Path, scale_factor: float = default("summary.scale_factor"),
                    png=None):
    """A :class:`benchmaker.summary.report.Section` with the leaderboard, its charts and files."""
    from ..summary.report import Section

    board = pl.read_csv(leaderboard_csv) if Path(leaderboard_csv).stat().st_size else pl.DataFrame()
    copy_results(leaderboard_csv, out_dir / "evaluate")  # with the sage view's per-system files
    charts = write_charts(board, out_dir / "evaluate", scale_factor, png) if board.height else []
    text = ("Retrieval systems scored on this benchmark (docs/evaluate.md). Scope pool ranks each query's judged "
            "pool (only judged images, like the Sage evaluator, whose own statistics follow in the next section); "
            "corpus ranks the whole benchmark corpus (unjudged images count as not relevant; judged@k says how "
            "much of the top k was judged); condensed drops the unjudged images first. " + JUDGE_NOTE)
    return Section("Retrieval leaderboard", text=text, images=[f"evaluate/{c}" for c in charts],
                   table=leaderboard_table(board) if board.height else pl.DataFrame({"system": []}),
                   files=[f"evaluate/{f}" for f in RESULT_FILES], max_rows=60,
                   empty="No retrieval system is configured (evaluate.systems).")


def sage_section(leaderboard_csv: str | Path):
    """The report's "As the Sage evaluator reports it" section, or None without a sage leaderboard."""
    from ..summary.report import Section

    board = _read(Path(leaderboard_csv).parent / "sage_leaderboard.csv")
    if not board.height:
        return None
    return Section("Retrieval leaderboard as the Sage evaluator reports it", text=SAGE_NOTE,
                   table=sage_table(board), files=["evaluate/sage_leaderboard.csv"], max_rows=60)


def summary_sections(leaderboard_csv: str | Path, out_dir: Path,
                     scale_factor: float = default("summary.scale_factor"), png=None) -> list:
    """The report's evaluate sections: the leaderboard, then (when written) its sage view."""
    from .compare import compare_section

    check_results(leaderboard_csv)
    sections = [summary_section(leaderboard_csv, out_dir, scale_factor, png)]
    sage = sage_section(leaderboard_csv)
    changes = compare_section(leaderboard_csv, out_dir)  # with evaluate.compare.baseline: regressions flagged
    return sections + ([sage] if sage is not None else []) + ([changes] if changes is not None else [])


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
            + md_table(leaderboard_table(board), max_rows=60) + _card_sage(path))


def _card_sage(leaderboard_csv: Path) -> str:
    from ..summary.report import md_table

    board = _read(leaderboard_csv.parent / "sage_leaderboard.csv")
    if not board.height:
        return ""
    return ("\n### As the Sage evaluator reports it\n\n" + SAGE_NOTE + " Files: `evaluate/sage_leaderboard.csv`, "
            "`evaluate/sage/<system>.csv`.\n\n" + md_table(sage_table(board), max_rows=60))


def run_facts(leaderboard_csv: str | Path) -> dict:
    """The timings of the evaluation (what :func:`copy_results` leaves out), per system."""
    path = Path(leaderboard_csv).parent / "leaderboard.json"
    if not path.is_file():
        return {}
    doc = json.loads(path.read_text())
    out = {s["name"]: {k: s[k] for k in RUN_FACT_KEYS if k in s} for s in doc.get("systems") or []}
    if (doc.get("sage") or {}).get("seconds") is not None:
        out["sage_view_seconds"] = doc["sage"]["seconds"]
    return out


def copy_results(leaderboard_csv: str | Path, dest: Path) -> list[str]:
    """Copy the result files beside the leaderboard into ``dest`` without their run facts (timings,
    :data:`RUN_FACT_COLUMNS`: the copies are the same bytes for the same benchmark and systems);
    returns the names copied."""
    check_results(leaderboard_csv)
    src = Path(leaderboard_csv).parent
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for f in RESULT_FILES:
        if (src / f).is_file():
            if f == "leaderboard.csv" and (src / f).stat().st_size:
                board = pl.read_csv(src / f)
                board.drop([c for c in RUN_FACT_COLUMNS if c in board.columns]).write_csv(dest / f)
            elif f == "leaderboard.json":
                doc = json.loads((src / f).read_text())
                for s in doc.get("systems") or []:
                    for k in RUN_FACT_KEYS:
                        s.pop(k, None)
                    for scores in (s.get("results") or {}).values():
                        for k in RUN_FACT_COLUMNS:
                            scores.pop(k, None)
                (doc.get("sage") or {}).pop("seconds", None)
                (dest / f).write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            else:
                shutil.copyfile(src / f, dest / f)
            copied.append(f)
    for f in sorted((src / "sage").glob("*.csv")) if (src / "sage").is_dir() else []:
        (dest / "sage").mkdir(exist_ok=True)
        shutil.copyfile(f, dest / "sage" / f.name)
        copied.append(f"sage/{f.name}")
    return copied

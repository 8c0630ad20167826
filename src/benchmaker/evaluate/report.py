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
from .scopes import SCOPES, scopes_note

__all__ = [
    "JUDGE_NOTE",
    "RESULT_FILES",
    "card_markdown",
    "check_results",
    "copy_results",
    "label_rows",
    "leaderboard_table",
    "quality_vs_compute_chart",
    "RUN_FACT_COLUMNS",
    "run_facts",
    "sage_section",
    "sage_table",
    "summary_section",
    "summary_sections",
    "verdict_note",
    "verdict_section",
    "verdict_table",
    "write_charts",
]

RESULT_FILES = ("leaderboard.csv", "leaderboard.json", "drilldown.csv", "significance.csv", "sage_leaderboard.csv")
JUDGE_NOTE = ("Systems marked \"sees what the judge saw\" read the vision annotator's summaries and tags, the text "
              "the judge labelled from: their scores are optimistic and not comparable to image-only systems.")
CHARTS = ("leaderboard.png", "quality_vs_latency.png")
NOTE_GREY = "#888888"  # leader lines from a point to its label (summary.charts.NOTE: not a data colour)
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
    declare them (rules/evaluate_common.smk ``evaluate_report_inputs``): a pod has only what it declares."""
    from ..errors import UserError

    folder = Path(leaderboard_csv).parent
    missing = [f for f in RESULT_FILES if not (folder / f).is_file()]
    sage = _read(folder / "sage_leaderboard.csv")
    if sage.height and "system" in sage.columns:
        missing += [f"sage/{name}.csv" for name in sage["system"].unique(maintain_order=True)
                    if not (folder / "sage" / f"{name}.csv").is_file()]
    if missing:
        raise UserError(f"{folder}: {', '.join(missing)} missing beside {Path(leaderboard_csv).name}: the evaluate "
                        "rule writes them; a job that reads them must declare them as inputs "
                        "(rules/evaluate_common.smk evaluate_report_inputs), or rerun the evaluate target")


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


def _max_p(leaderboard_csv: Path) -> float:
    doc = leaderboard_csv.parent / "leaderboard.json"
    if doc.is_file():
        v = json.loads(doc.read_text()).get("max_p")
        if v is not None:
            return float(v)
    return float(default("evaluate.max_p"))


def _main_metric(sig: pl.DataFrame) -> str:
    metrics = sig["metric"].unique(maintain_order=True).to_list()
    return next((m for m in metrics if m.startswith("ndcg@")), metrics[0])


def verdict_table(sig: pl.DataFrame, board: pl.DataFrame, level: float) -> pl.DataFrame:
    """Which system is better, by how much and how sure: per scope and pair of ``significance.csv``, on
    the main metric (the first nDCG@k), the system with the higher mean first, the difference, its
    ``level`` confidence interval, the corrected p-value and the verdict in words."""
    if not sig.height or "delta" not in sig.columns:
        return pl.DataFrame()
    sees = {r["system"]: bool(r["sees_judge_text"]) for r in board.iter_rows(named=True)} if board.height else {}
    ci_col = f"{100 * level:.4g}% CI"
    rows = []
    for r in sig.filter(pl.col("metric") == _main_metric(sig)).iter_rows(named=True):
        a, b, d, lo, hi = r["system_a"], r["system_b"], r["delta"], r["ci_low"], r["ci_high"]
        if d is not None and d < 0:
            a, b, d = b, a, -d
            lo, hi = (None if hi is None else -hi), (None if lo is None else -lo)
        verdict = f"{a} is better" if r["significant"] else "no significant difference"
        judged = [x for x in (a, b) if sees.get(x)]
        if len(judged) == 1:
            verdict += f"; {judged[0]} sees what the judge saw: not comparable"
        rows.append({"scope": r["scope"], "metric": r["metric"], "higher": a, "lower": b, "difference": d,
                     ci_col: "" if lo is None else f"[{lo:.4g}, {hi:.4g}]", "queries": r["queries"],
                     "p adjusted": r["p_adjusted"], "verdict": verdict})
    return pl.DataFrame(rows)


def verdict_note(sig: pl.DataFrame, level: float) -> str:
    first = sig.row(0, named=True)
    return (f"Each pair of systems per scope on {_main_metric(sig)} (the leaderboard's first metric; MAP and MRR "
            "are in `evaluate/significance.csv`): the higher mean first, the difference of the means, its "
            f"{100 * level:.4g}% paired-t confidence interval over the queries both systems were scored on (not "
            f"adjusted for the number of pairs) and the paired {first['test']} test's p-value, "
            f"{first['correction']}-corrected across the pairs; \"better\" when that is at most {1 - level:.4g}. "
            "A smaller true difference than the power block's minimum detectable difference may go unseen "
            "(\"How far to trust this benchmark\"; docs/evaluate.md, \"Drill-downs, significance, cost\").")


def _verdict(leaderboard_csv: Path, board: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    sig = _read(leaderboard_csv.parent / "significance.csv")
    level = 1 - _max_p(leaderboard_csv)
    table = verdict_table(sig, board, level)
    return table, (verdict_note(sig, level) if table.height else "")


def write_charts(board: pl.DataFrame, out_dir: Path,
                 scale_factor: float = default("summary.scale_factor"), png=None) -> list[str]:
    """``leaderboard.png`` (main metric per system and scope) and ``quality_vs_latency.png`` (rendered in
    ``png``, a :class:`benchmaker.chart_png.PngProcess`, when given: complete once it is closed)."""
    import altair as alt

    from ..pages.charts import save

    if not board.height:
        return []
    metric = _first_k(board, "ndcg@") or "map"
    data = board.select("system", "scope", pl.col(metric).alias("value"),
                        pl.col("query_latency_ms").cast(pl.Float64), pl.col("sees_judge_text").cast(pl.Boolean))
    bars = alt.Chart(data).mark_bar().encode(
        y=alt.Y("system:N", sort="-x", title=None), x=alt.X("value:Q", title=metric),
        color=_judge_color(), row=alt.Row("scope:N", title=None, sort=list(SCOPES))).properties(
        width=360, title=f"{metric} by system and scope")
    save(bars, out_dir / CHARTS[0], scale_factor, png)
    chart = quality_vs_compute_chart(board)
    if chart is not None:
        save(chart, out_dir / CHARTS[1], scale_factor, png)
        return list(CHARTS)
    return [CHARTS[0]]


def _judge_color():
    """The report's one colour meaning in the leaderboard charts: sees what the judge saw, or not."""
    import altair as alt

    from ..pages.charts import JUDGE_COLORS

    return alt.Color("sees_judge_text:N", title="sees what the judge saw",
                     scale=alt.Scale(domain=list(JUDGE_COLORS), range=list(JUDGE_COLORS.values())),
                     legend=alt.Legend(orient="bottom", labelExpr="datum.value ? 'yes' : 'no'"))


LABEL_GAP = 15  # px between two labels' baselines (11 px text)


def label_rows(py: list[float], height: float, gap: float = LABEL_GAP) -> list[float]:
    """Label positions (px, top = 0) for points at heights ``py``: each label as near its point as it can be
    and at least ``gap`` from the next, inside [0, height] when there is room (in the points' order)."""
    order = sorted(range(len(py)), key=lambda i: (py[i], i))
    ys = [0.0] * len(py)
    last = -gap
    for i in order:  # downwards: never closer than gap to the label above
        last = ys[i] = max(py[i], last + gap)
    nxt = height + gap
    for i in reversed(order):  # upwards: back inside the plot where the last ones overflowed
        nxt = ys[i] = min(ys[i], nxt - gap)
    last = -gap
    for i in order:  # more labels than fit: below the plot rather than over each other
        last = ys[i] = max(ys[i], last + gap, 0.0)
    return ys


def quality_vs_compute_chart(board: pl.DataFrame):
    """The main metric (pool scope) against the query latency on a **log** axis, so that a 1 ms system
    and a 10 s one both read (a linear or symlog axis squeezes everything below a few ms into one
    point); None when no system has a latency. Colour: sees what the judge saw (as in the bar chart).
    Each system is named in a column right of the plot, its label placed apart from the others and
    joined to its point by a thin line, so no label hides another or a point, however close the points
    (two systems at the same quality). Latencies are run facts: this chart is in the results folder's
    report only, not in the published dataset (docs/export.md)."""
    import altair as alt

    if not board.height or "query_latency_ms" not in board.columns:
        return None
    metric = _first_k(board, "ndcg@") or "map"
    pts = board.filter(pl.col("scope") == "pool").select(
        "system", pl.col(metric).alias("value"), pl.col("query_latency_ms").cast(pl.Float64),
        pl.col("sees_judge_text").cast(pl.Boolean)).filter(pl.col("query_latency_ms") > 0).sort("system")
    if not pts.height:
        return None
    width, height = 420, 260
    lo, hi = pts["query_latency_ms"].min(), pts["query_latency_ms"].max()
    domain = [10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi) + (hi == lo))]
    vmin, vmax = float(pts["value"].min()), float(pts["value"].max())
    pad = max(0.02, (vmax - vmin) * 0.1)
    ydom = [max(0.0, vmin - pad), vmax + pad]
    ln = [math.log10(d) for d in domain]
    px = [width * (math.log10(x) - ln[0]) / (ln[1] - ln[0]) for x in pts["query_latency_ms"]]
    py = [height * (1 - (v - ydom[0]) / (ydom[1] - ydom[0])) for v in pts["value"]]
    pts = pts.with_columns(pl.Series("px", px), pl.Series("py", py),
                           pl.Series("ly", label_rows(py, height)), pl.lit(width + 14.0).alias("lx"))
    base = alt.Chart(pts)
    scatter = base.mark_point(filled=True, size=80, opacity=0.85).encode(
        x=alt.X("query_latency_ms:Q", scale=alt.Scale(type="log", domain=domain),
                axis=alt.Axis(format="~s"), title="query latency (ms per query, log scale)"),
        y=alt.Y("value:Q", scale=alt.Scale(domain=ydom, zero=False, nice=False), title=f"{metric} (pool)"),
        tooltip=["system", "value", "query_latency_ms"], color=_judge_color())
    leaders = base.mark_rule(color=NOTE_GREY, strokeWidth=0.7, opacity=0.8).encode(
        x=alt.X("px:Q", scale=None), y=alt.Y("py:Q", scale=None), x2="lx", y2="ly")
    labels = base.mark_text(align="left", baseline="middle", dx=3, fontSize=11, color="#333333").encode(
        x=alt.X("lx:Q", scale=None), y=alt.Y("ly:Q", scale=None), text="system:N")
    # padding: room for a label a browser's font draws wider than vl-convert measured it
    return alt.layer(scatter, leaders, labels).properties(
        width=width, height=height, title="quality vs compute", padding={"left": 5, "top": 5, "right": 40, "bottom": 5})


def summary_section(leaderboard_csv: str | Path, out_dir: Path, scale_factor: float = default("summary.scale_factor"),
                    png=None):
    """A :class:`benchmaker.pages.report.Section` with the leaderboard, its charts and files."""
    from ..pages.report import Section

    board = pl.read_csv(leaderboard_csv) if Path(leaderboard_csv).stat().st_size else pl.DataFrame()
    copy_results(leaderboard_csv, out_dir / "evaluate")  # with the sage view's per-system files
    charts = write_charts(board, out_dir / "evaluate", scale_factor, png) if board.height else []
    text = ("Retrieval systems scored on this benchmark with ranx (docs/evaluate.md, \"Metrics and scopes\"). "
            + scopes_note() + " " + JUDGE_NOTE)
    return Section("Retrieval leaderboard", text=text, images=[f"evaluate/{c}" for c in charts],
                   table=leaderboard_table(board) if board.height else pl.DataFrame({"system": []}),
                   files=[f"evaluate/{f}" for f in RESULT_FILES], max_rows=60,
                   empty="No retrieval system is configured (evaluate.systems).")


def sage_section(leaderboard_csv: str | Path):
    """The report's "As the Sage evaluator reports it" section, or None without a sage leaderboard."""
    from ..pages.report import Section

    board = _read(Path(leaderboard_csv).parent / "sage_leaderboard.csv")
    if not board.height:
        return None
    return Section("Retrieval leaderboard as the Sage evaluator reports it", text=SAGE_NOTE,
                   table=sage_table(board), files=["evaluate/sage_leaderboard.csv"], max_rows=60)


def verdict_section(leaderboard_csv: str | Path):
    """The report's "Which system is better" section, or None with fewer than two systems."""
    from ..pages.report import Section

    path = Path(leaderboard_csv)
    table, note = _verdict(path, _read(path))
    if not table.height:
        return None
    return Section("Which system is better", text=note, table=table, files=["evaluate/significance.csv"], max_rows=60)


def summary_sections(leaderboard_csv: str | Path, out_dir: Path,
                     scale_factor: float = default("summary.scale_factor"), png=None) -> list:
    """The report's evaluate sections: the leaderboard, then (when written) its sage view."""
    from .compare import compare_section

    check_results(leaderboard_csv)
    sections = [summary_section(leaderboard_csv, out_dir, scale_factor, png)]
    verdict = verdict_section(leaderboard_csv)
    sections += [verdict] if verdict is not None else []
    sage = sage_section(leaderboard_csv)
    changes = compare_section(leaderboard_csv, out_dir)  # with evaluate.compare.baseline: regressions flagged
    return sections + ([sage] if sage is not None else []) + ([changes] if changes is not None else [])


def card_markdown(leaderboard_csv: str | Path) -> str:
    """The card's leaderboard section (markdown)."""
    from ..pages.report import md_table

    path = Path(leaderboard_csv)
    board = pl.read_csv(path) if path.is_file() and path.stat().st_size else pl.DataFrame()
    if not board.height:
        return ""
    return ("## Leaderboard\n\nRetrieval systems evaluated on this benchmark with ranx. " + scopes_note() + " "
            + JUDGE_NOTE + " Per-facet, per-pool and per-difficulty results and paired significance tests are in "
            "`evaluate/` (drilldown.csv, significance.csv); charts in `summary/evaluate/`.\n\n"
            + md_table(leaderboard_table(board), max_rows=60) + _card_verdict(path, board) + _card_sage(path))


def _card_verdict(leaderboard_csv: Path, board: pl.DataFrame) -> str:
    from ..pages.report import md_table

    table, note = _verdict(leaderboard_csv, board)
    if not table.height:
        return ""
    return "\n### Which system is better\n\n" + note + "\n\n" + md_table(table, max_rows=60)


def _card_sage(leaderboard_csv: Path) -> str:
    from ..pages.report import md_table

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

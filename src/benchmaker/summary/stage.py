"""The summary stage (`run`): statistics (CSV), charts (PNG), a contact sheet, report.md/.html and summary.json.

Every output is documented in docs/summary.md. Statistics are computed with polars on the whole
tables and only aggregated tables are charted, so the stage scales with the number of pairs.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl

from .. import __version__
from ..formats import FacetModel
from ..io import atomic_path, atomic_write_text
from ..logs import get_logger
from ..pages.outdir import staged_dir
from ..pages.report import Section, write_report
from . import stats
from .inputs import Corpus, Inputs, load_inputs
from .sheet import contact_sheet, sample_images

__all__ = ["run", "summarize", "key_numbers"]

log = get_logger("summary")
SUMMARY_JSON = "summary.json"


def _csv(df: pl.DataFrame, path: Path) -> None:
    flat = df.with_columns(pl.col(c).list.join("|") for c, t in df.schema.items()
                           if isinstance(t, pl.List) and t.inner == pl.String)
    with atomic_path(path, suffix=".csv") as tmp:
        flat.write_csv(tmp)


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else round(obj, 6)
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def key_numbers(t: dict[str, pl.DataFrame], inp: Inputs, ranking_info: dict[str, Any],
                corpus: Corpus) -> dict[str, Any]:
    q = t["query_relevancy_stats"]
    pos = q["positives"]
    scored = inp.scored
    losses: dict[str, dict[str, int]] = {}
    for stage, reason, n in t["losses_by_stage"].group_by("stage", "reason").agg(pl.col("count").sum()).sort(
            "stage", "reason").iter_rows():
        losses.setdefault(stage, {})[reason] = int(n)
    cost = t["cost_summary"]
    out: dict[str, Any] = {
        "pairs": scored.height,
        "queries": q.height,
        "images_in_pairs": scored["image_id"].n_unique(),
        "images_in_corpus": corpus.images,
        "annotated_images": corpus.annotations,
        "duplicate_groups": {"groups": corpus.duplicate_groups, "copies": corpus.duplicate_copies},
        "relevance_distribution": {str(k): int(v) for k, v in t["relevance_overview"].select(
            "relevance_label", "pairs").iter_rows()},
        "positive_pairs": int(pos.sum() or 0),
        "positives_per_query": {"mean": stats.safe_float(pos.mean()), "median": stats.safe_float(pos.median()),
                                "min": int(pos.min() or 0) if q.height else 0,
                                "max": int(pos.max() or 0) if q.height else 0},
        "pool_size": {"mean": stats.safe_float(q["count"].mean()), "min": int(q["count"].min() or 0) if q.height else 0,
                      "max": int(q["count"].max() or 0) if q.height else 0},
        "queries_without_positives": int(q["no_positives"].sum()),
        "queries_without_positives_ids": q.filter(pl.col("no_positives"))["query_id"].head(100).to_list(),
        "seed_not_relevant_queries": int(q["seed_not_relevant"].sum()),
        "seed_not_relevant_pairs": int(scored["seed_not_relevant"].sum()),
        "queries_without_seed_row": int((q["seeds"] == 0).sum()),
        "clip_score": {
            "missing": int(scored["clip_score"].null_count()),
            "mean_by_relevance": {str(r["Relevance Label"]): stats.safe_float(r["Mean"])
                                  for r in t["clip_score_stats_by_relevance"].iter_rows(named=True)},
        },
        "clip_ranking": {**{m: stats.safe_float(v) for m, v in t["clip_ranking_metrics"].iter_rows()},
                         **ranking_info},
        "pools": {r["pool"]: {k: r[k] for k in ("planned_candidates", "judged_pairs", "positives")}
                  for r in t["pool_mix"].iter_rows(named=True)},
        "shortfall": {"queries": int(inp.plan.select(pl.col("shortfall").list.len() > 0).sum().item())
                      if inp.plan.height else 0,
                      "missing_candidates": int(t["plan_shortfalls"]["missing"].sum() or 0)},
        # who labelled the pairs: the judge, or labels reused from paths.judge_reuse_file ("imported:...")
        "judges": {j: {"queries": int(nq), "pairs": int(npairs)} for j, nq, npairs in scored.group_by("judge").agg(
            pl.col("query_id").n_unique(), pl.len()).sort("judge").iter_rows()} if "judge" in scored.columns else {},
        "losses": losses,
        "losses_total": int(t["losses_by_stage"]["count"].sum() or 0),
        # of them, those of evaluated systems and of the audit's second judge: not the benchmark's own
        "losses_outside_benchmark": int(t["losses_by_stage"].filter(pl.col("stage").is_in(list(inp.outside_stages)))
                                        ["count"].sum() or 0),
        "quarantine": {r: int(n) for r, n in t["quarantine_by_reason"].iter_rows()},
        "quarantine_total": inp.quarantine.height,
        "costs": None if inp.costs is None else {
            "requests": int(cost["requests"].sum() or 0),
            "cached_requests": int(cost["cached_requests"].sum() or 0),
            "cost_usd": float(cost["cost_usd"].sum() or 0.0),
            "cost_usd_last_run": float(cost["cost_usd_last_run"].sum() or 0.0),
            # every stage whose cost files the totals count, the ones that paid nothing too
            "stages": list(inp.cost_stages),
            "by_stage": {s: {"requests": int(r), "input_tokens": int(i), "cached_input_tokens": int(c),
                             "output_tokens": int(o), "reasoning_tokens": int(rt), "cost_usd": float(u)}
                         for s, r, i, c, o, rt, u in cost.group_by("stage").agg(
                             pl.col("requests", "input_tokens", "cached_input_tokens", "output_tokens",
                                    "reasoning_tokens", "cost_usd").sum()).sort("stage").iter_rows()},
        },
    }
    return _clean(out)


def summarize(inp: Inputs, corpus: Corpus) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:
    """All statistics tables (name -> frame, name = CSV file stem) and the ranking info. ``inp`` holds
    the scored images' rows of images/annotations only; ``corpus`` the counts over every image."""
    fm, scored = inp.facets, inp.scored
    t: dict[str, pl.DataFrame] = {}
    t["relevance_overview"] = stats.relevance_overview(scored)
    t["query_relevancy_stats"] = stats.query_stats(scored)
    t["queries_without_positives"] = t["query_relevancy_stats"].filter(pl.col("no_positives")).select(
        "query_id", "query_text", "count", "seeds", "seed_not_relevant")
    t["query_text_length"] = stats.query_length_stats(t["query_relevancy_stats"])
    t["facet_distribution"] = stats.facet_distribution_counts(corpus.facet_counts, corpus.annotations, fm)
    t["relevance_by_facet"] = stats.relevance_by_facet(scored, inp.annotations, fm)
    t["top_tags"] = stats.top_tags_counts(corpus.tag_counts)
    t["clip_score_stats_by_relevance"] = stats.clip_stats_by_relevance(scored)
    t["clip_score_overall_stats"] = stats.clip_overall_stats(scored)
    t["clip_score_histogram"] = stats.clip_histogram(scored)
    t["clip_score_by_query_stats"] = stats.clip_by_query(scored)
    per_q, overall, info = stats.clip_ranking(scored)
    t["clip_ranking_by_query"], t["clip_ranking_metrics"] = per_q, overall
    t["pool_mix"] = stats.pool_mix(scored, inp.plan)
    t["plan_shortfalls"] = stats.shortfalls(inp.plan)
    t["difficulty_distribution"] = stats.difficulty_distribution(inp.plan)
    t["losses_by_stage"] = stats.loss_counts(inp.losses)
    t["quarantine_by_reason"] = stats.quarantine_counts(inp.quarantine)
    t["cost_summary"] = stats.cost_summary(inp.costs)
    t["dataset_summary_stats"] = stats.dataset_summary_stats(
        scored, t["query_relevancy_stats"], corpus.images, corpus.annotations,
        {name: corpus.unique_values(name) for name in fm.taxonomy}, fm)
    return t, info


def _charts(tables: Mapping[str, pl.DataFrame], fm: FacetModel) -> dict[str, Any]:
    """The summary's charts, by file name (drawn by :mod:`.charts` from the summary's tables)."""
    from . import charts

    pngs = {
        "relevance_overview.png": charts.relevance_overview(tables["relevance_overview"], tables["pool_mix"]),
        "positives_per_query.png": charts.positives_per_query(tables["query_relevancy_stats"]),
        "facet_distributions.png": charts.facet_distributions(tables["facet_distribution"]),
        "clip_score_analysis.png": charts.clip_analysis(tables["clip_score_histogram"],
                                                        tables["clip_score_stats_by_relevance"]),
        "clip_ranking_by_query.png": charts.clip_ranking_by_query(tables["clip_ranking_by_query"],
                                                                  tables["clip_ranking_metrics"]),
        "pool_mix.png": charts.pool_mix(tables["pool_mix"]),
        "plan_shortfalls.png": charts.shortfalls(tables["plan_shortfalls"]),
        "difficulty_distribution.png": charts.difficulty(tables["difficulty_distribution"]),
        "losses.png": charts.losses(tables["losses_by_stage"], tables["quarantine_by_reason"]),
        "query_text_length_distribution.png": charts.query_length(tables["query_text_length"]),
    }
    for name in fm.names:
        pngs[f"relevance_by_{name}.png"] = charts.relevance_by_facet(tables["relevance_by_facet"], name)
    return pngs


def run(
    *,
    images: str,
    annotations: str,
    scored: str,
    summary: str,
    quarantine: str | None = None,
    plan: str | None = None,
    losses: str | Sequence[str] | None = None,
    loss_stages: Sequence[str | None] | None = None,
    costs: str | Sequence[str] | None = None,
    cost_stages: Sequence[str | None] | None = None,
    outside_stages: Sequence[str] | None = None,
    settings: Mapping[str, Any] | None = None,
    facets: Mapping[str, Any],
    columns: Mapping[str, str] | None = None,
    image_root: str = ".",
    benchmark_meta: Mapping[str, Any] | None = None,
    version: str | None = None,
    threads: int = 1,
    audit: str | None = None,
    evaluation: str | None = None,
    deepen: str | None = None,
    estimate: str | None = None,
    trust: str | None = None,
    leakage: str | None = None,
) -> dict[str, Any]:
    """``estimate``: the recorded estimate (``benchmaker estimate --record``), shown beside the bill."""
    from ..chart_png import PngProcess
    from ..settings_schema import filled

    # the charts render in a helper process (vl-convert holds the GIL while it renders): its engine
    # starts now, on another core, while this process reads the inputs and builds the charts
    with PngProcess() as png:
        settings = filled("summary", settings)
        scale = float(settings["scale_factor"])
        grid = int(settings["sample_grid"])
        meta = dict(benchmark_meta or {})
        t0 = time.perf_counter()
        # the scored images' rows, and counts over the whole corpus read block by block: memory is bounded
        # by the pairs, not by the number of images (docs/performance.md)
        inp = load_inputs(images=images, quarantine=quarantine, annotations=annotations, plan=plan, scored=scored,
                          losses=losses, costs=costs, columns=columns, facets=facets, corpus=True,
                          loss_stages=loss_stages, cost_stages=cost_stages, outside_stages=outside_stages)
        corpus = inp.corpus
        log.info("summary: %d pairs, %d images, %d annotations, %d planned queries, %d losses (read in %.1f s)",
                 inp.scored.height, corpus.images, corpus.annotations, inp.plan.height, inp.losses.height,
                 time.perf_counter() - t0)
        tables, info = summarize(inp, corpus)
        if estimate:     # what `benchmaker estimate` said beside what was billed (docs/openai.md, "Estimate")
            from ..estimate_file import read_estimate

            tables["estimate_vs_bill"] = stats.estimate_vs_bill(read_estimate(estimate)["stages"],
                                                                tables["cost_summary"])
        numbers = key_numbers(tables, inp, info, corpus)
        if estimate:
            numbers["estimate_vs_bill"] = _clean(tables["estimate_vs_bill"].to_dicts())
        numbers = {"benchmark": meta.get("name"), "version": meta.get("version"), "stage_version": version,
                   "benchmaker_version": __version__, **numbers}
        if numbers["queries_without_positives"]:
            log.warning("summary: %d queries have no positive pair (see queries_without_positives.csv)",
                        numbers["queries_without_positives"])
        fm = inp.facets
        with staged_dir(summary, SUMMARY_JSON) as out:
            for name, df in tables.items():
                _csv(df, out / f"{name}.csv")
            t1 = time.perf_counter()
            from ..pages.charts import save  # altair (~0.5 s of imports): only the stage that draws pays for it

            pngs = _charts(tables, fm)
            for name, chart in pngs.items():
                save(chart, out / name, scale, png)
            extra = []
            if evaluation:  # the evaluate target's leaderboard (docs/evaluate.md)
                from ..evaluate.report import summary_sections

                extra.extend(summary_sections(evaluation, out, scale, png))
            if leakage:  # seed leakage, from the evaluate aggregate (docs/evaluate.md)
                from ..evaluate.leakage_view import summary_section as leakage_section

                extra.append(leakage_section(leakage, out))
            # drawn here while the helper renders the charts
            sample = sample_images(inp.images, inp.scored["image_id"].unique(), grid)
            drawn = contact_sheet(sample, image_root, out / "random_image_sample.png", scale_factor=min(scale, 2.0))
            if drawn < sample.height:
                log.warning("summary: %d of %d sample images could not be read from %s",
                            sample.height - drawn, sample.height, image_root)
            numbers["sample_images"] = sample["image_id"].to_list()
            png.close()
            log.info("summary: %d charts and the contact sheet in %.1f s", len(pngs), time.perf_counter() - t1)
            atomic_write_text(out / SUMMARY_JSON, json.dumps(numbers, indent=2, ensure_ascii=False) + "\n")
            if deepen:  # pool deepening (docs/deepen.md)
                from ..deepen.report import summary_sections as deepen_sections

                extra.extend(deepen_sections(deepen, out))
            _report(out, meta, numbers, tables, fm, extra, audit=audit,
                    outside=stats.outside_note(tables["losses_by_stage"], inp.outside_stages),
                    first=_trust_sections(trust, audit, deepen, out))
        log.info("summary: wrote %s (%d pairs, %d queries, %d without positives) in %.1f s", summary,
                 numbers["pairs"], numbers["queries"], numbers["queries_without_positives"], time.perf_counter() - t0)
        return numbers


def _num(v: Any) -> str:
    return "n/a" if v is None else f"{v:g}"


def _losses_total(n: dict[str, Any]) -> str:
    """The key numbers' losses: the total, and how many of them are not the benchmark's own."""
    out = n.get("losses_outside_benchmark") or 0
    return str(n["losses_total"]) + (f" ({out} of a system under evaluation or the audit's second judge)"
                                      if out else "")


def _reused(n: dict[str, Any]) -> str:
    """'queries (pairs)' whose labels came from paths.judge_reuse_file: judge 'imported:...'
    (benchmaker.reuse.PREFIX; not imported here, the summary stage does not load the judge)."""
    rows = [v for j, v in (n.get("judges") or {}).items() if j.startswith("imported:")]
    return f"{sum(v['queries'] for v in rows)} ({sum(v['pairs'] for v in rows)} pairs)"


def _trust_sections(trust: str | None, audit: str | None, deepen: str | None, out: Path) -> list[Section]:
    """The report's opening "How far to trust this benchmark" sections (docs/trust.md), trust.json copied."""
    from .trust import copy_trust, summary_section

    copy_trust(trust, out / "evaluate")
    return summary_section(trust, audit, deepen)


def _overview(n: Mapping[str, Any]) -> pl.DataFrame:
    """The report's key numbers."""
    ppq = n["positives_per_query"]
    return pl.DataFrame({
        "metric": ["queries", "pairs (query, image)", "unique images in pairs", "images in corpus",
                   "positive pairs", "mean positives per query", "queries without a positive",
                   "queries whose seed was judged not relevant", "losses (all stages)", "quarantined files",
                   "pairs without clip_score", "queries with reused labels (paths.judge_reuse_file, not judged again)",
                   "duplicate groups in corpus (images beyond the first of each)"],
        "value": [str(n["queries"]), str(n["pairs"]), str(n["images_in_pairs"]), str(n["images_in_corpus"]),
                  str(n["positive_pairs"]), f"{ppq['mean'] or 0:.2f}", str(n["queries_without_positives"]),
                  str(n["seed_not_relevant_queries"]), _losses_total(n), str(n["quarantine_total"]),
                  str(n["clip_score"]["missing"]), _reused(n),
                  f"{n['duplicate_groups']['groups']} ({n['duplicate_groups']['copies']})"],
    })


def _cost_sections(n: Mapping[str, Any], t: Mapping[str, pl.DataFrame]) -> list[Section]:
    """The report's "API costs" (when the run counts costs) and "Estimate vs bill" (when an estimate was recorded)."""
    sections: list[Section] = []
    if n["costs"] is not None:
        c = n["costs"]
        over = stats.cost_coverage(t["cost_summary"], c.get("stages") or [])
        sections.append(Section(
            "API costs",
            text=(f"Total spend to date USD {c['cost_usd']:.4f} (all runs, interrupted ones included)"
                  f"{' ' + over if over else ''}; the last run USD {c['cost_usd_last_run']:.4f}. {c['requests']} "
                  "request row(s), "
                  f"{c['cached_requests']} of them answered from the response cache (no cost in that run)."
                  if c["requests"] else ""),
            table=t["cost_summary"], files=["cost_summary.csv"],
            empty=(f"No API request was recorded {over}: their adapters and systems in this run are offline "
                   "or pay nothing." if over else
                   "No API request was recorded: the vision and judge adapters of this run are offline.")))
    if "estimate_vs_bill" in t:
        ev = t["estimate_vs_bill"]
        sections.append(Section(
            "Estimate vs bill",
            text=("What `benchmaker estimate` said before paying (recorded in estimate/estimate.json: each stage's "
                  "requests still to send when it was made, plus what its pilot paid) beside the spend to date: "
                  f"the bill is inside the estimate's range for {int(ev['within_range'].sum())} of {ev.height} "
                  "stage(s)."),
            table=ev, files=["estimate_vs_bill.csv"]))
    return sections


def _report(out: Path, meta: Mapping[str, Any], n: dict[str, Any], t: dict[str, pl.DataFrame], fm,
            extra: Sequence[Section] = (), audit: str | None = None, outside: str = "",
            first: Sequence[Section] = ()) -> None:
    """``outside``: the note on the losses that are not the benchmark's own (stats.outside_note);
    ``first``: sections before the key numbers (the trust block)."""
    title = f"{meta.get('title') or meta.get('name') or 'benchmark'}: summary"
    ppq = n["positives_per_query"]
    overview = _overview(n)
    rk = n["clip_ranking"]
    sections = [
        *first,
        Section("Key numbers", table=overview, files=["summary.json", "dataset_summary_stats.csv"]),
        Section("Relevance", images=["relevance_overview.png"], table=t["relevance_overview"],
                files=["relevance_overview.csv"]),
        Section("Positives per query",
                text=(f"{n['queries_without_positives']} of {n['queries']} queries have no positive pair (listed "
                      "below); such a query scores 0 recall for every system and should be repaired or removed."
                      if n["queries_without_positives"] else
                      f"Every one of the {n['queries']} queries has at least one positive pair "
                      f"(min {ppq['min']}, median {_num(ppq['median'])}, max {ppq['max']})."),
                images=["positives_per_query.png"],
                table=t["queries_without_positives"] if n["queries_without_positives"] else None,
                files=["query_relevancy_stats.csv", "queries_without_positives.csv"]),
        Section("Candidate pools and difficulty", images=["pool_mix.png", "difficulty_distribution.png"],
                table=t["pool_mix"], files=["pool_mix.csv", "difficulty_distribution.csv"]),
        Section("Plan shortfalls",
                text=("Pools the planner could not fill to their quota, by general cause (the per-query "
                      "detail is in query_plan.jsonl, column shortfall)."
                      if t["plan_shortfalls"].height else ""),
                images=["plan_shortfalls.png"], table=t["plan_shortfalls"],
                files=["plan_shortfalls.csv"], empty="Every pool of every query was filled to its quota."),
        Section("clip_score by relevance", images=["clip_score_analysis.png"],
                table=t["clip_score_stats_by_relevance"],
                files=["clip_score_stats_by_relevance.csv", "clip_score_overall_stats.csv",
                       "clip_score_histogram.csv", "clip_score_by_query_stats.csv"]),
        Section("Baseline: ranking each pool by clip_score",
                text=(f"{rk.get('evaluated_queries', 0)} queries evaluated (metrics as defined by ranx; "
                      f"{rk.get('skipped_queries_without_positive', 0)} without a positive left out). "
                      "random_expected_precision is the mean positive rate, what a random order scores."),
                images=["clip_ranking_by_query.png"], table=t["clip_ranking_metrics"],
                files=["clip_ranking_metrics.csv", "clip_ranking_by_query.csv"]),
        Section("Facets", images=["facet_distributions.png"] + [f"relevance_by_{f}.png" for f in fm.names],
                table=t["facet_distribution"], files=["facet_distribution.csv", "relevance_by_facet.csv",
                                                      "top_tags.csv"], max_rows=60),
        Section("Losses and quarantine",
                text=(f"{n['quarantine_total']} file(s) quarantined by preprocess: "
                      + ", ".join(f"{r} {c}" for r, c in n["quarantine"].items()) + " (details in quarantine.jsonl)."
                      if n["quarantine_total"] else "No file was quarantined by preprocess.")
                + (" " + outside if outside else ""),
                images=["losses.png"], table=t["losses_by_stage"],
                files=["losses_by_stage.csv", "quarantine_by_reason.csv"],
                empty="No stage lost an image, query or pair."),
        Section("Query texts", images=["query_text_length_distribution.png"], files=["query_text_length.csv"]),
    ]
    sections += _cost_sections(n, t)
    sections.extend(extra)
    sections.append(Section("Sample images", text="A deterministic sample (lowest content hashes).",
                            images=["random_image_sample.png"]))
    from ..audit.render import summary_section  # the judge audit (docs/audit.md): "not audited yet" without one

    sections.append(summary_section(audit))
    intro = meta.get("description") or ""
    if meta.get("smoke_test"):   # a random / tiny model: say so before anything else (benchmaker.smoke)
        from ..smoke import BANNER

        title = f"SMOKE TEST - {title}"
        intro = BANNER.format(reason=meta.get("smoke_reason") or "a smoke-test configuration") + (
            f"\n\n{intro}" if intro else "")
    write_report(out, title, intro, sections)

"""The audit's rendering: its section of the summary report and of the dataset card, and the copy of
``audit/report/`` into the published dataset; all read from ``audit.json``, written by the
``audit_report`` stage (:mod:`.statistics`). Formats: docs/formats.md; meaning: docs/audit.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl

__all__ = ["summary_section", "card_markdown", "load_audit", "render_markdown", "export_files", "key_table",
           "MARKER"]

MARKER = "audit.json"


def load_audit(report_dir: str | Path | None) -> dict[str, Any] | None:
    if not report_dir:
        return None
    p = Path(report_dir) / MARKER
    if not p.is_file():
        return None
    return json.loads(p.read_text())


def _f(x: Any, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _with_ci(v: Any, ci: Sequence[Any] | None, undefined: int | None = None, reps: int | None = None) -> str:
    """``v [lo, hi]``, saying when the interval is degenerate (width zero) and how many of the ``reps``
    replicates were undefined (left out of the percentiles)."""
    if v is None:
        return "n/a (undefined)"
    notes = []
    if undefined and reps:
        notes.append(f"{undefined} of {reps} replicates undefined")
    if not ci or ci[0] is None:
        return _f(v) + (f" (no interval: {notes[0]})" if notes else "")
    if ci[0] == ci[1]:
        notes.insert(0, "degenerate: every defined replicate gives the same value")
    return f"{_f(v)} [{_f(ci[0])}, {_f(ci[1])}]" + (f" ({'; '.join(notes)})" if notes else "")


def key_table(info: Mapping[str, Any]) -> pl.DataFrame:
    rows = []
    reps = (info.get("bootstrap") or {}).get("replicates")
    for c in info.get("comparisons") or []:
        rows.append({"comparison": c["comparison"] + (" (all pairs)" if c.get("scope") == "all" else ""),
                     "pairs": str(c["pairs"]), "raw agreement": _with_ci(c.get("agreement"), c.get("agreement_ci")),
                     "Cohen's kappa": _with_ci(c.get("kappa"), c.get("kappa_ci"), c.get("kappa_undefined"), reps)}
                    | ({"weighted kappa (quadratic)": _with_ci(c.get("kappa_quadratic"), c.get("kappa_quadratic_ci"),
                                                               c.get("kappa_quadratic_undefined"), reps)}
                       if info.get("labels") == "graded" else {}))
    for m in info.get("multi_rater") or []:
        alpha = _with_ci(m["krippendorff_alpha"], [m["alpha_lo"], m["alpha_hi"]], m.get("alpha_undefined"), reps)
        rows.append({"comparison": f"Krippendorff's alpha, {m['raters']} ({m['n_raters']} raters)",
                     "pairs": str(m["pairs"]), "raw agreement": "",
                     "Cohen's kappa": f"alpha {alpha}; "
                                      f"Fleiss' kappa {_f(m['fleiss_kappa'])} ({m['fleiss_pairs']} pairs)"}
                    | ({"weighted kappa (quadratic)": ""} if info.get("labels") == "graded" else {}))
    return pl.DataFrame(rows) if rows else pl.DataFrame()


def _empty_files(info: Mapping[str, Any]) -> str:
    """The label files listed under ``audit.human_labels`` that label no pair (``audit.require_complete:
    false`` lets them through), named; "" when there are none."""
    empty = [f for f in info.get("label_files") or [] if not f.get("labels")]
    if not empty:
        return ""
    return ("Listed under audit.human_labels but holding no labels (0 of "
            f"{empty[0]['pairs']} sample pairs labelled): " + ", ".join(f"`{f['path']}`" for f in empty) + ".")


def _prose(info: Mapping[str, Any] | None) -> str:
    if info is None:
        return ("Not audited yet: the judge's labels have not been compared with human labels or with another "
                "judge (the audit stage did not run: audit.enabled is false).")
    smp = info["sample"]
    st = smp.get("settings") or {}
    head = (f"Audit sample: {smp['sample_pairs']} of {smp['population_pairs']} judged pairs "
            f"({smp['sample_queries']} of {smp['population_queries']} queries), stratified by "
            f"{', '.join(st.get('strata') or []) or 'nothing'} (seed {st.get('seed')}, sample id "
            f"{info['sample_id']}); labels {info['labels']}; judge `{info.get('judge')}`.")
    empty = _empty_files(info)
    if info["status"] != "audited":
        return (head + "\n\nNot audited yet: no human labels have been imported and no second judge has run. "
                + (empty + " " if empty else "")
                + "Label the sample with audit/labelling/label.html (or Label Studio, or the CSV), list the "
                "exported files under audit.human_labels and rerun (docs/audit.md).")
    parts = [head] + ([empty] if empty else [])
    who = [f"{p['rater']} ({p['pairs']} pairs)" for p in info["people"]]
    j2 = info.get("second_judge")
    if who:
        parts.append("Labelled by people: " + ", ".join(who) + ", blind to the judge's labels unless "
                     "audit.show_judge_label was set.")
    if j2:
        parts.append(f"Second judge `{j2['judge']}` (config `{j2['name']}`) labelled the "
                     + ("sample" if j2["scope"] == "sample" else "whole benchmark") + ".")
    b = info["bootstrap"]
    parts.append(f"Intervals: {int(b['confidence'] * 100)}% bootstrap ({b['replicates']} replicates, {b['method']}; "
                 "replicates on which a statistic is undefined are left out and counted, and an interval of width "
                 "zero is marked degenerate). Per pool, query difficulty and facet value: agreement_by_group.csv; "
                 "confusion matrices: confusion.csv (audit/report/).")
    bench = [c for c in info["comparisons"]
             if c.get("agreement_benchmark") is not None and c["kind"] == "judge vs person"]
    if bench:
        parts.append("Re-weighted to the whole benchmark (stratum weights): " + "; ".join(
            f"{c['comparison']}: agreement {_f(c['agreement_benchmark'])}, kappa {_f(c.get('kappa_benchmark'))}"
            for c in bench) + ".")
    rk = info.get("ranking")
    if rk and rk.get("kendall_tau") is not None:
        parts.append(f"Does it change conclusions? Over {len(rk['systems'])} systems, Kendall's tau between the "
                     f"rankings by {rk['primary_metric']} under the judge's and the people's labels on the audited "
                     f"pairs (every system on the same {rk['systems'][0].get('queries')} audited queries; a query "
                     f"where a system ranks no audited pair scores 0) is {_f(rk['kendall_tau'])}; the winner is "
                     + (f"the same ({rk['winner_judge']})." if rk["same_winner"] else
                        f"different (judge: {rk['winner_judge']}, people: {rk['winner_human']}).")
                     + " Metric differences: ranking.csv.")
    elif rk:
        parts.append(f"System rankings were not compared: {rk['status']}.")
    elif who:
        parts.append("System rankings were not compared: no evaluated systems (evaluate.systems).")
    return "\n\n".join(parts)


def render_markdown(info: Mapping[str, Any] | None) -> str:
    from ..pages.report import md_table

    text = _prose(info) + "\n"
    if info is not None and info["status"] == "audited":
        t = key_table(info)
        if t.height:
            text += "\n" + md_table(t, max_rows=100)
        rk = info.get("ranking")
        if rk and rk.get("systems"):
            m = rk["primary_metric"]
            rows = pl.DataFrame([{"system": r["system"], f"{m} (judge)": _f(r.get(f"{m}_judge"), 4),
                                  f"{m} (people)": _f(r.get(f"{m}_human"), 4),
                                  "difference": _f(r.get(f"{m}_diff"), 4)} for r in rk["systems"]])
            text += "\n" + md_table(rows, max_rows=100)
    return text


def summary_section(report_dir: str | Path | None):
    """The report's "Judge audit" section (summary/report.md and .html)."""
    from ..pages.report import Section

    info = load_audit(report_dir)
    table = key_table(info) if info is not None and info["status"] == "audited" else None
    return Section("Judge audit", text=_prose(info), table=table if table is not None and table.width else None,
                   max_rows=100)


def card_markdown(report_dir: str | Path | None) -> str:
    """The dataset card's "Judge audit" section."""
    info = load_audit(report_dir)
    text = "## Judge audit\n\n" + render_markdown(info)
    if info is not None and info["status"] == "audited":
        text += ("\nThe audit's numbers and the imported human labels are in `audit/` "
                 "(docs: benchmaker docs/audit.md).\n")
    return text


def export_files(report_dir: str | Path | None, dataset_dir: Path) -> None:
    """Copy the audit's report (numbers, tables, human labels) into the dataset folder as ``audit/``."""
    if not report_dir or not (Path(report_dir) / MARKER).is_file():
        return
    import shutil

    dest = Path(dataset_dir) / "audit"
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted(Path(report_dir).iterdir()):
        if f.is_file() and not f.name.startswith("."):
            shutil.copyfile(f, dest / f.name)

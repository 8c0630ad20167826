"""The "How far to trust this benchmark" block that opens the summary report and the dataset card
(docs/trust.md): power, judge agreement and human-corrected scores (or what labelling the audit sample
would buy), circularity, reusability. Rendered from files the evaluate, audit and deepen stages wrote:
``evaluate/trust.json`` (:mod:`benchmaker.evaluate.trust`), ``audit/report/audit.json``
(:mod:`benchmaker.audit.trust`) and ``deepen/report.json``; each may be absent, and the block says what
is then unknown.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

__all__ = ["TITLE", "card_markdown", "copy_trust", "summary_section", "tables", "trust_items"]

TITLE = "How far to trust this benchmark"
DOCS = "benchmaker docs/trust.md"


def _load(path: str | Path | None) -> dict[str, Any] | None:
    if not path:
        return None
    p = Path(path)
    if p.is_dir():
        p = p / "audit.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


def _f(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _power(trust: Mapping[str, Any] | None) -> str:
    if trust is None:
        return ("**Power**: not computed: no retrieval system is evaluated (evaluate.systems). The smallest "
                "difference a benchmark detects rests on the per-query differences of two systems; `benchmaker "
                "power` gives the queries a chosen difference needs from a pilot's or an earlier benchmark's files.")
    p = trust["power"]
    if p.get("status") != "ok":
        assumed = ", ".join(f"{_f(v)} at σ_d {k}" for k, v in (p.get("assumed") or {}).items())
        return (f"**Power**: not measured: it needs {p.get('needs')}. With {p.get('queries')} queries and an assumed "
                f"per-query σ_d of 0.15–0.25 (typical of nDCG@10 differences) it would detect differences of about "
                f"{assumed} (α {p['alpha']}, power {p['power']}); `benchmaker power` computes the queries a chosen "
                "difference needs.")
    row = p["rows"][0] if p["rows"] else None
    pool = [r for r in p["rows"] if r["scope"] == "pool"]
    row = pool[0] if pool else row
    if row is None:
        return "**Power**: no metric had per-query differences to measure."
    need = "; ".join(f"a difference of {d} needs {n} queries" for d, n in row["queries_needed"].items())
    pairs = f"{row['pairs_compared']} pair{'' if row['pairs_compared'] == 1 else 's'}"
    return (f"**Power**: with {row['queries']} queries and {row['systems']} systems ({pairs} "
            f"compared, {p['correction']}-corrected, α {p['alpha']} → {row['alpha_pair']:.4g} per pair), "
            f"differences in {row['metric']} ({row['scope']} scope) below **{_f(row['mdd'])}** are not reliably "
            f"detected (power {p['power']}; {_f(row['mdd_min'])}–{_f(row['mdd_max'])} over the system pairs, "
            f"σ_d {_f(row['sd_diff_median'])}). At this σ_d, {need} (`benchmaker power`).")


def _not_audited(audit: Mapping[str, Any]) -> str:
    """What labelling the audit sample would buy: its size and the widest projected people-only interval."""
    n = (audit.get("sample") or {}).get("sample_pairs")
    proj = audit.get("projected") or {}
    buys = ""
    census = n is not None and n == (audit.get("sample") or {}).get("population_pairs")
    if proj.get("rows") and census:  # no sampling error left: an interval of ±0.000 would read as a bug
        buys = ("; the sample is every judged pair, so with them every system's score is reported "
                "human-corrected exactly (no sampling error)")
    elif proj.get("rows"):
        r = max(proj["rows"], key=lambda r: r["half_width"])
        buys = (f"; with them every system's {r['metric']} is reported human-corrected, to within about "
                f"±{_f(r['half_width'])} (95 %, at worst; narrower as far as the judge agrees with people)")
    return (f"not audited yet: labelling the {n} sampled pairs (audit/labelling/) gives the judge's agreement "
            f"with people{buys}.")


def _agreement(audit: Mapping[str, Any] | None) -> str:
    if audit is None:
        return "**Judge agreement**: not measured (audit.enabled is false): nothing checks the judge against people."
    if audit.get("status") != "audited":
        return "**Judge agreement**: " + _not_audited(audit)
    comps = [c for c in audit.get("comparisons") or [] if c.get("kind") in ("judge vs people", "judge vs person")]
    comps.sort(key=lambda c: (c.get("kind") != "judge vs people", c["comparison"]))
    if not comps:  # a second judge ran, no person labelled: what labelling would buy, then the second judge
        return "**Judge agreement**: " + _not_audited(audit) + " " + _judges(audit)
    c = comps[0]
    ci = c.get("kappa_ci") or [None, None]
    return (f"**Judge agreement**: {c['comparison']}: Cohen's κ {_f(c.get('kappa'), 2)} "
            f"({_f(ci[0], 2)}–{_f(ci[1], 2)}), raw agreement {_f(c.get('agreement'), 2)} on {c['pairs']} pairs.")


def _corrected(audit: Mapping[str, Any] | None) -> str | None:
    doc = (audit or {}).get("corrected") or {}
    if doc.get("status") != "ok" or not doc.get("rows"):
        return None
    metric = next((r["metric"] for pre in ("ndcg@", "precision@") for r in doc["rows"] if r["metric"].startswith(pre)),
                  doc["rows"][0]["metric"])
    how = ("multiple imputation of people's labels from the judge's (model-assisted; nominal intervals that "
           "covered 96 % in docs/trust.md's simulation of a rank-stratified audit)" if metric.startswith("ndcg@") else
           "prediction-powered inference")
    rows = sorted((r for r in doc["rows"] if r["metric"] == metric), key=lambda r: r["rank_corrected"])
    pct = round(100 * float(doc["confidence"]))
    parts = [f"{r['system']} {_f(r['corrected'])} [{_f(r['corrected_lo'])}, {_f(r['corrected_hi'])}] "
             f"(judge {_f(r['judge'])})" for r in rows]
    judge_order = " > ".join(r["system"] for r in sorted(rows, key=lambda r: r["rank_judge"]))
    same = [r["rank_judge"] for r in rows] == sorted(r["rank_judge"] for r in rows)
    return (f"**Human-corrected scores** ({metric}, pool scope, {pct} % intervals, {how} over "
            f"the judge's labels on every pair and people's on {doc.get('audited_pairs')} audited pairs): "
            + "; ".join(parts) + ". " + ("The judge's ranking is the same." if same else
                                         f"The judge alone ranks them {judge_order}.")
            + " All metrics: audit/corrected.csv.")


def _judges(audit: Mapping[str, Any] | None) -> str:
    j = (audit or {}).get("judges") or {}
    if not j:
        return ""
    if j.get("kendall_tau") is None:
        return f"Second judge: {j.get('status')} (per-system scores under both judges in audit/judges.csv)."
    return (f"**Second judge**: the systems ranked by {j.get('primary_metric')} under the two judges "
            f"({j['scope']} pairs, {j['pairs']}) agree with Kendall τ {_f(j['kendall_tau'], 2)}"
            f"{'' if j.get('same_winner') else ', with different winners'} (per-system scores: audit/judges.csv).")


def _circularity(trust: Mapping[str, Any] | None) -> str:
    if trust is None:
        return "**Circularity**: no system is evaluated."
    c = trust["circularity"]
    who = [f"{role} ({c[f'{role}_model']}: {c[f'{role}_family']})" for role in ("judge", "vision")
           if c.get(f"{role}_model")]
    roles = ", ".join(who) or "the rules judge and no model annotator"
    lines = []
    for role, label in (("judge", "judge"), ("vision", "vision annotator")):
        names = [r["system"] for r in c["systems"] if role in r["shares_family_with"]]
        if names:
            lines.append(f"{', '.join(names)} share{'s' if len(names) == 1 else ''} the {label}'s family "
                         f"({c[f'{role}_family']})")
    text = ("**Circularity**: " + ("; ".join(lines) + ": a judge or annotator can favour its own family, so their "
                                    "scores may be inflated." if lines else
                                    "no evaluated system shares a model family with the pipeline's models.")
            + f" Pipeline models: {roles}.")
    if c.get("unknown"):
        text += f" Not checked (no model name known): {', '.join(c['unknown'])}."
    return text


def _reusability(deepen: Mapping[str, Any] | None) -> str:
    loo = (deepen or {}).get("leave_one_out") or {}
    if not deepen:
        return ("**Reusability**: not measured (deepen.enabled is false): whether systems that did not contribute "
                "to the pools are scored fairly is unknown.")
    if loo.get("min_kendall_tau") is None:
        n = loo.get("systems_ranked", 0)
        return (f"**Reusability**: leave-one-system-out τ not defined: it needs two or more ranked systems "
                f"({n} system{'' if n == 1 else 's'} ranked).")
    return (f"**Reusability**: leave-one-system-out Kendall τ ≥ {_f(loo['min_kendall_tau'], 2)} over "
            f"{loo.get('systems_ranked')} systems ({'meets' if loo.get('reusable') else 'below'} the "
            f"{loo.get('tau_bar', 0.9)} bar; few systems make τ coarse).")


def trust_items(trust: str | Path | None, audit: str | Path | None, deepen: str | Path | None) -> list[str]:
    """The block's statements, in order."""
    t, a, d = _load(trust), _load(audit), _load(deepen)
    items = [_power(t), _agreement(a)]
    corr = _corrected(a)
    if corr:
        items.append(corr)
    j = _judges(a)
    if j and a and a.get("status") == "audited" and any(c.get("kind") in ("judge vs people", "judge vs person")
                                                         for c in a.get("comparisons") or []):
        items.append(j)
    items += [_circularity(t), _reusability(d)]
    return items


def tables(trust: str | Path | None, audit: str | Path | None) -> list[tuple[str, pl.DataFrame]]:
    """The block's tables: the power of every headline metric and scope, every system's human-corrected
    scores, every system under both judges (each only when there is something to show)."""
    t, a = _load(trust), _load(audit)
    out = []
    rows = ((t or {}).get("power") or {}).get("rows") or []
    if rows:
        out.append(("Power by metric", pl.DataFrame([{
            "metric": r["metric"], "scope": r["scope"], "queries": r["queries"], "pairs": r["pairs_compared"],
            "alpha per pair": round(r["alpha_pair"], 5), "MDD (median pair)": r["mdd"],
            "MDD range": f"{_f(r['mdd_min'])}–{_f(r['mdd_max'])}",
            **{f"queries for {d}": n for d, n in r["queries_needed"].items()}} for r in rows])))
    corr = ((a or {}).get("corrected") or {}).get("rows") or []
    if corr:
        out.append(("Human-corrected scores", pl.DataFrame([{
            "system": r["system"], "metric": r["metric"], "judge": r["judge"], "corrected": r["corrected"],
            "interval": f"{_f(r['corrected_lo'])}–{_f(r['corrected_hi'])}",
            "people only": f"{_f(r['human_only_lo'])}–{_f(r['human_only_hi'])}",
            "rank (judge → corrected)": f"{r['rank_judge']} → {r['rank_corrected']}"} for r in corr])
            .with_columns(pl.col(pl.Float64).round(4))))
    judges = ((a or {}).get("judges") or {}).get("rows") or []
    if judges:  # the columns named after the two judges (the second judge's name is its folder, audit.second_judge)
        first = f"judge ({a['judge']})" if a.get("judge") else "judge"
        second = f"second judge ({a['second_judge']['name']})" if a.get("second_judge") else "second judge"
        out.append(("Systems under both judges", pl.DataFrame(judges).select(
            "system", "metric", pl.col("judge").alias(first), pl.col("judge2").alias(second))
            .with_columns(pl.col(pl.Float64).round(4))))
    return out


def card_markdown(trust: str | Path | None, audit: str | Path | None, deepen: str | Path | None) -> str:
    """The card's block (markdown), placed right after its introduction."""
    from ..pages.report import md_table

    text = (f"## {TITLE}\n\n" + "\n".join(f"- {i}" for i in trust_items(trust, audit, deepen))
            + f"\n\nEach figure and its assumptions: {DOCS}.\n")
    for title, df in tables(trust, audit):
        text += f"\n### {title}\n\n" + md_table(df, max_rows=60)
    return text


def summary_section(trust: str | Path | None, audit: str | Path | None, deepen: str | Path | None) -> list:
    """The report's first sections: the block, then its tables."""
    from ..pages.report import Section

    files = ["evaluate/trust.json"] if trust else []
    # plain text: the report's HTML shows a section's text as it is (no markdown)
    text = "\n\n".join(i.replace("**", "") for i in trust_items(trust, audit, deepen))
    out = [Section(TITLE, text=text + f"\n\nEach figure and its assumptions: {DOCS}.", files=files)]
    return out + [Section(f"{TITLE}: {title.lower()}", table=df, max_rows=60) for title, df in tables(trust, audit)]


def copy_trust(trust: str | Path | None, dest: Path) -> None:
    """``trust.json`` beside the copied leaderboard (``summary/evaluate/``, ``hf_dataset/evaluate/``)."""
    if trust and Path(trust).is_file():
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "trust.json").write_bytes(Path(trust).read_bytes())

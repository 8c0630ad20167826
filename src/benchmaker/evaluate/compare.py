"""Change -> evaluate -> compare: an evaluation against an earlier one of the same benchmark.

An *evaluation* is what the ``evaluate`` rule wrote (``evaluate/leaderboard.json`` + ``per_query.csv``),
found from a results folder (``results/<benchmark>``), its ``evaluate/`` folder, a kept snapshot
(:func:`keep`: ``HISTORY/<tag>/``) or a history folder (``HISTORY/``: its latest snapshot). Systems
are matched by name; for each system, scope and metric the per-query values of the queries both
evaluations scored are compared with a paired test (Student's t by default, as ``evaluate.stat_test``;
or Wilcoxon's signed-rank, or Fisher's randomisation test), the p-values of one metric corrected across
the (system, scope) pairs (Holm by default), and a **regression** is a significant drop of a gated
metric (ranx's metrics by default) by at least ``min_delta``. ``benchmaker compare OLD NEW
--fail-on-regression`` exits 1 when there is one, so a deployment pipeline can gate on it
(docs/evaluate.md, "Comparing evaluations").
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..errors import UserError
from ..evaluate_settings import CUTOFF_METRICS, WHOLE_METRICS, evaluation_metric_problem
from ..io import atomic_write_text
from ..settings_schema import default

__all__ = ["COMPARISON_COLUMNS", "COMPARISON_FILES", "Evaluation", "baseline_files", "check_metrics", "compare",
           "compare_section", "compare_with_baseline", "keep", "load_evaluation", "paired_p", "report_markdown",
           "write_comparison"]

HISTORY_INDEX = "history.jsonl"
COMPARISON_FILES = ("comparison.csv", "comparison.md", "comparison.json")
SNAPSHOT_FILES = ("leaderboard.json", "leaderboard.csv", "per_query.csv", "drilldown.csv", "significance.csv",
                  "sage_leaderboard.csv")
# higher is better for every ranx metric; diversity and judged@k describe a ranking, they are not gated
RANX_PREFIXES = tuple(f"{m}@" for m in CUTOFF_METRICS) + WHOLE_METRICS
COMPARISON_COLUMNS = ("system", "scope", "metric", "old_version", "new_version", "queries", "old_mean", "new_mean",
                      "delta", "p_value", "p_adjusted", "significant", "gated", "regression", "improvement")


@dataclass
class Evaluation:
    source: str                       # what the user named (shown in the report)
    folder: Path                      # the folder holding leaderboard.json and per_query.csv
    doc: dict
    per_query: pl.DataFrame
    tag: str | None = None
    versions: dict[str, str | None] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.tag or self.source


def _history_entries(folder: Path) -> list[dict]:
    idx = folder / HISTORY_INDEX
    if not idx.is_file():
        return []
    return [json.loads(x) for x in idx.read_text(encoding="utf-8").splitlines() if x.strip()]


def _find(path: Path) -> tuple[Path, str | None]:
    """(the evaluation folder, its history tag) for a results, evaluate, snapshot or history folder."""
    if (path / "leaderboard.json").is_file():
        return path, path.name if (path.parent / HISTORY_INDEX).is_file() else None
    if (path / "evaluate" / "leaderboard.json").is_file():
        return path / "evaluate", None
    entries = _history_entries(path)
    if entries:
        tag = entries[-1]["tag"]
        return path / tag, tag
    raise UserError(f"{path}: no evaluation here: expected a results folder (with evaluate/leaderboard.json), an "
                    f"evaluate/ folder, a snapshot kept by `benchmaker keep-evaluation` or a history folder "
                    f"(with {HISTORY_INDEX}); run `snakemake evaluate` first")


def load_evaluation(path: str | Path) -> Evaluation:
    p = Path(path)
    folder, tag = _find(p)
    for f in ("leaderboard.json", "per_query.csv"):
        if not (folder / f).is_file():
            raise UserError(f"{folder / f}: missing; an evaluation folder holds leaderboard.json and per_query.csv")
    try:
        doc = json.loads((folder / "leaderboard.json").read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UserError(f"{folder / 'leaderboard.json'}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("systems"), list):
        raise UserError(f"{folder / 'leaderboard.json'}: not an evaluate leaderboard (no systems list)")
    pq_path = folder / "per_query.csv"
    pq = pl.read_csv(pq_path, infer_schema_length=None) if pq_path.stat().st_size else pl.DataFrame()
    if pq.height and not {"query_id", "system", "scope"} <= set(pq.columns):
        raise UserError(f"{pq_path}: needs the columns query_id, system, scope (docs/evaluate.md)")
    if pq.height:
        pq = pq.with_columns(pl.col("query_id").cast(pl.String))
    versions = {s["name"]: s.get("system_version") for s in doc["systems"]}
    return Evaluation(source=str(path), folder=folder, doc=doc, per_query=pq, tag=tag, versions=versions)


def paired_p(old: np.ndarray, new: np.ndarray, test: str = default("evaluate.compare.test"), seed: int = 42) -> float:
    """Two-sided p-value of a paired test of ``new`` against ``old`` (1.0 when nothing differs)."""
    from scipy import stats

    d = np.asarray(new, dtype=np.float64) - np.asarray(old, dtype=np.float64)
    if len(d) < 2 or np.allclose(d, 0.0, atol=1e-12):
        return 1.0
    if test == "student":
        if np.allclose(d, d[0], atol=1e-12):  # a constant nonzero shift: no variance, certainly different
            return 0.0
        p = stats.ttest_rel(new, old).pvalue
    elif test == "wilcoxon":
        p = stats.wilcoxon(d, zero_method="zsplit").pvalue
    elif test == "fisher":  # randomisation test of the mean difference (signs flipped), fixed seed
        p = stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=9999,
                                   random_state=seed).pvalue
    else:
        raise UserError(f"unknown test {test!r} (student, wilcoxon, fisher)")
    return 1.0 if p is None or not np.isfinite(p) else float(p)


def _gated(metric: str, gate: Sequence[str] | None) -> bool:
    if gate:
        return metric in gate
    return metric.startswith(RANX_PREFIXES)


def check_metrics(old: Evaluation, new: Evaluation, metrics: Sequence[str] | None, key: str = "--metric") -> None:
    """Raise UserError unless every name of ``metrics`` (given as ``key``) is a metric column of both evaluations'
    ``per_query.csv``: a name one lacks (a typo, a cutoff evaluate.k did not compute) would be compared and gated
    nowhere, and ``--fail-on-regression`` would pass silently."""
    cols = [set(e.per_query.columns) - {"query_id", "system", "scope"} for e in (old, new)]
    both = cols[0] & cols[1]
    ks = sorted({int(k) for c in both for k in [c.partition("@")[2]] if k.isdigit()}) or [10]
    for m in metrics or []:
        if m in both:
            continue
        why = evaluation_metric_problem(m, ks)
        if why is None:
            only = old.label if m in cols[0] else new.label if m in cols[1] else None
            why = (f"{m!r} is a column of {only}'s per_query.csv only" if only else
                   f"{m!r} is not a column of either evaluation's per_query.csv")
        raise UserError(f"{key} {m}: {why}; name a metric both evaluations have ({', '.join(sorted(both))})")


def compare(old: Evaluation, new: Evaluation, *, test: str = default("evaluate.compare.test"),
            correction: str = default("evaluate.compare.correction"),
            max_p: float = default("evaluate.compare.max_p"),
            min_delta: float = default("evaluate.compare.min_delta"), metrics: Sequence[str] | None = None,
            scopes: Sequence[str] | None = None, systems: Sequence[str] | None = None,
            allow_different_judgments: bool = False, metrics_key: str = "--metric") -> dict[str, Any]:
    """Per (system, scope, metric): means, difference, paired p-value on the shared queries, verdicts
    (``metrics_key``: where ``metrics`` came from, named by the error when one is not in both)."""
    check_metrics(old, new, metrics, metrics_key)
    oq, nq = old.doc.get("qrels_sha256"), new.doc.get("qrels_sha256")
    notes = []
    if oq and nq and oq != nq:
        if not allow_different_judgments:
            raise UserError(f"{old.label} and {new.label} were evaluated on different judgments (qrels.jsonl "
                            f"differs): not the same benchmark; pass --allow-different-judgments to compare the "
                            f"queries they share anyway")
        notes.append("the two evaluations used different judgments (qrels.jsonl differs)")
    elif not (oq and nq):
        notes.append("one evaluation does not record its judgments (qrels_sha256): same benchmark assumed")
    rows = []
    names_old = set(old.per_query["system"].unique().to_list()) if old.per_query.height else set()
    names_new = set(new.per_query["system"].unique().to_list()) if new.per_query.height else set()
    names = sorted(names_old & names_new)
    if systems:
        unknown = sorted(set(systems) - set(names))
        if unknown:
            raise UserError(f"system(s) {unknown} are not in both evaluations (both have: {names})")
        names = [n for n in names if n in set(systems)]
    for name in names:
        a = old.per_query.filter(pl.col("system") == name)
        b = new.per_query.filter(pl.col("system") == name)
        for scope in sorted(set(a["scope"].to_list()) & set(b["scope"].to_list())):
            if scopes and scope not in scopes:
                continue
            a_s, b_s = a.filter(pl.col("scope") == scope), b.filter(pl.col("scope") == scope)
            cols = [c for c in a_s.columns if c in b_s.columns and c not in ("query_id", "system", "scope")]
            if metrics:
                cols = [c for c in cols if c in metrics]
            j = a_s.select("query_id", *cols).join(b_s.select("query_id", *cols), on="query_id", how="inner",
                                                   suffix="__new")
            for m in cols:
                pair = j.select(pl.col(m).cast(pl.Float64), pl.col(f"{m}__new").cast(pl.Float64)).drop_nulls()
                if not pair.height:
                    continue
                x, y = pair[m].to_numpy(), pair[f"{m}__new"].to_numpy()
                rows.append({"system": name, "scope": scope, "metric": m, "old_version": old.versions.get(name),
                             "new_version": new.versions.get(name), "queries": pair.height,
                             "old_mean": round(float(x.mean()), 6), "new_mean": round(float(y.mean()), 6),
                             "delta": round(float(y.mean() - x.mean()), 6), "p_value": paired_p(x, y, test)})
    # correct the p-values of one metric across its (system, scope) pairs
    by_metric: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_metric.setdefault(r["metric"], []).append(i)
    for _, idx in sorted(by_metric.items()):
        pv = [rows[i]["p_value"] for i in idx]
        if correction == "none" or len(pv) == 1:
            adj = pv
        else:
            from .metrics import adjusted_p

            adj = adjusted_p(pv, alpha=max_p, method=correction)
        for i, pa in zip(idx, adj):
            r = rows[i]
            r["p_adjusted"] = float(pa)
            r["significant"] = bool(pa <= max_p)
            r["gated"] = _gated(r["metric"], metrics)
            big = abs(r["delta"]) >= min_delta and r["delta"] != 0
            r["regression"] = bool(r["gated"] and r["significant"] and big and r["delta"] < 0)
            r["improvement"] = bool(r["gated"] and r["significant"] and big and r["delta"] > 0)
    table = pl.DataFrame(rows, schema={c: _DTYPES[c] for c in COMPARISON_COLUMNS}) if rows else pl.DataFrame(
        schema={c: _DTYPES[c] for c in COMPARISON_COLUMNS})
    qo = set(old.per_query["query_id"].to_list()) if old.per_query.height else set()
    qn = set(new.per_query["query_id"].to_list()) if new.per_query.height else set()
    return {
        "old": old.label, "new": new.label, "test": test, "correction": correction, "max_p": max_p,
        "min_delta": min_delta, "notes": notes, "table": table,
        "queries": {"old": len(qo), "new": len(qn), "shared": len(qo & qn)},
        "systems_only_old": sorted(names_old - names_new), "systems_only_new": sorted(names_new - names_old),
        "versions": {n: {"old": old.versions.get(n), "new": new.versions.get(n)} for n in names},
        "regressions": int(table["regression"].sum()) if table.height else 0,
        "improvements": int(table["improvement"].sum()) if table.height else 0,
    }


_DTYPES = {"system": pl.String, "scope": pl.String, "metric": pl.String, "old_version": pl.String,
           "new_version": pl.String, "queries": pl.Int64, "old_mean": pl.Float64, "new_mean": pl.Float64,
           "delta": pl.Float64, "p_value": pl.Float64, "p_adjusted": pl.Float64, "significant": pl.Boolean,
           "gated": pl.Boolean, "regression": pl.Boolean, "improvement": pl.Boolean}


def report_markdown(res: Mapping[str, Any]) -> str:
    """The comparison as markdown: verdict, versions, regressions, then every gated difference."""
    from ..pages.report import md_table

    t: pl.DataFrame = res["table"]
    verdict = (f"**{res['regressions']} regression(s)**" if res["regressions"] else "no regression")
    lines = [f"# Evaluation compared: {res['new']} against {res['old']}", "",
             f"Verdict: {verdict}, {res['improvements']} improvement(s). Paired {res['test']} test on the queries "
             f"both evaluations scored ({res['queries']['shared']} shared; {res['queries']['old']} before, "
             f"{res['queries']['new']} now), p-values of each metric corrected across systems and scopes "
             f"({res['correction']}); a regression is a significant drop (p_adjusted <= {res['max_p']}) of a gated "
             f"metric by at least {res['min_delta']}.", ""]
    lines += [f"Note: {n}." for n in res["notes"]]
    if res["systems_only_old"]:
        lines.append(f"Systems no longer evaluated: {', '.join(res['systems_only_old'])}.")
    if res["systems_only_new"]:
        lines.append(f"New systems (nothing to compare): {', '.join(res['systems_only_new'])}.")
    if res["versions"]:
        v = pl.DataFrame([{"system": n, "before": x["old"], "now": x["new"]} for n, x in res["versions"].items()],
                         schema={"system": pl.String, "before": pl.String, "now": pl.String})
        lines += ["", "## Versions", "", md_table(v)]
    if t.height:
        shown = t.filter(pl.col("gated")).with_columns(
            pl.when(pl.col("regression")).then(pl.lit("REGRESSION")).when(pl.col("improvement"))
            .then(pl.lit("improved")).otherwise(pl.lit("")).alias("verdict"),
            pl.col("p_adjusted").map_elements(lambda p: f"{p:.2g}", return_dtype=pl.String),
            pl.col("old_mean", "new_mean", "delta").round(4),
        ).select("system", "scope", "metric", "old_mean", "new_mean", "delta", "p_adjusted", "verdict")
        reg = shown.filter(pl.col("verdict") == "REGRESSION")
        if reg.height:
            lines += ["", "## Regressions", "", md_table(reg, max_rows=200)]
        lines += ["", "## Every gated metric", "", md_table(shown, max_rows=500)]
    return "\n".join(lines) + "\n"


def write_comparison(res: Mapping[str, Any], out_dir: str | Path) -> list[str]:
    """``comparison.csv`` (every row), ``comparison.md`` (the report) and ``comparison.json`` in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    res["table"].write_csv(out / "comparison.csv")
    atomic_write_text(out / "comparison.md", report_markdown(res))
    doc = {k: v for k, v in res.items() if k != "table"}
    doc["rows"] = res["table"].to_dicts()
    atomic_write_text(out / "comparison.json", json.dumps(doc, indent=2, default=str) + "\n")
    return ["comparison.csv", "comparison.md", "comparison.json"]


def keep(source: str | Path, history: str | Path, tag: str | None = None) -> dict:
    """Copy an evaluation into ``history/<tag>/`` and add it to ``history/history.jsonl``; returns the entry.

    The tag defaults to the time (UTC) and the systems' versions; an existing tag is refused."""
    ev = load_evaluation(source)
    hist = Path(history)
    versions = {k: v for k, v in sorted(ev.versions.items())}
    if tag is None:
        tag = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        vs = sorted({v for v in versions.values() if v})
        if len(vs) == 1:
            tag += f"_{vs[0]}"
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", tag):
        raise UserError(f"--tag {tag!r}: letters, digits, . _ - only (it names a folder)")
    dest = hist / tag
    if dest.exists() or any(e["tag"] == tag for e in _history_entries(hist)):
        raise UserError(f"{dest}: a snapshot with tag {tag!r} is already kept; choose another --tag")
    tmp = hist / f".{tag}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for f in SNAPSHOT_FILES:
        if (ev.folder / f).is_file():
            shutil.copyfile(ev.folder / f, tmp / f)
    tmp.rename(dest)
    entry = {"tag": tag, "kept_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "systems": versions,
             "qrels_sha256": ev.doc.get("qrels_sha256"), "queries_evaluated": ev.doc.get("queries_evaluated")}
    with open(hist / HISTORY_INDEX, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")
    return entry


# ------------------------------------------------------------------------------------------- in the workflow
def baseline_files(path: str | Path) -> list[str]:
    """The files of the evaluation ``evaluate.compare.baseline`` names (a history folder: its latest
    snapshot), for the ``evaluate`` rule's inputs: a new kept snapshot reruns the comparison."""
    folder, _ = _find(Path(path))
    return [str(folder / "leaderboard.json"), str(folder / "per_query.csv")]


def compare_with_baseline(baseline: Sequence[str], leaderboard_json: str, comparison: str,
                          settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``evaluate`` rule's comparison with ``evaluate.compare.baseline`` (its files, or the folder):
    ``comparison.csv`` (with .md and .json beside it). Labels are the baseline's tag (or "baseline")
    and "this evaluation": no local path."""
    from ..settings_schema import filled

    s = filled("evaluate.compare", settings)
    paths = [Path(p) for p in baseline]
    # the baseline's two files, or (under a default storage: the staged copy) the folder the config names
    old = load_evaluation(paths[0] if len(paths) == 1 and paths[0].is_dir() else sorted(paths)[0].parent)
    old.source = old.tag or "baseline"
    new = load_evaluation(Path(leaderboard_json).parent)
    new.source, new.tag = "this evaluation", None
    res = compare(old, new, test=str(s["test"]), correction=str(s["correction"]),
                  max_p=float(s["max_p"]), min_delta=float(s["min_delta"]),
                  metrics=list(s["metrics"] or []) or None, allow_different_judgments=True,
                  metrics_key="evaluate.compare.metrics:")
    out = Path(comparison).parent
    write_comparison(res, out)
    return res


def compare_section(leaderboard_csv: str | Path, out_dir: str | Path | None = None):
    """The report's "Compared with the baseline" section (regressions flagged), or None without one;
    ``out_dir``: the report folder (the comparison files are copied to its ``evaluate/``)."""
    from ..pages.report import Section

    folder = Path(leaderboard_csv).parent
    if not (folder / "comparison.json").is_file():
        return None
    if out_dir is not None:
        (Path(out_dir) / "evaluate").mkdir(parents=True, exist_ok=True)
        for f in COMPARISON_FILES:
            shutil.copyfile(folder / f, Path(out_dir) / "evaluate" / f)
    doc = json.loads((folder / "comparison.json").read_text(encoding="utf-8"))
    rows = pl.DataFrame(doc.get("rows") or [], schema={c: _DTYPES[c] for c in COMPARISON_COLUMNS})
    shown = rows.filter(pl.col("gated")).with_columns(
        pl.when(pl.col("regression")).then(pl.lit("REGRESSION")).when(pl.col("improvement"))
        .then(pl.lit("improved")).otherwise(pl.lit("")).alias("verdict")).sort(
        [pl.col("regression"), pl.col("improvement")], descending=True, maintain_order=True).select(
        "verdict", "system", "scope", "metric", "old_version", "new_version", "old_mean", "new_mean", "delta",
        "p_adjusted")
    n_reg = int(doc.get("regressions") or 0)
    text = (f"This evaluation compared with the baseline {doc.get('old')} (evaluate.compare.baseline): "
            f"{'**' + str(n_reg) + ' REGRESSION(S)**' if n_reg else 'no regression'}, "
            f"{doc.get('improvements', 0)} improvement(s). Paired {doc.get('test')} test on the "
            f"{(doc.get('queries') or {}).get('shared')} shared queries, p-values of each metric corrected across "
            f"systems and scopes ({doc.get('correction')}); a regression is a significant drop "
            f"(p_adjusted <= {doc.get('max_p')}) of a gated metric. "
            + " ".join(f"Note: {n}." for n in doc.get("notes") or [])
            + " `benchmaker compare ... --fail-on-regression` gates a deployment on it (docs/evaluate.md).")
    return Section("Compared with the baseline", text=text, table=shown,
                   files=[f"evaluate/{f}" for f in COMPARISON_FILES], max_rows=80,
                   empty="No metric to compare (no system in both evaluations).")

"""Stage ``audit_report``, the audit statistics: import human labels, compute agreement, write
``audit/report/``. The audit section of the summary report and of the dataset card is rendered from
``audit.json`` by :mod:`.render`.

``audit/report/`` holds ``audit.json`` (every number below), ``agreement.csv`` (one row per pair of
raters), ``agreement_by_group.csv`` (per pool, query difficulty and facet value), ``confusion.csv``,
``multi_rater.csv`` (Krippendorff's alpha, Fleiss' kappa), ``ranking.csv`` (systems under judge vs human
labels), ``corrected.csv`` (human-corrected system scores, :mod:`.corrected`), ``judges.csv`` (systems under
the two judges), ``human_labels.jsonl`` (the imported labels) and ``audit.md`` (the section as markdown).
Formats: docs/formats.md; meaning: docs/audit.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl

from ..evaluate.runs import set_numba_cache
from ..formats import read_table
from ..io import atomic_path, atomic_write_text
from ..logs import get_logger
from ..pages.outdir import staged_dir
from ..settings_schema import default, filled
from . import agreement as A
from .files import Scale, read_sample, read_sample_meta
from .labels import import_labels
from .ranking import compare_rankings, consensus
from .render import MARKER, render_markdown

__all__ = ["run", "compute"]

log = get_logger("audit")
JUDGE = "judge"


def _ci(iv: A.Interval) -> list[float | None]:
    return [iv.lo, iv.hi]


def _compare(a: np.ndarray, b: np.ndarray, *, labels: list[int], graded: bool, strata: np.ndarray | None,
             weights: np.ndarray | None, reps: int, seed: int, confidence: float) -> dict[str, Any]:
    n = int(len(a))
    out: dict[str, Any] = {"pairs": n}
    if n == 0:
        return out | {"agreement": None, "kappa": None}
    out["agreement"] = float(np.mean(a == b))
    out["kappa"] = A.cohen(a, b, labels)
    boot = A.bootstrap_pair(a, b, labels, strata=strata, reps=reps, seed=seed, confidence=confidence,
                            weights="quadratic" if graded else None)
    out["agreement_ci"] = _ci(boot["agreement"])
    out["kappa_ci"] = _ci(boot["kappa"])
    out["kappa_undefined"] = boot["kappa"].undefined  # replicates left out of the interval (kappa undefined)
    if graded:
        out["kappa_quadratic"] = A.cohen(a, b, labels, weights="quadratic")
        out["kappa_quadratic_ci"] = _ci(boot["kappa_weighted"])
        out["kappa_quadratic_undefined"] = boot["kappa_weighted"].undefined
    if weights is not None:  # the whole benchmark, re-weighted by stratum (inverse sampling rate)
        out["agreement_benchmark"] = float(np.sum(weights * (a == b)) / np.sum(weights))
        out["kappa_benchmark"] = A.cohen(a, b, labels, sample_weight=weights)
    return out


def compute(sample: pl.DataFrame, meta: Mapping[str, Any], humans: pl.DataFrame, scale: Scale, *,
            judge2: pl.DataFrame | None = None, judge2_name: str | None = None, judge2_scope: str = "sample",
            qrels: pl.DataFrame | None = None, runs: Mapping[str, str] | None = None,
            settings: Mapping[str, Any] | None = None, facets: Sequence[str] = ()) -> dict[str, Any]:
    """Every audit number as one JSON-able dict plus the tables (key ``tables``: name -> frame)."""
    s = filled("audit", settings)
    boot = _Boot(reps=int(s["bootstrap"]), conf=float(s["confidence"]), seed=int(s["seed"]))
    graded = scale.kind == "graded"
    labels = scale.values
    level = "ordinal" if graded else "nominal"
    strata_all = np.asarray(sample["stratum"].to_list())
    raters, people, j2 = _raters(sample, humans, judge2, judge2_name)
    pair_rows, group_rows, conf_rows = _pairwise(sample, raters, _comparisons(people, j2), labels, graded, boot,
                                                 _group_values(sample, facets))
    if j2 and judge2_scope == "all" and qrels is not None and judge2 is not None:
        _whole_qrels(qrels, judge2, j2, labels, graded, boot, pair_rows, conf_rows)
    multi_rows = _multi_rater(raters, people, labels, level, strata_all, boot)

    ranking = None
    if people and runs:
        audited = sample.select("item_id", "query_id", "image_id", "judge_label").join(
            consensus(humans).rename({"label": "human_label"}), on="item_id", how="inner")
        ranking = compare_rankings(audited, runs, list(s["metrics"]))

    audited = bool(people) or j2 is not None
    info: dict[str, Any] = {
        "status": "audited" if audited else "not audited yet",
        "sample_id": meta["sample_id"], "labels": scale.kind,
        "sample": {k: meta.get(k) for k in ("population_pairs", "population_queries", "sample_pairs",
                                            "sample_queries", "settings")},
        "people": [{"rater": p, "pairs": int((~np.isnan(raters[p])).sum())} for p in people],
        "second_judge": None if not j2 else {"name": j2, "scope": judge2_scope,
                                              "judge": (judge2["judge"][0] if judge2 is not None and judge2.height
                                                        else None),
                                              "pairs_on_sample": int((~np.isnan(raters[j2])).sum())},
        "judge": sample["judge"][0] if sample.height else None,
        "bootstrap": {"replicates": boot.reps, "confidence": boot.conf,
                      "method": "percentile, pairs resampled within strata"},
        "comparisons": pair_rows, "multi_rater": multi_rows, "ranking": ranking,
    }
    return info | {"tables": _tables(pair_rows, group_rows, conf_rows, multi_rows, ranking)}


@dataclass(frozen=True)
class _Boot:
    """The bootstrap's settings: replicates, confidence level and base seed."""

    reps: int
    conf: float
    seed: int


def _raters(sample: pl.DataFrame, humans: pl.DataFrame, judge2: pl.DataFrame | None,
            judge2_name: str | None) -> tuple[dict[str, np.ndarray], list[str], str | None]:
    """Each rater's label of every sample item (NaN: not labelled), in sample order: the judge, each
    person, the second judge and, with two people or more, their majority; the people; the second
    judge's name (None without one)."""
    items = sample["item_id"].to_list()
    pos = {iid: k for k, iid in enumerate(items)}
    raters: dict[str, np.ndarray] = {JUDGE: np.asarray(sample["judge_label"].to_list(), dtype=float)}
    people = humans["rater"].unique(maintain_order=True).to_list() if humans.height else []
    for r in people:
        col = np.full(len(items), np.nan)
        for iid, lab in humans.filter(pl.col("rater") == r).select("item_id", "label").iter_rows():
            col[pos[iid]] = lab
        raters[r] = col
    j2 = None
    if judge2 is not None and judge2_name:
        j2 = judge2_name
        col = np.full(len(items), np.nan)
        lookup = {(q, i): lab for q, i, lab in judge2.select("query_id", "image_id", "relevance_label").iter_rows()}
        for k, (q, i) in enumerate(sample.select("query_id", "image_id").iter_rows()):
            if (q, i) in lookup:
                col[k] = lookup[(q, i)]
        raters[j2] = col
    if len(people) >= 2:
        cons = consensus(humans)
        col = np.full(len(items), np.nan)
        for iid, lab in cons.iter_rows():
            col[pos[iid]] = lab
        raters["people (majority)"] = col
    return raters, people, j2


def _comparisons(people: list[str], j2: str | None) -> list[tuple[str, str, str]]:
    """The pairs of raters compared, (rater a, rater b, kind), in the report's order."""
    comparisons: list[tuple[str, str, str]] = [(JUDGE, p, "judge vs person") for p in people]
    if len(people) >= 2:
        comparisons.append((JUDGE, "people (majority)", "judge vs people"))
    if j2:
        comparisons.append((JUDGE, j2, "judge vs judge"))
        comparisons += [(j2, p, "second judge vs person") for p in people]
    comparisons += [(a, b, "person vs person") for i, a in enumerate(people) for b in people[i + 1:]]
    return comparisons


def _group_values(sample: pl.DataFrame, facets: Sequence[str]) -> dict[str, list[str]]:
    """The groups agreement is broken down by (pool, difficulty, each facet): each item's value."""
    group_cols = ["pool", "difficulty"]
    fac = sample.select(pl.col("facets").struct.unnest()) if facets else None
    group_values: dict[str, list[str]] = {g: [str(v) for v in sample[g].to_list()] for g in group_cols}
    for f in facets:
        if fac is not None and f in fac.columns:
            group_values[f"facet:{f}"] = [str(v) for v in fac[f].to_list()]
    return group_values


def _confusion_rows(comparison: str, a_name: str, b_name: str, a: np.ndarray, b: np.ndarray,
                    labels: list[int]) -> list[dict[str, Any]]:
    cm = A.confusion(a, b, labels)
    return [{"comparison": comparison, "rater_a": a_name, "rater_b": b_name, "label_a": la, "label_b": lb,
             "pairs": int(cm[i, j])} for i, la in enumerate(labels) for j, lb in enumerate(labels)]


def _pairwise(sample: pl.DataFrame, raters: Mapping[str, np.ndarray], comparisons: list[tuple[str, str, str]],
              labels: list[int], graded: bool, boot: _Boot, group_values: Mapping[str, list[str]]):
    """Each comparison on the items both raters labelled: its agreement row, its confusion rows and
    (but between two people) its agreement by group."""
    strata_all = np.asarray(sample["stratum"].to_list())
    weight_all = np.asarray(sample["weight"].to_list(), dtype=float)
    pair_rows, group_rows, conf_rows = [], [], []
    for c_i, (a_name, b_name, kind) in enumerate(comparisons):
        a_all, b_all = raters[a_name], raters[b_name]
        both = ~np.isnan(a_all) & ~np.isnan(b_all)
        a, b = a_all[both].astype(int), b_all[both].astype(int)
        st = strata_all[both]
        res = _compare(a, b, labels=labels, graded=graded, strata=st,
                       weights=weight_all[both] if a_name == JUDGE else None, reps=boot.reps, seed=boot.seed + c_i,
                       confidence=boot.conf)
        pair_rows.append({"comparison": f"{a_name} vs {b_name}", "kind": kind, "rater_a": a_name,
                          "rater_b": b_name, "scope": "sample", **res})
        conf_rows += _confusion_rows(f"{a_name} vs {b_name}", a_name, b_name, a, b, labels)
        if kind == "person vs person":
            continue
        for g, vals in group_values.items():
            v_both = np.asarray(vals)[both]
            for v in sorted(set(v_both.tolist())):
                m = v_both == v
                r = _compare(a[m], b[m], labels=labels, graded=False, strata=st[m], weights=None,
                             reps=boot.reps, seed=boot.seed + c_i, confidence=boot.conf)
                group_rows.append({"comparison": f"{a_name} vs {b_name}", "group_by": g, "group": v,
                                   "pairs": r["pairs"], "agreement": r.get("agreement"),
                                   "agreement_lo": (r.get("agreement_ci") or [None])[0],
                                   "agreement_hi": (r.get("agreement_ci") or [None, None])[1],
                                   "kappa": r.get("kappa"), "kappa_lo": (r.get("kappa_ci") or [None])[0],
                                   "kappa_hi": (r.get("kappa_ci") or [None, None])[1],
                                   "kappa_undefined": r.get("kappa_undefined")})
    return pair_rows, group_rows, conf_rows


def _whole_qrels(qrels: pl.DataFrame, judge2: pl.DataFrame, j2: str, labels: list[int], graded: bool, boot: _Boot,
                 pair_rows: list[dict], conf_rows: list[dict]) -> None:
    """The judge against the second judge over every pair both labelled (scope ``all``): appended to
    ``pair_rows`` and ``conf_rows``."""
    joined = qrels.select("query_id", "image_id", "pool", pl.col("relevance_label").alias("a")).join(
        judge2.select("query_id", "image_id", pl.col("relevance_label").alias("b")),
        on=["query_id", "image_id"], how="inner")
    a = joined["a"].to_numpy().astype(int)
    b = joined["b"].to_numpy().astype(int)
    pair_rows.append({"comparison": f"{JUDGE} vs {j2}", "kind": "judge vs judge", "rater_a": JUDGE, "rater_b": j2,
                      "scope": "all", **_compare(a, b, labels=labels, graded=graded, strata=None, weights=None,
                                                 reps=boot.reps, seed=boot.seed + 999, confidence=boot.conf)})
    conf_rows += _confusion_rows(f"{JUDGE} vs {j2} (all pairs)", JUDGE, j2, a, b, labels)


def _multi_rater(raters: Mapping[str, np.ndarray], people: list[str], labels: list[int], level: str,
                 strata_all: np.ndarray, boot: _Boot) -> list[dict[str, Any]]:
    """Krippendorff's alpha and Fleiss' kappa of the people, and of the people with the judge (two
    people or more)."""
    multi_rows = []
    if len(people) >= 2:
        for name, who in (("people", people), ("people and judge", people + [JUDGE])):
            mat = np.vstack([raters[r] for r in who])
            keep = (~np.isnan(mat)).sum(axis=0) >= 2
            alpha = A.krippendorff_alpha(mat[:, keep], level)
            iv = A.bootstrap_alpha(mat[:, keep], level, strata=strata_all[keep], reps=boot.reps, seed=boot.seed + 7,
                                   confidence=boot.conf)
            fk, n_full = A.fleiss(mat, labels)
            multi_rows.append({"raters": name, "n_raters": len(who), "pairs": int(keep.sum()),
                               "krippendorff_alpha": alpha, "alpha_lo": iv.lo, "alpha_hi": iv.hi,
                               "alpha_undefined": iv.undefined, "alpha_level": level, "fleiss_kappa": fk,
                               "fleiss_pairs": n_full})
    return multi_rows


def _tables(pair_rows: list[dict], group_rows: list[dict], conf_rows: list[dict], multi_rows: list[dict],
            ranking: Mapping[str, Any] | None) -> dict[str, pl.DataFrame]:
    """The report's CSV tables."""
    return {
        "agreement": _flat(pair_rows),
        "agreement_by_group": pl.DataFrame(group_rows, schema={
            "comparison": pl.String, "group_by": pl.String, "group": pl.String, "pairs": pl.Int64,
            "agreement": pl.Float64, "agreement_lo": pl.Float64, "agreement_hi": pl.Float64, "kappa": pl.Float64,
            "kappa_lo": pl.Float64, "kappa_hi": pl.Float64, "kappa_undefined": pl.Int64}),
        "confusion": pl.DataFrame(conf_rows, schema={"comparison": pl.String, "rater_a": pl.String,
                                                     "rater_b": pl.String, "label_a": pl.Int64,
                                                     "label_b": pl.Int64, "pairs": pl.Int64}),
        "multi_rater": pl.DataFrame(multi_rows) if multi_rows else pl.DataFrame(schema={"raters": pl.String}),
        "ranking": pl.DataFrame(ranking["systems"]) if ranking and ranking["systems"] else
        pl.DataFrame(schema={"system": pl.String}),
    }


def _flat(rows: list[dict]) -> pl.DataFrame:
    flat = []
    for r in rows:
        f = {}
        for k, v in r.items():
            if isinstance(v, list):
                f[f"{k.removesuffix('_ci')}_lo"], f[f"{k.removesuffix('_ci')}_hi"] = v
            else:
                f[k] = v
        flat.append(f)
    return pl.DataFrame(flat, infer_schema_length=None) if flat else pl.DataFrame(schema={"comparison": pl.String})


def run(*, sample: str, sample_meta: str, qrels: str, report: str, settings: Mapping[str, Any],
        human: str | Sequence[str] | None = None, human_labels: Sequence[Mapping[str, Any]] | None = None,
        judge2: str | None = None, judge2_name: str | None = None, judge2_scope: str = "sample",
        runs: str | Sequence[str] | None = None, systems: Sequence[str] | None = None,
        labels: str | None = None, facets: Mapping[str, Any] | None = None, columns: Mapping[str, str] | None = None,
        numba_cache_dir: str | None = None, version: str | None = None) -> dict[str, Any]:
    """Stage ``audit_report``. ``numba_cache_dir``: ranx's JIT cache, the evaluate stage's (its set-up,
    :func:`benchmaker.evaluate.runs.set_numba_cache`, before ranx is imported)."""
    set_numba_cache(numba_cache_dir)
    s = read_sample(sample)
    meta = read_sample_meta(sample_meta)
    scale = Scale(default("judge.labels") if labels is None else labels)
    files = list(human_labels or [])
    counts: list[dict[str, Any]] = []  # per listed file: how many pairs it labels (a file with 0 is said so)
    humans = import_labels(files, s, scale, require_complete=bool(filled("audit", settings)["require_complete"]),
                           sample_id=meta["sample_id"], counts=counts) if files else import_labels([], s, scale)
    j2 = read_table("qrels", judge2, columns=columns) if judge2 else None
    q_all = read_table("qrels", qrels, columns=columns)
    q = q_all if (judge2 and judge2_scope == "all") else None
    run_paths = [runs] if isinstance(runs, str) else list(runs or [])
    run_map = dict(zip(list(systems or []), run_paths))
    fnames = settings.get("facets")
    if fnames is None and facets:
        fnames = list((facets.get("taxonomy") or {}).keys()) + list(facets.get("boolean") or [])
    info = compute(s, meta, humans, scale, judge2=j2, judge2_name=judge2_name if judge2 else None,
                   judge2_scope=judge2_scope, qrels=q, runs=run_map, settings=settings, facets=list(fnames or []))
    tables = info.pop("tables")
    extra, extra_tables = _trust(s, humans, q_all, j2, judge2_scope, run_map, settings)
    info.update(extra, label_files=counts)
    tables.update(extra_tables)
    info["stage_version"] = version
    with staged_dir(report, MARKER) as out:
        for name, df in tables.items():
            with atomic_path(out / f"{name}.csv", suffix=".csv") as tmp:
                df.write_csv(tmp)
        pairs = s.select("item_id", "query_id", "image_id")
        hl = humans.join(pairs, on="item_id", how="left").select("rater", "item_id", "query_id", "image_id", "label")
        with atomic_path(out / "human_labels.jsonl") as tmp:
            tmp.write_text("") if not hl.height else hl.write_ndjson(tmp)
        atomic_write_text(out / "audit.md", "## Judge audit\n\n" + render_markdown(info))
        atomic_write_text(out / MARKER, json.dumps(info, indent=2, ensure_ascii=False, default=_json_default) + "\n")
    log.info("audit report: %s; %d people, %d comparisons", info["status"], len(info["people"]),
             len(info["comparisons"]))
    return info


def _trust(sample: pl.DataFrame, humans: pl.DataFrame, qrels: pl.DataFrame, judge2: pl.DataFrame | None,
           judge2_scope: str, runs: Mapping[str, str], settings: Mapping[str, Any]):
    """Human-corrected scores and the two judges' rankings (:mod:`.trust`, docs/trust.md)."""
    from .trust import trust_parts

    s = filled("audit", settings)
    return trust_parts(sample=sample, humans=humans, qrels=qrels, runs=runs, metrics=list(s["metrics"]),
                       confidence=float(s["confidence"]), judge2=judge2, judge2_scope=judge2_scope,
                       draws=int(s["bootstrap"]), seed=int(s["seed"]))


def _json_default(o: Any):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    raise TypeError(type(o))

"""The audit sample: a stratified, deterministic sample of judged (query, image) pairs.

Every judged pair gets a *priority*, ``BLAKE2b-64(seed, query_id, image_id)``; pairs are grouped into
strata (by candidate pool, judge label, query difficulty and/or facet values, ``audit.strata``) and each
stratum contributes its lowest-priority pairs. Nothing depends on row order, threads or the clock, so
the same qrels and settings always give the same sample, and a pair's chance to be drawn never depends on
another pair's (adding or removing queries changes the sample only where it must: bottom-k sampling).

Allocation (``audit.allocation``): ``proportional`` (default) gives each stratum its share of
``sample_size`` (largest remainder), after a floor of ``min_per_stratum`` pairs, so small strata such as the
seed rows or the judge's rare positives are always audited; ``equal`` gives every stratum the same number
(capped by its size). Each row carries ``weight`` = stratum size / pairs drawn from it, so estimates for the
whole benchmark can be re-weighted.

With evaluated systems the ``rank`` stratum is the band of the best rank any of them gives the pair in its
judged pool (``audit.rank_bands``), and proportional allocation weighs each stratum's size by its band's
weight: the pairs the systems rank high, which nDCG@k, MAP and MRR rest on, are over-sampled
(:func:`rank_strata`; docs/audit.md).

Human labels are never an input here: the sample rule reads only qrels, plan, annotations and the systems'
runs, so labels arriving later never re-draw it (docs/audit.md).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl

from ..audit_settings import BUILTIN_STRATA
from ..formats import FacetModel, read_table
from ..io import atomic_write_text
from ..logs import get_logger
from ..settings_schema import default
from .files import write_sample

__all__ = ["draw_sample", "allocate", "priority", "difficulty_bands", "rank_strata", "run", "BUILTIN_STRATA"]

log = get_logger("audit")



def priority(seed: int, query_id: str, image_id: str) -> int:
    """The pair's sampling priority (lower = drawn first): 64 bits of BLAKE2b, stable everywhere."""
    h = hashlib.blake2b(f"{seed}\x1f{query_id}\x1f{image_id}".encode(), digest_size=8)
    return int.from_bytes(h.digest(), "big") >> 1  # fits a signed int64


def item_id(query_id: str, image_id: str) -> str:
    """A short stable id of a (query, image) pair, the same in every file of the audit."""
    return hashlib.blake2b(f"{query_id}\x1f{image_id}".encode(), digest_size=8).hexdigest()


def difficulty_bands(plan: pl.DataFrame) -> pl.DataFrame:
    """(query_id, difficulty): ``low`` / ``medium`` / ``high`` by the share of hard and near-miss
    negatives among the query's non-seed candidates (< 1/3, < 2/3, otherwise)."""
    if not plan.height or "difficulty" not in plan.columns or not isinstance(plan.schema["difficulty"], pl.Struct):
        return pl.DataFrame(schema={"query_id": pl.String, "difficulty": pl.String})
    d = plan.select("query_id", pl.col("difficulty").struct.unnest())
    pools = [c for c in d.columns if c != "query_id"]
    hard = sum((pl.col(c).fill_null(0) for c in pools if c in ("hard", "nearmiss")), pl.lit(0))
    total = sum((pl.col(c).fill_null(0) for c in pools if c != "seed"), pl.lit(0))
    share = pl.when(total > 0).then(hard / total).otherwise(0.0)
    return d.select("query_id", pl.when(share < 1 / 3).then(pl.lit("low")).when(share < 2 / 3)
                    .then(pl.lit("medium")).otherwise(pl.lit("high")).alias("difficulty"))


def _largest_remainder(total: int, weights: list[float], caps: list[int]) -> list[int]:
    """Split ``total`` in proportion to ``weights``, never above ``caps`` (repeated until placed)."""
    out = [0] * len(weights)
    left = total
    while left > 0:
        open_ = [i for i in range(len(weights)) if out[i] < caps[i] and weights[i] > 0]
        if not open_:
            break
        wsum = sum(weights[i] for i in open_)
        quotas = {i: left * weights[i] / wsum for i in open_}
        placed = 0
        for i in open_:
            add = min(int(quotas[i]), caps[i] - out[i])
            out[i] += add
            placed += add
        left -= placed
        if left and placed == 0:
            # remainders, largest first (ties: stratum order), one each
            for i in sorted(open_, key=lambda i: (-(quotas[i] - int(quotas[i])), i)):
                if left == 0:
                    break
                if out[i] < caps[i]:
                    out[i] += 1
                    left -= 1
    return out


def allocate(sizes: Sequence[int], n: int, *, min_per_stratum: int = 0,
             allocation: str = default("audit.allocation"), weights: Sequence[float] | None = None) -> list[int]:
    """Pairs to draw per stratum (strata in a fixed order); the sum is min(n, sum(sizes)). ``weights``
    (proportional allocation): a stratum's share is in proportion to its size times its weight (the rank
    bands' over-sampling); None = 1 each."""
    sizes = list(sizes)
    weights = [1.0] * len(sizes) if weights is None else [float(w) for w in weights]
    n = min(n, sum(sizes))
    if allocation == "equal":
        return _largest_remainder(n, [1.0 if s else 0.0 for s in sizes], sizes)
    if allocation != "proportional":
        raise ValueError(f"audit.allocation: unknown allocation {allocation!r} (proportional or equal)")
    floor = [min(s, min_per_stratum) for s in sizes]
    if sum(floor) >= n:  # too many strata for the floor: share n equally instead
        return _largest_remainder(n, [1.0 if s else 0.0 for s in sizes], floor)
    extra = _largest_remainder(n - sum(floor), [s * w for s, w in zip(sizes, weights)],
                               [s - f for s, f in zip(sizes, floor)])
    return [f + e for f, e in zip(floor, extra)]


def rank_band_names(bands: Sequence[Mapping[str, Any]]) -> list[str]:
    """The rank stratum's values, best band first: ``1-3``, ``4-10``, then ``11+`` (deeper or unranked)."""
    names, lo = [], 1
    for b in bands:
        hi = int(b["max_rank"])
        names.append(f"{lo}-{hi}" if hi > lo else f"{lo}")
        lo = hi + 1
    return names + [f"{lo}+"]


def rank_strata(qrels: pl.DataFrame, runs: Mapping[str, pl.DataFrame],
                bands: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """(query_id, image_id, rank, rank_weight): the band of the best rank any evaluated system gives the pair
    in its query's judged pool (the leaderboard's pool scope; ties by image id, as the corrected scores),
    and the band's allocation weight (``audit.rank_bands``; the last band, deeper or unranked, weighs 1).
    ``runs``: system -> its run as a frame (query_id, image_id, score), :func:`benchmaker.evaluate.runs.read_run`."""
    pairs = qrels.select("query_id", "image_id")
    best = [pairs.join(run.select("query_id", "image_id", "score"), on=["query_id", "image_id"], how="inner")
            .sort(["query_id", "score", "image_id"], descending=[False, True, False])
            .select("query_id", "image_id", pl.int_range(1, pl.len() + 1).over("query_id").alias("_r"))
            for _, run in sorted(runs.items())]
    ranked = (pl.concat(best).group_by("query_id", "image_id").agg(pl.col("_r").min()) if best
              else pl.DataFrame(schema={"query_id": pl.String, "image_id": pl.String, "_r": pl.Int64}))
    names = rank_band_names(bands)
    band = pl.lit(len(bands))  # deeper or unranked
    for i, b in reversed(list(enumerate(bands))):
        band = pl.when(pl.col("_r") <= int(b["max_rank"])).then(pl.lit(i)).otherwise(band)
    weights = [float(b["weight"]) for b in bands] + [1.0]
    out = pairs.join(ranked, on=["query_id", "image_id"], how="left", maintain_order="left").with_columns(
        pl.when(pl.col("_r").is_null()).then(pl.lit(len(bands))).otherwise(band).alias("_b"))
    return out.select("query_id", "image_id",
                      pl.col("_b").replace_strict(list(range(len(names))), names, return_dtype=pl.String).alias("rank"),
                      pl.col("_b").replace_strict(list(range(len(weights))), weights, return_dtype=pl.Float64)
                      .alias("rank_weight"))


def _facet_values(ann: pl.DataFrame, names: Sequence[str]) -> pl.DataFrame:
    cols = [pl.col(n).cast(pl.String).fill_null("(none)").alias(n) for n in names if n in ann.columns]
    return ann.select("image_id", *cols)


def draw_sample(qrels: pl.DataFrame, plan: pl.DataFrame, annotations: pl.DataFrame, fm: FacetModel, *,
                sample_size: int, seed: int, strata: Sequence[str], min_per_stratum: int = 2,
                allocation: str = default("audit.allocation"), ranks: pl.DataFrame | None = None) -> pl.DataFrame:
    """The sample (one row per drawn pair) in page order: queries by priority, pairs by priority.
    ``ranks``: :func:`rank_strata` of the evaluated systems; without it the ``rank`` stratum is left out."""
    if ranks is None:
        strata = [s for s in strata if s != "rank"]
    unknown = [s for s in strata if s not in BUILTIN_STRATA and s not in fm.names]
    if unknown:
        raise ValueError(f"audit.strata: {unknown} are neither {list(BUILTIN_STRATA)} nor facets "
                         f"({', '.join(fm.names)})")
    if not qrels.height:
        raise ValueError("audit: qrels.jsonl has no judged pair to sample")
    facet_names = list(fm.names)
    df = (
        qrels.select("query_id", "query_text", "image_id", "pool", "is_seed",
                     pl.col("relevance_label").alias("judge_label"), "judge")
        .join(difficulty_bands(plan), on="query_id", how="left")
        .with_columns(pl.col("difficulty").fill_null("(none)"))
        .join(_facet_values(annotations, facet_names), on="image_id", how="left")
        .with_columns([pl.col(n).fill_null("(none)") for n in facet_names])
    )
    if ranks is not None and "rank" in strata:
        df = df.join(ranks.select("query_id", "image_id", "rank", "rank_weight"), on=["query_id", "image_id"],
                     how="left").with_columns(pl.col("rank").fill_null("(none)"), pl.col("rank_weight").fill_null(1.0))
    else:
        df = df.with_columns(pl.lit(1.0).alias("rank_weight"))
    qids, iids = df["query_id"].to_list(), df["image_id"].to_list()
    df = df.with_columns(
        pl.Series("priority", [priority(seed, q, i) for q, i in zip(qids, iids)], dtype=pl.Int64),
        pl.Series("item_id", [item_id(q, i) for q, i in zip(qids, iids)], dtype=pl.String),
    )
    if strata:
        key = pl.concat_str([pl.lit(f"{s}=") + pl.col(s).cast(pl.String) for s in strata], separator="|")
    else:
        key = pl.lit("all")
    df = df.with_columns(key.alias("stratum"))
    sizes = (df.group_by("stratum").agg(pl.len().alias("stratum_size"), pl.col("rank_weight").first())
             .sort("stratum"))
    take = allocate(sizes["stratum_size"].to_list(), sample_size, min_per_stratum=min_per_stratum,
                    allocation=allocation, weights=sizes["rank_weight"].to_list())
    sizes = sizes.drop("rank_weight").with_columns(pl.Series("stratum_sample", take, dtype=pl.Int64))
    df = (
        df.join(sizes, on="stratum", how="left")
        .sort("stratum", "priority", "item_id")
        .with_columns(pl.int_range(pl.len()).over("stratum").alias("_rank"))
        .filter(pl.col("_rank") < pl.col("stratum_sample"))
        .with_columns((pl.col("stratum_size") / pl.col("stratum_sample")).alias("weight"))
    )
    # page order: queries grouped (read a query once), in priority order; pairs within a query by
    # priority, so neither the pool nor the judge's label can be guessed from the position
    qprio = df.group_by("query_id").agg(pl.col("priority").min().alias("_qp"))
    df = df.join(qprio, on="query_id").sort("_qp", "query_id", "priority", "item_id")
    facets = (pl.struct([pl.col(n) for n in facet_names]) if facet_names else pl.lit(None)).alias("facets")
    return df.with_row_index("order", offset=1).select(
        pl.col("order").cast(pl.Int64), "item_id", "query_id", "query_text", "image_id", "pool", "is_seed",
        "judge_label", "judge", "difficulty", facets, "stratum", "stratum_size", "stratum_sample", "weight",
        "priority",
    )


def sample_digest(sample: pl.DataFrame, settings: Mapping[str, Any]) -> str:
    """The sample id: a digest of the drawn pairs (and their query texts) and the settings."""
    h = hashlib.sha256(json.dumps(dict(settings), sort_keys=True, default=str).encode())
    for qid, text, iid in sample.select("query_id", "query_text", "image_id").iter_rows():
        h.update(f"{qid}\x1f{text}\x1f{iid}\x1e".encode())
    return h.hexdigest()[:16]


SAMPLE_KEYS = ("sample_size", "seed", "strata", "min_per_stratum", "allocation", "rank_bands")


def _ranks(qrels: pl.DataFrame, runs: str | Sequence[str] | None, systems: Sequence[str] | None,
           strata: Sequence[str], bands: Sequence[Mapping[str, Any]]) -> pl.DataFrame | None:
    """The rank stratum from the evaluated systems' runs; None (stratum left out) without systems."""
    paths = [runs] if isinstance(runs, str) else list(runs or [])
    if "rank" not in strata or not paths:
        return None
    from ..evaluate.runs import read_run

    names = list(systems or [])
    if len(names) != len(paths):
        raise ValueError(f"audit_sample: {len(paths)} run files for systems {names}")
    return rank_strata(qrels, {n: read_run(p) for n, p in zip(names, paths)}, bands)


def run(*, qrels: str, plan: str, annotations: str, sample: str, sample_meta: str, settings: Mapping[str, Any],
        facets: Mapping[str, Any], columns: Mapping[str, str] | None = None, labels: str = default("judge.labels"),
        runs: str | Sequence[str] | None = None, systems: Sequence[str] | None = None,
        benchmark: str | None = None, version: str | None = None) -> dict[str, Any]:
    """Stage ``audit_sample``. ``runs``, ``systems``: the evaluate stage's run files and their systems' names
    (the ``rank`` stratum); none = the stratum is left out and the settings recorded say so."""
    fm = FacetModel.from_config(facets)
    q = read_table("qrels", qrels, columns=columns)
    p = read_table("query_plan", plan, columns=columns)
    a = read_table("annotations", annotations, columns=columns, facets=fm)
    from ..settings_schema import filled

    full = filled("audit", {k: settings[k] for k in SAMPLE_KEYS if k in settings})
    s = {k: full[k] for k in SAMPLE_KEYS}
    ranks = _ranks(q, runs, systems, list(s["strata"]), list(s["rank_bands"]))
    if ranks is None:  # no rank stratum: the sample, its settings and its id as without the setting
        s["strata"] = [x for x in s["strata"] if x != "rank"]
        s.pop("rank_bands")
    else:
        s["systems"] = sorted(systems or [])
    if not q.height:
        from ..losses import nothing_to_do

        raise nothing_to_do("audit", f"{qrels} has no judged pair to sample", Path(qrels).parent / "losses")
    df = draw_sample(q, p, a, fm, sample_size=int(s["sample_size"]), seed=int(s["seed"]),
                     strata=list(s["strata"]), min_per_stratum=int(s["min_per_stratum"]),
                     allocation=str(s["allocation"]), ranks=ranks)
    sid = sample_digest(df, s)
    write_sample(df, sample)
    strata = (df.group_by("stratum", maintain_order=True)
              .agg(pl.col("stratum_size").first(), pl.col("stratum_sample").first()).sort("stratum"))
    meta = {
        "sample_id": sid, "benchmark": benchmark, "labels": labels, "settings": s,
        "population_pairs": q.height, "population_queries": q["query_id"].n_unique(),
        "sample_pairs": df.height, "sample_queries": df["query_id"].n_unique(),
        "strata": [{"stratum": r, "pairs": int(n), "sampled": int(k)} for r, n, k in strata.iter_rows()],
        "stage_version": version,
    }
    atomic_write_text(sample_meta, json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    log.info("audit sample %s: %d of %d pairs (%d queries) in %d strata", sid, df.height, q.height,
             meta["sample_queries"], strata.height)
    return meta

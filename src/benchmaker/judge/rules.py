"""The ``rules`` judge: a deterministic, offline baseline (docs/judge-rules.md).

It labels; the query text and narrative are written before by the ``rules`` query writer
(:mod:`benchmaker.queries.rules`), from the same seed profile and the seeds' distinctive tags, so the
offline build runs the same two stages as an API build.

* Relevance: agreement with the plan's seed profile on the core facets (the fields of the plan's
  ``profile``) and tag Jaccard with the union of the seeds' tags:

  ======  ===================================================================================
  label   condition (share = agreeing core facets / core facets; J = tag Jaccard with seeds)
  ======  ===================================================================================
  3       share = 1 and J >= min(1, 2 * relevant_min_jaccard)                    (graded only)
  2       share >= relevant_min_core_match and J >= relevant_min_jaccard
  1       share >= relevant_min_core_match and J >= partial_min_jaccard, or J >= relevant_min_jaccard
  0       otherwise
  ======  ===================================================================================

  Binary labels are 1 exactly when the graded label would be 2 or 3.

Everything is computed with polars over the exploded (query, candidate) pairs; only the final text
composition loops over queries.
"""

from __future__ import annotations

from typing import Any, Mapping

import polars as pl

from ..describe import annotated_seeds, profile_facets
from ..formats import FacetModel
from ..logs import get_logger
from ..losses import Losses
from ..settings_schema import default, filled

__all__ = ["RulesJudge", "DEFAULTS"]

log = get_logger("judge.rules")

# the schema's judge.rules settings, with the judge section's labels and rationale beside them
DEFAULTS: dict[str, Any] = {**filled("judge.rules", {}), "labels": default("judge.labels"),
                            "rationale": default("judge.rationale")}

class RulesJudge:
    """Deterministic judge from facet agreement and tag overlap (no model, no network)."""

    name = "rules"

    def __init__(self, *, facets: FacetModel, settings: Mapping[str, Any] | None = None,
                 image_root: str | None = None, cache_dir: str | None = None, threads: int = 1):
        s = {**DEFAULTS, **{k: v for k, v in dict(settings or {}).items() if k in DEFAULTS}}
        self.facets = facets
        self.min_core = float(s["relevant_min_core_match"])
        self.rel_j = float(s["relevant_min_jaccard"])
        self.part_j = float(s["partial_min_jaccard"])
        self.graded = s["labels"] == "graded"
        self.rationale = bool(s["rationale"])

    # ---- helpers -------------------------------------------------------------------------------
    def _core(self, plan: pl.DataFrame) -> list[str]:
        return profile_facets(plan, self.facets)

    def _labels(self, share: pl.Expr, jac: pl.Expr) -> pl.Expr:
        rel = (share >= self.min_core) & (jac >= self.rel_j)
        part = ((share >= self.min_core) & (jac >= self.part_j)) | (jac >= self.rel_j)
        if not self.graded:
            return pl.when(rel).then(1).otherwise(0).cast(pl.Int64)
        high = (share >= 1.0) & (jac >= min(1.0, 2 * self.rel_j))
        return pl.when(high).then(3).when(rel).then(2).when(part).then(1).otherwise(0).cast(pl.Int64)

    # ---- the judge ---------------------------------------------------------------------------------
    def judge(self, plan: pl.DataFrame, annotations: pl.DataFrame, images: pl.DataFrame,
              losses: Losses) -> pl.DataFrame:
        fm = self.facets
        core = self._core(plan)
        # seeds with annotations; queries without any are lost
        ann, seeds = annotated_seeds(plan, annotations, fm, losses)
        judged_q = set(seeds["query_id"].unique().to_list())
        seed_tags = seeds.group_by("query_id").agg(
            pl.col("tags").list.explode(keep_nulls=False, empty_as_null=False).unique().sort().alias("seed_tags")
        )

        # candidate pairs with annotation, seed tags and the core profile
        pairs = (
            plan.select("query_id", "candidates").explode("candidates").unnest("candidates")
            .select("query_id", "image_id")
            .filter(pl.col("query_id").is_in(list(judged_q)))
            .with_row_index("_order")
        )
        missing = pairs.join(ann.select("image_id"), on="image_id", how="anti")
        if missing.height:
            log.warning("%d planned candidates have no annotation; their queries cannot be judged "
                        "(e.g. %s)", missing.height, missing["image_id"].head(3).to_list())
        df = pairs.join(ann, on="image_id", how="inner").join(seed_tags, on="query_id", how="left")
        if core:
            prof = plan.select("query_id", pl.col("profile").struct.unnest().name.prefix("__p_"))
            df = df.join(prof.select("query_id", *[f"__p_{f}" for f in core]), on="query_id", how="left")
            agree = pl.sum_horizontal([
                (pl.col(f).cast(pl.String) == pl.col(f"__p_{f}").cast(pl.String)).fill_null(False).cast(pl.Int64)
                for f in core
            ])
            share = agree / len(core)
        else:
            agree = pl.lit(0, pl.Int64)
            share = pl.lit(1.0)
        inter = pl.col("tags").list.set_intersection("seed_tags").list.len()
        union = pl.col("tags").list.set_union("seed_tags").list.len()
        df = df.with_columns(
            agree.alias("_agree"), share.alias("_share"),
            # seeds without tags (e.g. labels imported by the metadata adapter): tags say nothing, the
            # facets decide alone
            pl.when(pl.col("seed_tags").list.len().fill_null(0) == 0).then(1.0)
            .when(union > 0).then(inter / union).otherwise(0.0).alias("_jac"),
        ).with_columns(self._labels(pl.col("_share"), pl.col("_jac")).alias("relevance_label"))
        cents = (pl.col("_jac") * 100).round(0).cast(pl.Int64)
        jtxt = pl.format("{}.{}", cents // 100, (cents % 100).cast(pl.String).str.zfill(2))
        if core:
            why = pl.format("core facets {}/{}, jaccard {}", pl.col("_agree"), pl.lit(len(core)), jtxt)
        else:
            why = pl.format("no core facets, jaccard {}", jtxt)
        df = df.with_columns(why.alias("rationale")).sort("_order")

        out = df.select(
            "query_id", "image_id", "relevance_label",
            *(["rationale"] if self.rationale else []), pl.lit(self.name).alias("judge"),
        )
        log.info("rules judge: %d queries, %d pairs, %d labelled relevant", len(judged_q), out.height,
                 out.filter(pl.col("relevance_label") >= (2 if self.graded else 1)).height)
        return out

"""The ``rules`` judge: a deterministic, offline baseline (docs/judge-rules.md).

* Query text: composed from the seed profile's facets and the seeds' most distinctive tags (highest
  inverse document frequency over the annotations), e.g. ``a photo of a cat, indoor setting, with saucer
  and coffee cup``; texts are made unique across queries by adding further distinctive tags.
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

from ..formats import FacetModel
from ..logs import get_logger
from ..losses import Losses
from ..settings_schema import default, filled

__all__ = ["RulesJudge", "DEFAULTS", "compose_text"]

log = get_logger("judge.rules")

# the schema's judge.rules settings, with the judge section's labels and rationale beside them
DEFAULTS: dict[str, Any] = {**filled("judge.rules", {}), "labels": default("judge.labels"),
                            "rationale": default("judge.rationale")}

UNINFORMATIVE = {"unknown", "other", "<null>", ""}
HEAD_FACETS = {"subject", "object", "category", "class", "content", "species", "animal", "main_subject",
               "object_type", "subject_type", "scene"}
MAX_TEXT_FACETS = 3  # facets named in a query when no core facets are configured


def _words(s: str) -> str:
    return str(s).replace("_", " ").strip()


def _facet_words(name: str) -> str:
    for suffix in ("_type", "_kind", "_category"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return _words(name)


def _phrase(facet: str, value: Any, boolean: bool) -> str | None:
    """One facet value as words, or None when it says nothing ("unknown", "other")."""
    if value is None:
        return None
    if boolean:
        v = value if isinstance(value, bool) else str(value).lower() == "true"
        if facet.startswith("is_"):
            return _words(facet[3:]) if v else "not " + _words(facet[3:])
        return _words(facet) if v else "no " + _words(facet)
    v = str(value)
    if v.lower() in UNINFORMATIVE:
        return None
    if v.lower() == "none":
        return "no " + _facet_words(facet)
    return f"{_words(v)} {_facet_words(facet)}"


# heads that read better without an article ("a photo of food", "a photo of space")
MASS_NOUNS = {"food", "food drink", "water", "grass", "sand", "text", "space", "smoke", "fire", "snow", "rain",
              "fog", "haze", "dust", "landscape", "nature", "scenery", "traffic", "furniture", "art",
              "texture", "microscopy", "other", "people", "wildlife"}


def with_article(head: str) -> str:
    """``cat`` -> ``a cat``, ``astronaut`` -> ``an astronaut``; plurals and mass nouns stay bare."""
    h = head.strip()
    if not h or h.lower() in MASS_NOUNS or h.lower().endswith("s") or " and " in h:
        return h
    return ("an " if h[0].lower() in "aeiou" else "a ") + h


def compose_text(facet_values: list[tuple[str, Any, bool]], tags: list[str]) -> str:
    """``a photo of <head>, <facet phrases>, with <tag> and <tag>`` (natural-ish English)."""
    head = None
    phrases: list[str] = []
    for name, value, boolean in facet_values:
        if head is None and not phrases and not boolean and name in HEAD_FACETS \
                and value is not None and str(value).lower() not in UNINFORMATIVE | {"none"}:
            head = _words(value)
            continue
        p = _phrase(name, value, boolean)
        if p:
            phrases.append(p)
    if head is None and phrases:
        head = phrases.pop(0)
    text = f"a photo of {with_article(head)}" if head else "a photo"
    if phrases:
        text += ", " + ", ".join(phrases)
    tag_words = [_words(t) for t in tags]
    if tag_words:
        text += ", with " + (" and ".join(tag_words) if len(tag_words) <= 2
                             else ", ".join(tag_words[:-1]) + " and " + tag_words[-1])
    return text


class RulesJudge:
    """Deterministic judge from facet agreement and tag overlap (no model, no network)."""

    name = "rules"

    def __init__(self, *, facets: FacetModel, settings: Mapping[str, Any] | None = None,
                 image_root: str | None = None, cache_dir: str | None = None, threads: int = 1):
        s = {**DEFAULTS, **{k: v for k, v in dict(settings or {}).items() if k in DEFAULTS}}
        self.facets = facets
        self.query_tags = int(s["query_tags"])
        self.min_core = float(s["relevant_min_core_match"])
        self.rel_j = float(s["relevant_min_jaccard"])
        self.part_j = float(s["partial_min_jaccard"])
        self.graded = s["labels"] == "graded"
        self.rationale = bool(s["rationale"])

    # ---- helpers -------------------------------------------------------------------------------
    def _core(self, plan: pl.DataFrame) -> list[str]:
        if "profile" not in plan.columns or not isinstance(plan.schema["profile"], pl.Struct):
            return []
        names = set(self.facets.names)
        return [f.name for f in plan.schema["profile"].fields if f.name in names]

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
        ann = annotations.select(
            "image_id", pl.col("tags").list.drop_nulls().list.unique().alias("tags"), *fm.names
        ).unique("image_id", keep="first")

        # seeds with annotations; queries without any are lost
        seeds = (
            plan.select("query_id", "seed_image_ids").explode("seed_image_ids")
            .rename({"seed_image_ids": "image_id"}).drop_nulls("image_id")
            .join(ann, on="image_id", how="inner")
        )
        judged_q = set(seeds["query_id"].unique().to_list())
        for qid in plan["query_id"].to_list():
            if qid not in judged_q:
                losses.add("query", qid, "seed_not_annotated", "no seed of this query has an annotation")
        n_seeds = seeds.group_by("query_id").len("n_seeds")
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

        texts = self._texts(plan.filter(pl.col("query_id").is_in(list(judged_q))), seeds, n_seeds, ann, core)
        out = df.join(texts, on="query_id", how="left").select(
            "query_id", "query_text", "image_id", "relevance_label",
            *(["rationale"] if self.rationale else []), pl.lit(self.name).alias("judge"),
        )
        log.info("rules judge: %d queries, %d pairs, %d labelled relevant", texts.height, out.height,
                 out.filter(pl.col("relevance_label") >= (2 if self.graded else 1)).height)
        return out

    # ---- query texts -------------------------------------------------------------------------------
    def _texts(self, plan: pl.DataFrame, seeds: pl.DataFrame, n_seeds: pl.DataFrame, ann: pl.DataFrame,
               core: list[str]) -> pl.DataFrame:
        fm = self.facets
        n_docs = max(1, ann.height)
        idf = (
            ann.select(pl.col("tags").explode()).drop_nulls().group_by("tags").len("df")
            .with_columns((pl.lit(float(n_docs)) / pl.col("df")).log().alias("idf"))
            .rename({"tags": "tag"})
        )
        # tags carried by at least half of a query's seeds, most distinctive first (ties by name)
        ranked = (
            seeds.select("query_id", pl.col("tags").alias("tag")).explode("tag").drop_nulls("tag")
            .group_by("query_id", "tag").len("k")
            .join(n_seeds, on="query_id").filter(pl.col("k") * 2 >= pl.col("n_seeds"))
            .join(idf, on="tag", how="left")
            .sort(["query_id", "idf", "tag"], descending=[False, True, False])
            .group_by("query_id", maintain_order=True).agg(pl.col("tag"))
        )
        tag_lists = dict(zip(ranked["query_id"].to_list(), ranked["tag"].to_list()))
        # seed profile over every facet: majority, ties -> smallest value as text (as the planner)
        long = (
            seeds.select("query_id", *[pl.col(f).cast(pl.String) for f in fm.names])
            .unpivot(index="query_id", variable_name="facet", value_name="value")
            .group_by("query_id", "facet", "value").len("k")
            .sort(["query_id", "facet", "k", "value"], descending=[False, False, True, False], nulls_last=True)
            .group_by("query_id", "facet", maintain_order=True).first()
        ) if fm.names else pl.DataFrame(schema={"query_id": pl.String, "facet": pl.String, "value": pl.String})
        majority: dict[str, dict[str, str | None]] = {}
        for qid, facet, value in long.select("query_id", "facet", "value").iter_rows():
            majority.setdefault(qid, {})[facet] = value
        core_vals: dict[str, dict[str, Any]] = {}
        if core:
            for row in plan.select("query_id", "profile").iter_rows():
                core_vals[row[0]] = dict(row[1] or {})
        booleans = set(fm.boolean)
        if core:
            text_facets = core
        else:
            text_facets = [f for f in fm.taxonomy][:MAX_TEXT_FACETS]
        extra_facets = [f for f in fm.names if f not in text_facets]

        used: set[str] = set()
        out_q, out_t = [], []
        n_extended = 0
        for qid in plan["query_id"].to_list():
            maj = majority.get(qid, {})
            prof = core_vals.get(qid, {})
            fv = [(f, prof.get(f, maj.get(f)), f in booleans) for f in text_facets]
            tags = tag_lists.get(qid, [])
            k = min(self.query_tags, len(tags))
            text = compose_text(fv, tags[:k])
            extra = list(extra_facets)
            variant = 1
            while text in used:
                n_extended += 1
                if k < len(tags):
                    k += 1
                elif extra:
                    f = extra.pop(0)
                    fv.append((f, maj.get(f), f in booleans))
                else:
                    variant += 1
                    text = compose_text(fv, tags[:k]) + f", variant {variant}"
                    continue
                text = compose_text(fv, tags[:k])
            used.add(text)
            out_q.append(qid)
            out_t.append(text)
        if n_extended:
            log.info("rules judge: extended %d colliding query texts to keep them unique", n_extended)
        return pl.DataFrame({"query_id": out_q, "query_text": out_t}, schema={"query_id": pl.String,
                                                                               "query_text": pl.String})


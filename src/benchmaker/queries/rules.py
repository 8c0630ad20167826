"""The ``rules`` query writer: a deterministic, offline baseline (docs/judge-rules.md).

Each planned query is written from its seeds alone: the seed profile's facets (the plan's ``profile``,
the core facets; else the seeds' majority value of the first taxonomy facets) and the seeds' most
distinctive tags (carried by at least half of the seeds; highest inverse document frequency over the
planned images' annotations), e.g. ``a photo of a cat, indoor setting, with saucer and coffee cup``,
and a narrative from the same facets and tags (``A relevant image shows a cat as its main content,
with indoor setting; saucer and coffee cup are visible. An image that shows these only as a
background detail, or shows something else, is not relevant.``). Texts are made unique across
queries by adding further distinctive tags. The ``rules`` judge then labels the candidates
(:mod:`benchmaker.judge.rules`).
"""

from __future__ import annotations

from typing import Any, Mapping

import polars as pl

from ..describe import annotated_seeds, profile_facets
from ..formats import FacetModel
from ..logs import get_logger
from ..losses import Losses
from ..settings_schema import filled

__all__ = ["RulesWriter", "compose_text", "compose_narrative", "with_article"]

log = get_logger("queries.rules")

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


def _head_and_phrases(facet_values: list[tuple[str, Any, bool]]) -> tuple[str | None, list[str]]:
    """The head noun (the first informative head facet, else the first phrase) and the other phrases."""
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
    return head, phrases


def _and(words: list[str]) -> str:
    return " and ".join(words) if len(words) <= 2 else ", ".join(words[:-1]) + " and " + words[-1]


def compose_text(facet_values: list[tuple[str, Any, bool]], tags: list[str]) -> str:
    """``a photo of <head>, <facet phrases>, with <tag> and <tag>`` (natural-ish English)."""
    head, phrases = _head_and_phrases(facet_values)
    text = f"a photo of {with_article(head)}" if head else "a photo"
    if phrases:
        text += ", " + ", ".join(phrases)
    tag_words = [_words(t) for t in tags]
    if tag_words:
        text += ", with " + _and(tag_words)
    return text


def compose_narrative(facet_values: list[tuple[str, Any, bool]], tags: list[str]) -> str:
    """Two sentences: what a relevant image shows as its main content, and what is not enough
    (TREC's narrative), from the same facets and tags as :func:`compose_text`."""
    head, phrases = _head_and_phrases(facet_values)
    text = f"A relevant image shows {with_article(head) if head else 'the subject of the query'} as its main content"
    if phrases:
        text += ", with " + _and(phrases)
    tag_words = [_words(t) for t in tags]
    if tag_words:
        text += "; " + _and(tag_words) + (" are" if len(tag_words) > 1 else " is") + " visible"
    return text + (". An image that shows these only as a background detail, or shows something else, "
                   "is not relevant.")


class RulesWriter:
    """Query texts and narratives from the seeds' facets and distinctive tags (no model, no network)."""

    name = "rules"

    def __init__(self, *, facets: FacetModel, settings: Mapping[str, Any] | None = None,
                 image_root: str | None = None, cache_dir: str | None = None, threads: int = 1):
        s = filled("queries.rules", {k: v for k, v in dict(settings or {}).items() if k == "query_tags"})
        self.facets = facets
        self.query_tags = int(s["query_tags"])

    def write(self, plan: pl.DataFrame, annotations: pl.DataFrame, images: pl.DataFrame,
              losses: Losses) -> pl.DataFrame:
        """query_id, query_text, narrative per planned query with an annotated seed (the others: losses)."""
        fm = self.facets
        ann, seeds = annotated_seeds(plan, annotations, fm, losses)
        written = set(seeds["query_id"].unique().to_list())
        n_seeds = seeds.group_by("query_id").len("n_seeds")
        out = self._texts(plan.filter(pl.col("query_id").is_in(list(written))), seeds, n_seeds, ann,
                          profile_facets(plan, fm))
        log.info("rules query writer: %d queries written", out.height)
        return out.with_columns(pl.lit(self.name).alias("writer"))

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
        if core:
            text_facets = core
        else:
            text_facets = [f for f in fm.taxonomy][:MAX_TEXT_FACETS]
        extra_facets = [f for f in fm.names if f not in text_facets]

        return self._compose(plan["query_id"].to_list(), majority, core_vals, tag_lists, text_facets, extra_facets)

    def _compose(self, qids: list[str], majority: dict, core_vals: dict, tag_lists: dict, text_facets: list[str],
                 extra_facets: list[str]) -> pl.DataFrame:
        """One text and narrative per query, in plan order; a text another query already has is made
        unique by adding further distinctive tags, then further facets, then a variant number."""
        booleans = set(self.facets.boolean)
        used: set[str] = set()
        out_q, out_t, out_n = [], [], []
        n_extended = 0
        for qid in qids:
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
            out_n.append(compose_narrative(fv[:len(text_facets)], tags[:k]))
        if n_extended:
            log.info("rules query writer: extended %d colliding query texts to keep them unique", n_extended)
        return pl.DataFrame({"query_id": out_q, "query_text": out_t, "narrative": out_n},
                            schema={"query_id": pl.String, "query_text": pl.String, "narrative": pl.String})


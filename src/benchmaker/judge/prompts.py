"""Labelling prompts and the strict JSON schema of a labelling answer.

The judge labels; it does not write the query. It receives the query written before it, from the
seed alone (:mod:`benchmaker.queries`: ``query_text`` and a narrative of what a relevant image must
show, TREC's description and narrative), and the planned candidates as text descriptions (summary,
facets, tags; with ``send_thumbnails`` also each candidate's image at low detail). The seed is one
of the candidates, unmarked: candidates are under opaque keys ``c01, c02, …`` assigned in a stable
pseudo-random order (a digest of the query id and the image id: the same bytes on every run), so
that neither a key nor a position reveals which candidate is the seed or which pool it came from.
No file name, path, id, license or source reaches the judge. docs/judge-rules.md, "Method".

Layout for prompt caching: the answer schema (the same for every query with a pool of the same
size: judgments are an object whose required keys are the pool's positional keys), then the
system prompt (instructions, the facet definitions and tag vocabulary, the judging rules) and the
user prompt are identical across the queries of a run and lead every request; the per-query data
(the query, its narrative, the candidate descriptions, one table row each; the columns are defined
in the system prompt) comes last. :func:`check_answer` requires every planned key exactly once and
nothing else.
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

from ..describe import cell, facet_definitions, row_line, table_columns
from ..formats import FacetModel
from ..providers.spec import ImageRef, RequestSpec, Text, fill_metadata, with_own_instructions

__all__ = ["judge_schema", "default_system_prompt", "default_user_prompt", "candidate_keys", "judge_spec",
           "check_answer", "positional_keys", "judgments_by_key", "SCHEMA_NAME", "GRADED_SCALE"]

SCHEMA_NAME = "judgments"
GRADED_SCALE = ("0 = not relevant, 1 = marginally relevant (shares some aspect but would not satisfy the "
                "searcher), 2 = relevant, 3 = highly relevant (an ideal result)")


def candidate_keys(query_id: str, image_ids: Sequence[str]) -> dict[str, str]:
    """image_id -> opaque key (c01, c02, …), in a stable order that hides seeds and pools."""
    order = sorted(image_ids, key=lambda i: hashlib.sha256(f"{query_id}\x00{i}".encode()).hexdigest())
    return dict(zip(order, positional_keys(len(order))))


def judge_schema(keys: Sequence[str] | None = None, *, graded: bool, rationale: bool) -> dict:
    """The answer schema. ``keys``: the query's candidate keys, which are positional (``c01`` …
    ``cNN`` for a pool of N, :func:`candidate_keys`). ``judgments`` is an object with exactly these
    keys as its required properties (``{"c01": 1, "c02": 0, …}``; with a rationale
    ``{"c01": {"label": 1, "rationale": "…"}, …}``), so a model that follows it labels every candidate
    it was given exactly once and cannot answer for another one, and every query with a pool of the
    same size gets the very same schema (it leads the cacheable prefix: OpenAI puts the schema before
    the system message). An object costs about 5 output tokens per candidate fewer than a list of
    ``{"key": …, "label": …}`` entries (no key and label names written per candidate).
    :func:`check_answer` checks the keys again; :func:`judgments_by_key` reads either form.

    OpenAI's strict schemas allow at most 1,000 enum values in all
    (<https://platform.openai.com/docs/guides/structured-outputs#supported-schemas>), and the label's
    enum counts once per key: a pool whose keys times labels exceed :data:`ENUM_BUDGET` (over 225
    candidates graded, 450 binary) gets the list form instead, ``[{key, label[, rationale]}]`` with
    the keys in one enum."""
    label: dict[str, Any] = {"type": "integer", "enum": [0, 1, 2, 3] if graded else [0, 1]}
    if keys and len(keys) * len(label["enum"]) > ENUM_BUDGET:
        return _list_schema(sorted(keys), label, rationale)
    one: dict[str, Any] = label
    if rationale:
        one = {"type": "object", "additionalProperties": False,
               "properties": {"label": label, "rationale": {"type": "string", "description": "at most 20 words"}},
               "required": ["label", "rationale"]}
    ks = sorted(keys or ())
    judgments: dict[str, Any] = {"type": "object", "additionalProperties": False,
                                 "properties": {k: one for k in ks}, "required": ks}
    return {"type": "object", "additionalProperties": False, "properties": {"judgments": judgments},
            "required": ["judgments"]}


ENUM_BUDGET = 900      # enum values the object form may use (OpenAI's limit: 1,000 per schema)


def _list_schema(keys: list[str], label: dict, rationale: bool) -> dict:
    """``judgments`` as a list of ``{key, label[, rationale]}``, the key one of ``keys`` (large pools)."""
    one: dict[str, Any] = {"type": "object", "additionalProperties": False,
                           "properties": {"key": {"type": "string", "enum": keys}, "label": label},
                           "required": ["key", "label"]}
    if rationale:
        one["properties"]["rationale"] = {"type": "string", "description": "at most 20 words"}
        one["required"] = ["key", "label", "rationale"]
    return {"type": "object", "additionalProperties": False,
            "properties": {"judgments": {"type": "array", "items": one, "description": "one entry per key"}},
            "required": ["judgments"]}


def positional_keys(n: int) -> list[str]:
    """The keys of a pool of ``n`` candidates: ``c01`` … (what :func:`candidate_keys` assigns)."""
    width = max(2, len(str(n)))
    return [f"c{i:0{width}d}" for i in range(1, n + 1)]


JUDGING_RULES = (
    "",
    "Judging rules:",
    "- A candidate is relevant when a person who typed QUERY, with the need NARRATIVE describes, would be "
    "glad to see it among the results: it shows what the narrative asks for, as the main content, not as a "
    "background detail.",
    "- Facet values and tags that match the query are evidence, not proof: a candidate with the right tags "
    "but a summary about something else is not relevant; a candidate whose summary clearly shows the "
    "query's subject is relevant even when a facet is 'unknown'.",
    "- Judge each candidate on its own against the query and its narrative; do not compare candidates with "
    "each other and do not aim for a particular number of relevant ones.",
    "- Never use the keys, their order, file names, sources, licenses or any identifier as evidence.",
    "- When the descriptions do not allow a decision, choose the lower label.",
    "",
    "Answer format: judgments: every candidate key from DATA exactly once, with its label.",
)


def default_system_prompt(fm: FacetModel | None = None, *, graded: bool, rationale: bool) -> str:
    """Instructions, the facet definitions and vocabulary, the judging rules: identical for every
    query of a run (the cacheable prefix); the per-query data comes last, in the user message."""
    scale = GRADED_SCALE if graded else "1 = relevant, 0 = not relevant"
    return "\n".join([
        "You are an expert judging the relevance of images for an image-retrieval benchmark.",
        "You receive one search query (QUERY: the text a person typed; NARRATIVE: what an image must show to "
        "be relevant) and a set of candidate images, described by text annotations (a summary, facet values "
        "and tags); candidates are identified only by opaque keys (c01, c02, …) whose order means nothing.",
        f"Judge every candidate against the query and its narrative: {scale}.",
        "Judge only from the descriptions (and the candidates' images when given). Never use keys, order, file "
        "names, sources or rights. Label every key exactly once." + (" Give a short rationale (at most 20 "
                                                                     "words) per candidate." if rationale else ""),
        "Output MUST be valid JSON matching the provided schema exactly.",
        *facet_definitions(fm),
        "",
        "DATA gives QUERY and NARRATIVE, then the candidates, one per line, with the columns: "
        + table_columns(fm) + ".",
        *JUDGING_RULES,
    ])


def default_user_prompt() -> str:
    return "Judge every candidate against the query and its narrative."


def judge_spec(*, query_text: str, narrative: str | None, candidates: Sequence[Mapping[str, Any]],
               keys: Mapping[str, str], meta_row: Mapping[str, Any], fm: FacetModel, settings: Mapping[str, Any],
               thumbnails: Mapping[str, ImageRef] | None = None) -> RequestSpec:
    """One labelling request: the query and its narrative (written before, from the seed alone), then
    every candidate (the seed among them, unmarked) as a table row under its key, in key order; with
    ``thumbnails`` each candidate's image after its key. A query without a narrative (its text came
    from a reuse file or a deepened system's published qrels written before narratives) says ``none``."""
    graded = settings.get("labels") == "graded"
    rationale = bool(settings.get("rationale"))
    prompts = settings.get("prompts") or {}
    meta_cols = list(settings.get("metadata_columns") or []) or None
    sys_t = with_own_instructions(_default_system(fm, graded, rationale), prompts.get("system"))
    user_t = prompts.get("user") or default_user_prompt()
    by_key = sorted(((keys[c["image_id"]], c) for c in candidates), key=lambda kv: kv[0])
    # the user prompt (the same for every query) first, the query's data last, one table row per image
    data = "\n".join(["DATA", f"QUERY: {cell(query_text)}", f"NARRATIVE: {cell(narrative) or 'none'}",
                      "CANDIDATES:", *(row_line(k, c, fm) for k, c in by_key)])
    parts: list[Any] = [Text(fill_metadata(user_t, meta_row, meta_cols)), Text(data)]
    if thumbnails:
        parts.append(Text("The candidates' images follow, each after its key."))
        for k, c in by_key:
            ref = thumbnails.get(c["image_id"])
            if ref is not None:
                parts.extend([Text(f"{k}:"), ref])
    return RequestSpec(system=fill_metadata(sys_t, meta_row, meta_cols), parts=tuple(parts),
                       schema=_schema(graded, rationale, len(by_key)),
                       schema_name=SCHEMA_NAME)


_MEMO: dict[tuple, Any] = {}


def _default_system(fm: FacetModel, graded: bool, rationale: bool) -> str:
    k = ("system", id(fm), graded, rationale)
    if k not in _MEMO or _MEMO[k][0] is not fm:
        _MEMO[k] = (fm, default_system_prompt(fm, graded=graded, rationale=rationale))
    return _MEMO[k][1]


def _schema(graded: bool, rationale: bool, n: int) -> dict:
    """One schema object per label kind and pool size: serialised and compiled once, shared by every
    query with a pool of ``n`` candidates."""
    k = ("schema", graded, rationale, n)
    if k not in _MEMO:
        _MEMO[k] = judge_schema(positional_keys(n), graded=graded, rationale=rationale)
    return _MEMO[k]


def judgments_by_key(answer: Mapping[str, Any]) -> dict[str, dict]:
    """``judgments`` as key -> ``{label[, rationale]}``: the object form of :func:`judge_schema`
    (a key's value is its label, or ``{label, rationale}``) or a list of ``{key, label[, rationale]}``
    (answers cached before)."""
    j = answer.get("judgments") or []
    if isinstance(j, Mapping):
        return {str(k): (dict(v) if isinstance(v, Mapping) else {"label": v}) for k, v in j.items()}
    return {str(x.get("key")): x for x in j if isinstance(x, Mapping)}


def check_answer(keys: Sequence[str]):
    want = set(keys)

    def check(obj: dict) -> str | None:
        j = obj.get("judgments") or []
        got_list = [str(x.get("key")) for x in j] if isinstance(j, list) else list(j)
        got = set(got_list)
        if len(got_list) != len(got):
            dup = sorted({k for k in got_list if got_list.count(k) > 1})
            return f"judgments: key(s) labelled more than once: {dup[:5]}"
        if got != want:
            return (f"judgments: keys differ from the planned candidates (missing {sorted(want - got)[:5]}, "
                    f"unexpected {sorted(got - want)[:5]})")
        return None

    return check

"""Judge prompts and the strict JSON schema of a judge answer.

The judge sees the seed image(s) and the candidates as text descriptions (summary, facets, tags),
candidates under opaque keys ``c01, c02, …`` assigned in a stable pseudo-random order so that neither
a key nor a position reveals which candidate is the seed or which pool it came from. No file name,
path, id, license or source reaches the judge (optionally, thumbnails of the candidates do).

Layout for prompt caching: the answer schema (the same for every query with a pool of the same
size: judgments are an object whose required keys are the pool's positional keys), then the
system prompt (instructions, the facet definitions and tag vocabulary, the judging rules) and the
user prompt are identical across the queries of a run and lead every request; the per-query data
(seed and candidate descriptions, one table row each; the columns are defined in the system prompt)
comes last. :func:`check_answer` requires every planned key exactly once and nothing else.
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

from ..formats import FacetModel
from ..providers.spec import ImageRef, RequestSpec, Text, fill_metadata, with_own_instructions

__all__ = ["judge_schema", "default_system_prompt", "default_user_prompt", "candidate_keys", "describe",
           "judge_spec", "check_answer", "positional_keys", "judgments_by_key", "facet_definitions",
           "SCHEMA_NAME", "GRADED_SCALE", "DEEPEN_USER_PROMPT"]

SCHEMA_NAME = "query_and_judgments"
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
    return {
        "type": "object", "additionalProperties": False,
        "properties": {"query_text": {"type": "string"}, "judgments": judgments},
        "required": ["query_text", "judgments"],
    }


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
            "properties": {"query_text": {"type": "string"},
                           "judgments": {"type": "array", "items": one, "description": "one entry per key"}},
            "required": ["query_text", "judgments"]}


def positional_keys(n: int) -> list[str]:
    """The keys of a pool of ``n`` candidates: ``c01`` … (what :func:`candidate_keys` assigns)."""
    width = max(2, len(str(n)))
    return [f"c{i:0{width}d}" for i in range(1, n + 1)]


def facet_definitions(fm: FacetModel | None) -> list[str]:
    """The facet model as judging context: every facet with its allowed values, the tag vocabulary."""
    if fm is None:
        return []
    out = ["", "How the images are described (the annotation vocabulary):",
           "- summary: one factual sentence about the main content."]
    for name, values in fm.taxonomy.items():
        out.append(f"- {name}: one of {', '.join(values)}.")
    for name in fm.boolean:
        out.append(f"- {name}: yes or no ({name.replace('_', ' ')}).")
    if fm.vocabulary:
        out.append(f"- tags: {fm.min_tags} to {fm.max_tags} from this vocabulary: {', '.join(fm.vocabulary)}.")
    else:
        out.append(f"- tags: {fm.min_tags} to {fm.max_tags} short lowercase phrases, most salient first.")
    return out


JUDGING_RULES = (
    "",
    "Judging rules:",
    "- A candidate is relevant when a person who typed query_text would be glad to see it among the results: "
    "it shows what the query asks for, as the main content, not as a background detail.",
    "- Facet values and tags that match the query are evidence, not proof: a candidate with the right tags "
    "but a summary about something else is not relevant; a candidate whose summary clearly shows the "
    "query's subject is relevant even when a facet is 'unknown'.",
    "- Judge each candidate on its own against query_text; do not compare candidates with each other, do "
    "not aim for a particular number of relevant ones, and do not assume that any candidate is a seed.",
    "- Never use the keys, their order, file names, sources, licenses or any identifier as evidence.",
    "- When the descriptions do not allow a decision, choose the lower label.",
    "",
    "Answer format: query_text, then judgments: every candidate key from DATA exactly once, with its label.",
)


def default_system_prompt(fm: FacetModel | None = None, *, graded: bool, rationale: bool) -> str:
    """Instructions, the facet definitions and vocabulary, the judging rules: identical for every
    query of a run (the cacheable prefix); the per-query data comes last, in the user message."""
    scale = GRADED_SCALE if graded else "1 = relevant, 0 = not relevant"
    return "\n".join([
        "You are an expert creating and judging an image-retrieval benchmark.",
        "You receive a query seed (one or more seed images) and a set of candidate images, all described by "
        "text annotations (a summary, facet values and tags); candidates are identified only by opaque keys "
        "(c01, c02, …) whose order means nothing.",
        "1) Write query_text: one realistic, concise search query, as a person would type it into an image "
        "search engine, that the seed image(s) satisfy. Describe what the seeds share; keep it general enough "
        "that other images can also be relevant, without naming incidental details.",
        f"2) Judge every candidate against your query_text: {scale}.",
        "Judge only from the descriptions (and thumbnails when given). Never use keys, order, file names, "
        "sources or rights. Label every key exactly once." + (" Give a short rationale (at most 20 words) per "
                                                              "candidate." if rationale else ""),
        "Output MUST be valid JSON matching the provided schema exactly.",
        *facet_definitions(fm),
        "",
        "DATA lists the seeds (s1, s2, …) and then the candidates, one per line, with the columns: "
        + table_columns(fm) + ".",
        *JUDGING_RULES,
    ])


def default_user_prompt() -> str:
    return "Write the query for these seed images, then judge every candidate."


# pool deepening (docs/deepen.md): the query text is already written and published; the same system
# prompt and schema, the text given in DATA, echoed back unchanged as query_text
DEEPEN_USER_PROMPT = ("The query_text is already written: it is given in DATA. Copy it unchanged as query_text, "
                      "then judge every candidate against it.")


def describe(row: Mapping[str, Any], fm: FacetModel) -> dict:
    d: dict[str, Any] = {"summary": row.get("summary")}
    for name in fm.taxonomy:
        d[name] = row.get(name)
    for name in fm.boolean:
        d[name] = row.get(name)
    d["tags"] = list(row.get("tags") or [])
    return d


def _cell(v: Any) -> str:
    return " ".join(str(v if v is not None else "").split()).replace("|", "/")


def row_line(key: str, row: Mapping[str, Any], fm: FacetModel) -> str:
    """One image as a table row: ``key | summary | <facet values> | <true flags> | tags`` (the columns
    are defined once, in the system prompt: fewer tokens per candidate than JSON)."""
    cells = [key, _cell(row.get("summary"))]
    cells += [_cell(row.get(n)) or "unknown" for n in fm.taxonomy]
    if fm.boolean:
        cells.append(", ".join(n for n in fm.boolean if row.get(n)) or "-")
    cells.append(_tag_sep(fm).join(_cell(t) for t in (row.get("tags") or [])))
    return " | ".join(cells)


def _tag_sep(fm: FacetModel | None) -> str:
    """Tags are separated by a space when the vocabulary has no tag with a space in it (``smoke_present
    rising_plume``: one token fewer per tag than after a comma, whose own token a space does not
    need), else by a comma."""
    if fm is not None and fm.vocabulary and not any(any(c.isspace() for c in t) for t in fm.vocabulary):
        return " "
    return ", "


def table_columns(fm: FacetModel | None) -> str:
    cols = ["key", "summary", *(fm.taxonomy if fm else ())]
    if fm is not None and fm.boolean:
        cols.append("flags (the yes/no facets that are yes, '-' for none)")
    cols.append("tags (separated by spaces)" if _tag_sep(fm) == " " else "tags")
    return " | ".join(cols)


def judge_spec(*, query_id: str, seed_rows: Sequence[Mapping[str, Any]], candidates: Sequence[Mapping[str, Any]],
               keys: Mapping[str, str], meta_row: Mapping[str, Any], fm: FacetModel, settings: Mapping[str, Any],
               thumbnails: Mapping[str, ImageRef] | None = None, query_text: str | None = None) -> RequestSpec:
    """One judge request. With ``query_text`` (pool deepening) the query is given in DATA and the user
    prompt asks to copy it and judge the candidates against it (:data:`DEEPEN_USER_PROMPT`)."""
    graded = settings.get("labels") == "graded"
    rationale = bool(settings.get("rationale"))
    prompts = settings.get("prompts") or {}
    meta_cols = list(settings.get("metadata_columns") or []) or None
    sys_t = with_own_instructions(_default_system(fm, graded, rationale), prompts.get("system"))
    user_t = DEEPEN_USER_PROMPT if query_text is not None else (prompts.get("user") or default_user_prompt())
    by_key = sorted(((keys[c["image_id"]], c) for c in candidates), key=lambda kv: kv[0])
    # the user prompt (the same for every query) first, the query's data last, one table row per image
    given = [f"QUERY_TEXT: {_cell(query_text)}"] if query_text is not None else []
    data = "\n".join(["DATA", *given, "SEEDS:", *(row_line(f"s{n}", r, fm) for n, r in enumerate(seed_rows, 1)),
                      "CANDIDATES:", *(row_line(k, c, fm) for k, c in by_key)])
    parts: list[Any] = [Text(fill_metadata(user_t, meta_row, meta_cols)), Text(data)]
    if thumbnails:
        parts.append(Text("Thumbnails of the candidates follow, each after its key."))
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
        if not str(obj.get("query_text", "")).strip():
            return "query_text: empty"
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

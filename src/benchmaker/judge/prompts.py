"""Judge prompts and the strict JSON schema of a judge answer.

The judge sees the seed image(s) and the candidates as text descriptions (summary, facets, tags),
candidates under opaque keys ``c01, c02, …`` assigned in a stable pseudo-random order so that neither
a key nor a position reveals which candidate is the seed or which pool it came from. No file name,
path, id, license or source reaches the judge (optionally, thumbnails of the candidates do). The
schema enumerates exactly the planned keys, so an answer must label every candidate and nothing else.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence

from ..formats import FacetModel
from ..providers.spec import ImageRef, RequestSpec, Text, fill_metadata

__all__ = ["judge_schema", "default_system_prompt", "default_user_prompt", "candidate_keys", "describe",
           "judge_spec", "check_answer", "SCHEMA_NAME", "GRADED_SCALE"]

SCHEMA_NAME = "query_and_judgments"
GRADED_SCALE = ("0 = not relevant, 1 = marginally relevant (shares some aspect but would not satisfy the "
                "searcher), 2 = relevant, 3 = highly relevant (an ideal result)")


def candidate_keys(query_id: str, image_ids: Sequence[str]) -> dict[str, str]:
    """image_id -> opaque key (c01, c02, …), in a stable order that hides seeds and pools."""
    order = sorted(image_ids, key=lambda i: hashlib.sha256(f"{query_id}\x00{i}".encode()).hexdigest())
    width = max(2, len(str(len(order))))
    return {img: f"c{n:0{width}d}" for n, img in enumerate(order, 1)}


def judge_schema(keys: Sequence[str], *, graded: bool, rationale: bool) -> dict:
    label = {"type": "integer", "enum": [0, 1, 2, 3] if graded else [0, 1]}
    one: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": {"label": label},
                           "required": ["label"]}
    if rationale:
        one["properties"]["rationale"] = {"type": "string", "description": "at most 20 words"}
        one["required"] = ["label", "rationale"]
    return {
        "type": "object", "additionalProperties": False,
        "properties": {
            "query_text": {"type": "string"},
            "judgments": {"type": "object", "additionalProperties": False,
                          "properties": {k: one for k in keys}, "required": list(keys)},
        },
        "required": ["query_text", "judgments"],
    }


def default_system_prompt(*, graded: bool, rationale: bool) -> str:
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
    ])


def default_user_prompt() -> str:
    return "Write the query for these seed images, then judge every candidate."


def describe(row: Mapping[str, Any], fm: FacetModel) -> dict:
    d: dict[str, Any] = {"summary": row.get("summary")}
    for name in fm.taxonomy:
        d[name] = row.get(name)
    for name in fm.boolean:
        d[name] = row.get(name)
    d["tags"] = list(row.get("tags") or [])
    return d


def judge_spec(*, query_id: str, seed_rows: Sequence[Mapping[str, Any]], candidates: Sequence[Mapping[str, Any]],
               keys: Mapping[str, str], meta_row: Mapping[str, Any], fm: FacetModel, settings: Mapping[str, Any],
               thumbnails: Mapping[str, ImageRef] | None = None) -> RequestSpec:
    graded = settings.get("labels") == "graded"
    rationale = bool(settings.get("rationale"))
    prompts = settings.get("prompts") or {}
    meta_cols = list(settings.get("metadata_columns") or []) or None
    sys_t = prompts.get("system") or default_system_prompt(graded=graded, rationale=rationale)
    user_t = prompts.get("user") or default_user_prompt()
    by_key = sorted(((keys[c["image_id"]], c) for c in candidates), key=lambda kv: kv[0])
    data = {
        "seed_images": [describe(r, fm) for r in seed_rows],
        "candidates": {k: describe(c, fm) for k, c in by_key},
    }
    parts: list[Any] = [Text(fill_metadata(user_t, meta_row, meta_cols)),
                        Text("DATA (JSON):\n" + json.dumps(data, ensure_ascii=False, sort_keys=False))]
    if thumbnails:
        parts.append(Text("Thumbnails of the candidates follow, each after its key."))
        for k, c in by_key:
            ref = thumbnails.get(c["image_id"])
            if ref is not None:
                parts.extend([Text(f"{k}:"), ref])
    return RequestSpec(system=fill_metadata(sys_t, meta_row, meta_cols), parts=tuple(parts),
                       schema=judge_schema([k for k, _ in by_key], graded=graded, rationale=rationale),
                       schema_name=SCHEMA_NAME)


def check_answer(keys: Sequence[str]):
    want = set(keys)

    def check(obj: dict) -> str | None:
        if not str(obj.get("query_text", "")).strip():
            return "query_text: empty"
        got = set((obj.get("judgments") or {}).keys())
        if got != want:
            return (f"judgments: keys differ from the planned candidates (missing {sorted(want - got)[:5]}, "
                    f"unexpected {sorted(got - want)[:5]})")
        return None

    return check

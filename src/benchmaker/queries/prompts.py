"""Query-writing prompts and the strict JSON schema of a written query.

The writer sees one planned query's seed image(s) and nothing else of the collection: each seed's
pixels (at low detail: :data:`WRITER_IMAGE`) and its annotation (one table row, the columns defined
in the system prompt). It answers ``{query_text, narrative}``: a search query as a person would type
it, and one or two sentences saying what an image must show to be relevant (TREC's description and
narrative: judges given the need's narrative agree better with people than judges given a bare
query; docs/judge-rules.md, "Method"). No file name, path, id, license or source reaches it.

Layout for prompt caching: the schema (the same for every query), the system prompt (the task, the
facet definitions and vocabulary) and the user prompt lead every request; the seeds come last.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..describe import facet_definitions, row_line, table_columns
from ..formats import FacetModel
from ..providers.spec import ImageRef, RequestSpec, Text, fill_metadata, with_own_instructions

__all__ = ["SCHEMA", "SCHEMA_NAME", "WRITER_IMAGE", "default_system_prompt", "default_user_prompt", "query_spec",
           "check_answer"]

SCHEMA_NAME = "query"
SCHEMA: dict = {
    "type": "object", "additionalProperties": False,
    "properties": {"query_text": {"type": "string"},
                   "narrative": {"type": "string", "description": "one or two sentences"}},
    "required": ["query_text", "narrative"],
}
# how the seeds' pixels are sent, whatever the judge's image settings: low detail (OpenAI: one
# 512 x 512 view, 85 tokens; Gemini: MEDIA_RESOLUTION_LOW), downscaled to 512 px before sending
WRITER_IMAGE: dict[str, Any] = {"image_detail": "low", "image_max_side": 512}


def default_system_prompt(fm: FacetModel | None = None) -> str:
    """The task and the annotation vocabulary: identical for every query of a run (cacheable prefix)."""
    return "\n".join([
        "You write the queries of an image-retrieval benchmark.",
        "You receive the seed image(s) of one query: each image, and its text annotation (a summary, facet "
        "values and tags). You see nothing else of the collection.",
        "Write query_text: one realistic, concise search query, as a person would type it into an image search "
        "engine, that the seed image(s) satisfy. Describe what the seeds share; keep it general enough that "
        "other images can also be relevant, without naming incidental details.",
        "Write narrative: one or two sentences saying what an image must show, as its main content, to be "
        "relevant to query_text, and what would not be enough.",
        "Never use file names, sources, rights or identifiers. Output MUST be valid JSON matching the provided "
        "schema exactly.",
        *facet_definitions(fm),
        "",
        "DATA lists the seeds (s1, s2, …), one per line, with the columns: " + table_columns(fm) + ".",
    ])


def default_user_prompt() -> str:
    return "Write the query and its narrative for these seed images."


def query_spec(*, seed_rows: Sequence[Mapping[str, Any]], seed_images: Sequence[ImageRef | None],
               meta_row: Mapping[str, Any], fm: FacetModel, settings: Mapping[str, Any]) -> RequestSpec:
    """One query-writing request: the user prompt, each seed's image after its key, the seeds' rows."""
    prompts = settings.get("prompts") or {}
    meta_cols = list(settings.get("metadata_columns") or []) or None
    sys_t = with_own_instructions(_default_system(fm), prompts.get("system"))
    user_t = prompts.get("user") or default_user_prompt()
    parts: list[Any] = [Text(fill_metadata(user_t, meta_row, meta_cols))]
    for n, ref in enumerate(seed_images, 1):
        if ref is not None:
            parts.extend([Text(f"s{n}:"), ref])
    parts.append(Text("\n".join(["DATA", "SEEDS:", *(row_line(f"s{n}", r, fm) for n, r in enumerate(seed_rows, 1))])))
    return RequestSpec(system=fill_metadata(sys_t, meta_row, meta_cols), parts=tuple(parts), schema=SCHEMA,
                       schema_name=SCHEMA_NAME)


_MEMO: dict[int, tuple[FacetModel, str]] = {}


def _default_system(fm: FacetModel) -> str:
    e = _MEMO.get(id(fm))
    if e is None or e[0] is not fm:
        e = _MEMO[id(fm)] = (fm, default_system_prompt(fm))
    return e[1]


def check_answer(obj: dict) -> str | None:
    for k in ("query_text", "narrative"):
        if not str(obj.get(k, "")).strip():
            return f"{k}: empty"
    return None

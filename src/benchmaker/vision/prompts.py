"""Vision prompts and the strict JSON schema of a vision answer, built from the facet model.

The schema has ``summary``, one enum per taxonomy facet, one boolean per boolean facet, ``tags``
(an enum of the vocabulary when one is configured, with min/max items) and ``confidence`` (a number
in 0..1 per facet). Prompts come from config (``prompts.system`` / ``prompts.user``) with
``{metadata.<column>}`` placeholders filled from images.jsonl; when unset, the built-in defaults
below are used. The system prompt and the schema are identical for every image (the cacheable
prefix); the per-image part (metadata, the image) comes last.
"""

from __future__ import annotations

from typing import Any

from ..formats import FacetModel

__all__ = ["vision_schema", "default_system_prompt", "default_user_prompt", "check_answer",
           "SCHEMA_NAME"]

SCHEMA_NAME = "image_annotation"


def vision_schema(fm: FacetModel) -> dict:
    props: dict[str, Any] = {"summary": {"type": "string", "description": "one factual sentence, at most 30 words"}}
    for name, values in fm.taxonomy.items():
        props[name] = {"type": "string", "enum": list(values)}
    for name in fm.boolean:
        props[name] = {"type": "boolean"}
    items: dict[str, Any] = {"type": "string"}
    if fm.vocabulary:
        items["enum"] = list(fm.vocabulary)
    props["tags"] = {"type": "array", "items": items, "minItems": fm.min_tags, "maxItems": fm.max_tags}
    if fm.names:
        props["confidence"] = {
            "type": "object", "additionalProperties": False,
            "properties": {n: {"type": "number", "minimum": 0, "maximum": 1} for n in fm.names},
            "required": fm.names,
        }
    return {"type": "object", "additionalProperties": False, "properties": props, "required": list(props)}


def default_system_prompt(fm: FacetModel) -> str:
    lines = [
        "You are labeling images for an image-retrieval benchmark. Your labels decide which images are "
        "used as queries, positives and hard negatives, so they must be accurate and conservative.",
        "Output MUST be valid JSON matching the provided schema exactly, with no extra keys.",
        "Use the allowed facet values exactly as written. Describe only what is visible; do not guess from "
        "file names or context. If a facet cannot be determined from the image, choose 'unknown' when it is "
        "allowed, otherwise the closest value with a low confidence.",
        "",
        "Fields:",
        "- summary: one factual sentence of at most 30 words describing the main content.",
    ]
    for name, values in fm.taxonomy.items():
        lines.append(f"- {name}: one of {', '.join(values)}.")
    for name in fm.boolean:
        lines.append(f"- {name}: true or false ({name.replace('_', ' ')}).")
    vocab = "from the allowed list only" if fm.vocabulary else "short lowercase phrases"
    lines.append(f"- tags: {fm.min_tags} to {fm.max_tags} distinct tags, {vocab}, most salient first; "
                 "choose tags that help someone search for this image and that tell it apart from similar "
                 "images; avoid near-duplicates.")
    if fm.names:
        lines.append("- confidence: for every facet, your confidence in that value from 0 to 1.")
    return "\n".join(lines)


def default_user_prompt(metadata_columns: list[str] | None = None) -> str:
    text = "Annotate this image."
    if metadata_columns:
        ctx = "; ".join(f"{c}: {{metadata.{c}}}" for c in metadata_columns)
        text += f" Context from the collection (use as a guide, trust the image): {ctx}."
    return text


def check_answer(fm: FacetModel):
    """Checks beyond the schema: distinct tags, enough of them."""

    def check(obj: dict) -> str | None:
        tags = [t.strip() for t in obj.get("tags", []) if isinstance(t, str) and t.strip()]
        distinct = list(dict.fromkeys(tags))
        if len(distinct) < fm.min_tags:
            return f"tags: {len(distinct)} distinct tag(s), at least {fm.min_tags} required"
        if not str(obj.get("summary", "")).strip():
            return "summary: empty"
        return None

    return check

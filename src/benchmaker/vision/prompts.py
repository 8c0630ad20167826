"""Vision prompts and the strict JSON schema of a vision answer, built from the facet model.

The schema has ``summary``, one enum per taxonomy facet, one boolean per boolean facet, ``tags``
(an enum of the vocabulary when one is configured, with min/max items) and ``confidence``. On the
wire ``confidence`` is a list of integer percentages, one per facet in the facet model's order
(``[87, 60, …]``): the model writes no facet name twice and no ``0.`` before each number, about 25
output tokens fewer per image than an object ``{"<facet>": 0.87, …}``; :func:`confidence_of` maps it
back to the annotation's ``{facet: 0.87}`` on receipt. Prompts come from config
(``prompts.system`` / ``prompts.user``) with ``{metadata.<column>}`` placeholders filled from
images.jsonl; when unset, the built-in defaults below are used. The system prompt and the schema are
identical for every image (the cacheable prefix); the per-image part (metadata, the image) comes last.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..formats import FacetModel

__all__ = ["vision_schema", "default_system_prompt", "default_user_prompt", "check_answer",
           "confidence_of", "confidence_wire", "SCHEMA_NAME"]

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
            "type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 100},
            "minItems": len(fm.names), "maxItems": len(fm.names),
            "description": f"{len(fm.names)} whole numbers 0-100: your confidence in percent in each facet's "
                           "value, in this order: " + ", ".join(fm.names),
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
        lines.append("- confidence: your confidence in each facet's value, in percent (0 to 100), as a list in "
                     f"this order: {', '.join(fm.names)}.")
    return "\n".join(lines)


def default_user_prompt(metadata_columns: list[str] | None = None) -> str:
    text = "Annotate this image."
    if metadata_columns:
        ctx = "; ".join(f"{c}: {{metadata.{c}}}" for c in metadata_columns)
        text += f" Context from the collection (use as a guide, trust the image): {ctx}."
    return text


def confidence_of(answer: Mapping[str, Any], fm: FacetModel) -> dict[str, float]:
    """An answer's ``confidence`` as the annotation's ``{facet: 0..1}``: the wire's list of percentages
    in facet order (:func:`vision_schema`), or an object ``{facet: 0..1}`` (answers written before)."""
    c = answer.get("confidence")
    if isinstance(c, list):
        return {n: float(v) / 100 for n, v in zip(fm.names, c)} | {n: 0.0 for n in fm.names[len(c):]}
    c = c or {}
    return {n: float(c.get(n, 0.0)) for n in fm.names}


def confidence_wire(conf: Mapping[str, Any], fm: FacetModel) -> list:
    """``{facet: 0..1}`` as the wire's list of percentages (a missing or null value stays None)."""
    return [None if conf.get(n) is None else round(float(conf[n]) * 100) for n in fm.names]


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

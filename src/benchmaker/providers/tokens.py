"""Token guesses that need no provider: an answer's output tokens from its schema (plus the reasoning
allowance) and an annotation row of typical length. Used by ``benchmaker estimate``
(benchmaker/estimate/) and by the deepening budget (deepen/label.py), which estimate imports."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..io import dumps

__all__ = ["REASONING_OUTPUT", "answer_tokens", "out_tokens", "reasoning_allowance", "text_tokens",
           "answer_text"]

# Reasoning (thinking) tokens an answer costs beyond its visible JSON, by ``reasoning_effort``: the main
# uncertainty of every estimate before answers are cached (then benchmaker/estimate/core.py measures them).
# low / medium are rounded from the one published run with token counts, upstream imsearch_benchmaker's
# example (gpt-5-mini; its vision always sends "low", its judge "medium"; docs/openai.md "Estimate"):
# 717 output tokens per image, ~250 of them the answer; 1,481 per 13-candidate query, ~500 the answer.
# high: no measurement; a guess.
REASONING_OUTPUT = {None: 0, "minimal": 0, "low": 450, "medium": 1000, "high": 4000}
CHARS_PER_TOKEN = 4
CHARS_PER_WORD = 6          # an English word and its space


def _sample(schema: dict) -> Any:
    """An answer of the size a model typically writes, from the schema alone: each enum value of mean
    length, an array at the middle of ``minItems``..``maxItems``, a string whose description says "at
    most N words" at 80 % of N words, another string 10 words, a number two decimals, an integer 85 %
    of its maximum (a percentage: two digits)."""
    t = schema.get("type")
    if t == "object":
        return {k: _sample(v) for k, v in schema.get("properties", {}).items()}
    if t == "array":
        lo = int(schema.get("minItems", 1))
        n = (lo + int(schema.get("maxItems", lo))) // 2
        return [_sample(schema.get("items", {}))] * max(1, n)
    if "enum" in schema:
        vals = [str(v) for v in schema["enum"]]
        if all(isinstance(v, (int, float)) for v in schema["enum"]):
            return schema["enum"][-1]
        mean = round(sum(map(len, vals)) / len(vals))      # a typical value, not the longest
        return "x" * mean
    if t == "string":
        m = re.search(r"at most (\d+) words", str(schema.get("description", "")))
        words = int(m.group(1)) * 8 // 10 if m else 10
        return "x" * (words * CHARS_PER_WORD)
    if t == "boolean":
        return False
    if t == "integer":         # a percentage: two digits
        return int(int(schema.get("maximum", 1)) * 0.85)
    return 0.85


def answer_text(obj: Any) -> str:
    """An answer as a model writes it under structured outputs: compact JSON, no space after ``:`` or
    ``,`` (``{"name":"Science Fair","participants":["Alice","Bob"]}``); its size is what is billed."""
    return dumps(obj)


def text_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def answer_tokens(schema: dict, n_judgments: int = 0) -> int:
    """Output tokens of one answer's visible JSON (no reasoning): a schema-shaped sample of typical
    size, with ``n_judgments`` list entries for the judge."""
    sample = _sample(schema)
    if n_judgments and isinstance(sample, dict) and isinstance(sample.get("judgments"), list):
        one = dict(sample["judgments"][0])
        one["key"] = "c00"
        sample["judgments"] = [one] * n_judgments
    return text_tokens(answer_text(sample))


def reasoning_allowance(s: Mapping[str, Any]) -> int:
    return REASONING_OUTPUT.get(s.get("reasoning_effort"), 0)


def out_tokens(schema: dict, s: Mapping[str, Any], n_judgments: int = 0) -> int:
    """Output tokens of one answer: :func:`answer_tokens` plus the reasoning allowance."""
    return answer_tokens(schema, n_judgments) + reasoning_allowance(s)


def _typical_row(fm, i: int) -> dict:
    """An annotation row of typical length for the facet model (judge estimate before a plan exists)."""
    words = ["person", "walking", "along", "a", "road", "near", "trees", "with", "buildings", "and", "a", "vehicle",
             "in", "the", "background", "under", "a", "clear", "sky"]
    row = {"image_id": f"img{i}", "summary": " ".join(words[: 18 + i % 5]),
           "tags": [(fm.vocabulary[j % len(fm.vocabulary)] if fm.vocabulary else f"tag number {j}")
                    for j in range((fm.min_tags + fm.max_tags) // 2)]}
    for name, values in fm.taxonomy.items():
        row[name] = max(values, key=len)
    for name in fm.boolean:
        row[name] = bool(i % 2)
    return row

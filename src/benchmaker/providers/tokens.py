"""Token guesses that need no provider: an answer's output tokens from its schema (plus the reasoning
allowance) and an annotation row of typical length. Used by ``benchmaker estimate``
(benchmaker/estimate.py) and by the deepening budget (deepen/label.py), which estimate imports."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["REASONING_OUTPUT", "out_tokens"]

REASONING_OUTPUT = {None: 0, "minimal": 0, "low": 300, "medium": 1200, "high": 4000}


def _sample(schema: dict) -> Any:
    t = schema.get("type")
    if t == "object":
        return {k: _sample(v) for k, v in schema.get("properties", {}).items()}
    if t == "array":
        n = (schema.get("minItems", 1) + schema.get("maxItems", 1)) // 2
        return [_sample(schema.get("items", {}))] * max(1, n)
    if "enum" in schema:
        vals = [str(v) for v in schema["enum"]]
        if all(isinstance(v, (int, float)) for v in schema["enum"]):
            return schema["enum"][-1]
        mean = round(sum(map(len, vals)) / len(vals))      # a typical value, not the longest
        return "x" * mean
    if t == "string":
        return "x" * 120 if "summary" in str(schema.get("description", "")) else "x" * 60
    return 0.5


def out_tokens(schema: dict, s: Mapping[str, Any], n_judgments: int = 0) -> int:
    """Output tokens of one answer: a schema-shaped sample (``n_judgments`` list entries for the
    judge) plus the reasoning allowance."""
    sample = _sample(schema)
    if n_judgments and isinstance(sample, dict) and isinstance(sample.get("judgments"), list):
        one = dict(sample["judgments"][0])
        one["key"] = "c00"
        sample["judgments"] = [one] * n_judgments
        sample["query_text"] = "x" * 60
    return -(-len(json.dumps(sample)) // 4) + REASONING_OUTPUT.get(s.get("reasoning_effort"), 0)



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

"""Model families: which configured models share a lineage, so that the card can say when a system is
scored by a judge (or annotated by a vision model) of its own family (docs/trust.md, "Circularity").

A family is named by the first pattern of :data:`FAMILIES` that matches the model name (case-insensitive
regular expression, searched anywhere in the name, so ``hf-hub:timm/ViT-B-32-SigLIP`` and
``openai/gpt-5-mini`` match too). To add a family, add a row; order matters only where patterns overlap
(the more specific first). A name that matches nothing is its own family (compared by name).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["FAMILIES", "circularity", "family_of", "pipeline_models", "system_models"]

# (family, pattern): the more specific first
FAMILIES: tuple[tuple[str, str], ...] = (
    ("SigLIP (Google)", r"siglip"),
    ("EVA-CLIP", r"eva\d*[-_]?clip|\beva\d"),
    ("CLIP (OpenAI / open_clip)", r"\bclip\b|vit-[bglhe]|\brn\d+|convnext|laion|openclip|open_clip|tinyclip"),
    ("GPT (OpenAI)", r"\bgpt|\bo[134](-|$)|chatgpt|openai/"),
    ("Gemini / Gemma (Google)", r"gemini|gemma|palm"),
    ("Claude (Anthropic)", r"claude"),
    ("Qwen (Alibaba)", r"qwen"),
    ("Llama (Meta)", r"llama|llava"),
    ("Mistral / Pixtral", r"mistral|pixtral"),
    ("InternVL", r"internvl"),
    ("Phi (Microsoft)", r"\bphi-?\d"),
)


def family_of(model: str | None) -> str | None:
    """The family of a model name (:data:`FAMILIES`), the name itself when none matches, None for none."""
    if not model:
        return None
    name = str(model).strip()
    low = name.lower().removeprefix("local-dir:").removeprefix("hf-hub:")
    for family, pattern in FAMILIES:
        if re.search(pattern, low):
            return family
    return name


def _llm_model(section: Mapping[str, Any], adapter: str) -> str | None:
    from .settings_schema import default

    sub = section.get(adapter) or {}
    if sub.get("model") is None:
        return None
    model = str(sub["model"])
    if adapter == "gemini" and model == default("$defs.llm_common.model"):
        return str(default("$defs.llm_common.model", under="gemini"))  # the schema's default means Gemini's
    return model


def pipeline_models(config: Mapping[str, Any]) -> dict[str, str | None]:
    """The model names of the judge and the vision annotator of a (validated) config: ``{"judge": ...,
    "vision": ...}`` (None for the rules judge and the metadata annotator, which use no model)."""
    judge = config.get("judge") or {}
    vision = config.get("vision") or {}
    ja, va = judge.get("adapter"), vision.get("adapter")
    out: dict[str, str | None] = {"judge": None, "vision": None}
    if ja in ("openai", "gemini"):
        out["judge"] = _llm_model(judge, ja)
    if va in ("openai", "gemini"):
        out["vision"] = _llm_model(vision, va)
    elif va == "clip":
        out["vision"] = (vision.get("clip") or {}).get("model")
    return out


def system_models(system: Mapping[str, Any], by_name: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The model names an evaluate system runs (its own, and those of the systems it fuses or reranks)."""
    kind = system.get("kind")
    settings = system.get("settings") or system
    out: list[str] = []
    if kind in ("clip", "milvus") and settings.get("model"):
        out.append(str(settings["model"]))
    if kind == "rerank":
        llm = settings.get("llm") or {}  # a run's metadata keeps the model as llm_model
        out.append(str(settings.get("llm_model") or llm.get("model") or _default_llm(settings.get("provider"))))
        base = by_name.get(str(settings.get("base")))
        out += system_models(base, by_name) if base else []
    if kind == "hybrid":
        for sub in settings.get("systems") or []:
            if sub in by_name:
                out += system_models(by_name[sub], by_name)
    return list(dict.fromkeys(out))


def _default_llm(provider: str | None) -> str:
    from .settings_schema import default

    return str(default("$defs.llm_common.model", under="gemini" if provider == "gemini" else None))


def circularity(models: Mapping[str, str | None], systems: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Which evaluated systems share a family with the judge or the vision annotator (``models``:
    :func:`pipeline_models`; ``systems``: name, kind and settings of each evaluated system)."""
    by_name = {str(s["name"]): s for s in systems}
    fam = {role: family_of(m) for role, m in models.items()}
    rows = []
    for s in systems:
        names = system_models(s, by_name)
        fams = sorted({f for f in (family_of(m) for m in names) if f})
        shared = [role for role in ("judge", "vision") if fam.get(role) and fam[role] in fams]
        rows.append({"system": str(s["name"]), "kind": s.get("kind"), "models": names, "families": fams,
                     "shares_family_with": shared,
                     "model_known": bool(names) or s.get("kind") in ("bm25",)})
    return {"judge_model": models.get("judge"), "judge_family": fam.get("judge"),
            "vision_model": models.get("vision"), "vision_family": fam.get("vision"), "systems": rows,
            "circular": [r["system"] for r in rows if r["shares_family_with"]],
            "unknown": [r["system"] for r in rows if not r["model_known"]]}

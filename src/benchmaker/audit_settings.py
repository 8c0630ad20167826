"""Cross-key checks of the ``audit`` config section (called by ``benchmaker.config``'s cross checks)."""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["audit_problems"]

BUILTIN_STRATA = ("pool", "judge_label", "difficulty", "rank")


def audit_problems(cfg: Mapping[str, Any]) -> list[str]:
    """Messages naming the key, for strata and facets that are not facets of the config and metrics that are
    not the evaluate stage's ranx metrics."""
    audit = cfg.get("audit") or {}
    facets = cfg.get("facets") or {}
    names = list(facets.get("taxonomy") or {}) + list(facets.get("boolean") or [])
    out = []
    for s in audit.get("strata") or []:
        if s not in BUILTIN_STRATA and s not in names:
            out.append(f"audit.strata: '{s}' is neither {', '.join(BUILTIN_STRATA)} nor a facet "
                       f"(facets: {', '.join(names)})")
    tops = [b.get("max_rank") for b in audit.get("rank_bands") or [] if isinstance(b, Mapping)]
    if any(not isinstance(t, int) for t in tops) or tops != sorted(set(tops)):
        out.append(f"audit.rank_bands: max_rank must increase from band to band (got {tops})")
    for f in audit.get("facets") or []:
        if f not in names:
            out.append(f"audit.facets: '{f}' is not a facet (facets: {', '.join(names)})")
    from .evaluate_settings import metric_problem  # the evaluate stage's ranx metrics, declared once

    for m in audit.get("metrics") or []:
        if (why := metric_problem(m)) is not None:
            out.append(f"audit.metrics: {why}")
    return out

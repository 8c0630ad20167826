"""Is this run a smoke test? A run whose CLIP has random weights (``pretrained: null``), or is the
random tiny model of ``python -m benchmaker.tinyclip`` (``make example-offline``), or whose config sets
``benchmark.smoke_test: true``, produces labels and scores that mean nothing. ``validate_config``
records the verdict in ``benchmark.smoke_test`` / ``benchmark.smoke_reason``; the report, the dataset
card and the dataset metadata then say so in their first lines (docs/summary.md, docs/export.md).

The verdict reads the ``local-dir:`` model folders of the machine that validates the config. A job
without that disk (a pod under ``--profile nrp``) re-validates the same config and would find no
folder, so it records a different verdict than the controller (the published card would lose its
smoke-test banner): the controller hands its verdict to the jobs as a config file of its own
(:func:`verdict`, rules/cluster.smk), and a job keeps the reasons it is given (``validate_config``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

__all__ = ["smoke_reasons", "is_tiny_clip_dir", "verdict", "TINYCLIP_MARKER", "BANNER"]

# the architecture of benchmaker.tinyclip's random checkpoints (here so that recognising one imports no torch)
TINY_CLIP_CFG = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 224, "layers": 2, "width": 64, "head_width": 32, "patch_size": 32},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}
TINYCLIP_MARKER = "benchmaker_tinyclip"     # a key tinyclip writes into open_clip_config.json
BANNER = ("SMOKE TEST: this run used {reason}. Its annotations, relevance labels and scores are "
          "meaningless; it checks the machinery only and must not be published or compared as a benchmark.")


def is_tiny_clip_dir(folder: str | Path) -> bool:
    try:
        cfg = json.loads((Path(folder).expanduser() / "open_clip_config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(cfg.get(TINYCLIP_MARKER)) or cfg.get("model_cfg") == TINY_CLIP_CFG


def _model_reason(where: str, model: str, pretrained: str | None) -> str | None:
    if model.startswith("local-dir:"):
        folder = model[len("local-dir:"):]
        if is_tiny_clip_dir(folder):
            return f"a random tiny CLIP built by benchmaker.tinyclip ({where}.model: {model})"
        return None
    if model.startswith("hf-hub:"):
        return None
    if not pretrained:
        return f"a CLIP with random weights ({where}.pretrained: null)"
    return None


def smoke_reasons(cfg: Mapping[str, Any]) -> list[str]:
    """Why the run described by a (validated) config is a smoke test; empty when it is not."""
    reasons: list[str] = []
    bench = cfg.get("benchmark", {})
    if bench.get("smoke_test") and not bench.get("smoke_reason"):
        reasons.append("a configuration marked benchmark.smoke_test: true")
    sim = cfg.get("similarity", {})
    r = _model_reason("similarity", sim.get("model") or "", sim.get("pretrained"))
    if r:
        reasons.append(r)
    vision = cfg.get("vision", {})
    if vision.get("adapter") == "clip":
        clip = vision.get("clip", {})
        r = _model_reason("vision.clip", clip.get("model") or "", clip.get("pretrained"))
        if r:
            reasons.append(r)
    return reasons


def verdict(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The smoke-test verdict of a validated config, as a config overlay that a job without the
    controller's disk merges over its config files: ``{"benchmark": {"smoke_test", "smoke_reason"}}``."""
    bench = cfg.get("benchmark", {})
    return {"benchmark": {"smoke_test": bool(bench.get("smoke_test")), "smoke_reason": bench.get("smoke_reason")}}

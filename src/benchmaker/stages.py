"""Every stage of the workflow, declared once: the rules that run it and the library function each
rule's job calls (``"module:function"``).

From this one table come

* the stage versions' entry points (:data:`benchmaker.versions.STAGE_ENTRIES`: the modules of a
  stage's functions; the version is their import closure);
* the function that the generic rule script ``scripts/stage.py`` runs for a rule
  (:func:`rule_target`); a rule whose job only hands its inputs, outputs and params to its stage
  function needs no script of its own (``script: "../scripts/stage.py"``);
* the checks of tests/test_versions.py: every rule with a script is declared here, under the stage
  that its ``version=stage_version(...)`` param names, and a rule with its own script calls the
  function declared for it.

Adding a stage (docs/architecture.md, "Adding a stage"): its function, its rule, one entry here and
its settings in config/schema.yaml. This module imports nothing.
"""

from __future__ import annotations

__all__ = ["STAGES", "rule_target", "stage_of"]

# stage -> {rule: "module:function"}; a stage's first rule is the one named like it where there is one
STAGES: dict[str, dict[str, str]] = {
    "preprocess": {"preprocess": "benchmaker.preprocess:run_shard", "merge_images": "benchmaker.preprocess:merge"},
    "vision": {"vision": "benchmaker.vision:run", "vision_build": "benchmaker.vision.openai:build",
               "vision_submit": "benchmaker.vision.openai:submit",
               "vision_collect": "benchmaker.vision.openai:collect"},
    "merge": {"merge_annotations": "benchmaker.merge:merge_annotations"},
    "plan": {"plan": "benchmaker.plan:run"},
    "judge": {"judge": "benchmaker.judge:run", "judge_build": "benchmaker.judge.openai:build",
              "judge_submit": "benchmaker.judge.openai:submit", "judge_collect": "benchmaker.judge.openai:collect"},
    "embed": {"embed_images": "benchmaker.similarity.embed:run_images",
              "embed_queries": "benchmaker.similarity.embed:run_queries"},
    "score": {"score": "benchmaker.similarity.score:run"},
    "summary": {"summary": "benchmaker.summary:run"},
    "export": {"export": "benchmaker.export:run"},
    "upload": {"upload": "benchmaker.export.upload:run"},  # no version param: an upload is never redone
    "audit_sample": {"audit_sample": "benchmaker.audit.sample:run"},
    "audit_labelling": {"audit_labelling": "benchmaker.audit.labelling:run"},
    "audit_report": {"audit_report": "benchmaker.audit.statistics:run"},
    "audit_judge2": {"audit_judge2": "benchmaker.audit.judge2:run"},
    "staging": {"stage_file": "benchmaker.staging:copy_input", "stage_folder": "benchmaker.staging:copy_input"},
    "evaluate_system": {"evaluate_model": "benchmaker.evaluate.systems:run",
                        "evaluate_system": "benchmaker.evaluate.systems:run",
                        "evaluate_api": "benchmaker.evaluate.systems:run"},  # use rule evaluate_system as ...
    "evaluate": {"evaluate": "benchmaker.evaluate.stage:run"},
    "deepen_system": {"deepen_system": "benchmaker.deepen.label:run"},
    "deepen": {"deepen": "benchmaker.deepen.merge:run"},
}


def rule_target(rule: str) -> str:
    """The ``"module:function"`` that the job of ``rule`` runs."""
    for rules in STAGES.values():
        if rule in rules:
            return rules[rule]
    raise KeyError(f"rule {rule!r} is declared under no stage in benchmaker/stages.py (STAGES)")


def stage_of(rule: str) -> str:
    """The stage that ``rule`` belongs to."""
    for stage, rules in STAGES.items():
        if rule in rules:
            return stage
    raise KeyError(f"rule {rule!r} is declared under no stage in benchmaker/stages.py (STAGES)")

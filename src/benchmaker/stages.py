"""Every stage of the workflow, declared once: the rules that run it, the library function each
rule's job calls (``"module:function"``) and the losses and cost files of it that the totals count.

From this one table come

* the stage versions' entry points (:data:`benchmaker.versions.STAGE_ENTRIES`: the modules of a
  stage's functions; the version is their import closure);
* the function that the generic rule script ``scripts/stage.py`` runs for a rule
  (:func:`rule_target`); a rule whose job only hands its inputs, outputs and params to its stage
  function needs no script of its own (``script: "../scripts/stage.py"``);
* the losses and cost files that the summary and the export read (``loss_files()`` and
  ``cost_files()`` in rules/common.smk, through :func:`counted_files`): the report's and the card's
  losses by stage and API costs (each file under the name :func:`counted_stages` gives it:
  ``loss_stages()`` and ``cost_stages()`` in rules/common.smk; :func:`outside_stages`: the losses
  that are not the benchmark's own);
* the checks of tests/test_versions.py: every rule with a script is declared here, under the stage
  that its ``version=stage_version(...)`` param names, and a rule with its own script calls the
  function declared for it.

Adding a stage (docs/architecture.md, "Adding a stage"): its function, its rule, one entry here and
its settings in config/schema.yaml. This module imports nothing of the project.
"""

from __future__ import annotations

import itertools
import string
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

__all__ = ["STAGES", "Stage", "counted_files", "counted_stages", "outside_stages", "rule_target", "stage_of"]


@dataclass(frozen=True)
class Stage:
    """One stage: ``rules`` (rule -> ``"module:function"``; the first is the one named like the stage
    where there is one); ``losses`` and ``costs``: the file, under the results folder, of its permanent
    losses (docs/formats.md ``losses``) and of its paid requests (``costs``) that the summary's and the
    card's totals count, or None. A ``{wildcard}`` in them is a set of items that ``counted_items()``
    in rules/common.smk names: every shard, or the evaluate systems, the second judge or the deepened
    systems when the run has them (none when it does not). ``counted_as``: the name the totals count
    its losses and its costs under, where its rows' own ``stage`` would mislead or merge what differs
    (a ``{wildcard}`` in it is the item's name): a system under evaluation (``evaluate: <system>``: two
    rerankers on one model are two rows of the cost table), a deepened system (``deepen: <system>``)
    and the audit's second judge (it runs the judge stage, whose loss rows say ``judge``); None: the
    loss rows' own stage, and for costs the stage's name (its cost rows say it). ``outside_benchmark``:
    its losses are not the benchmark's own (what a system under evaluation or the second judge could
    not rank or label; the report and the card say so)."""

    rules: dict[str, str]
    losses: str | None = None
    costs: str | None = None
    counted_as: str | None = None
    outside_benchmark: bool = False


# in the order the totals read them (the losses file and the card list them in this order)
STAGES: dict[str, Stage] = {
    "preprocess": Stage({"preprocess": "benchmaker.preprocess:run_shard",
                         "merge_images": "benchmaker.preprocess:merge"}),
    "vision": Stage({"vision": "benchmaker.vision:run", "vision_build": "benchmaker.vision.openai:build",
                     "vision_submit": "benchmaker.vision.openai:submit",
                     "vision_collect": "benchmaker.vision.openai:collect"},
                    costs="costs/vision/{shard}.jsonl"),   # the merge stage merges its shards' losses
    "merge": Stage({"merge_annotations": "benchmaker.merge:merge_annotations"}, losses="losses/vision.jsonl"),
    "plan": Stage({"plan": "benchmaker.plan:run"}, losses="losses/plan.jsonl"),
    "queries": Stage({"queries": "benchmaker.queries:run", "queries_build": "benchmaker.queries.openai:build",
                      "queries_submit": "benchmaker.queries.openai:submit",
                      "queries_collect": "benchmaker.queries.openai:collect"},
                     losses="losses/queries.jsonl", costs="costs/queries.jsonl"),
    "judge": Stage({"judge": "benchmaker.judge:run", "judge_build": "benchmaker.judge.openai:build",
                    "judge_submit": "benchmaker.judge.openai:submit",
                    "judge_collect": "benchmaker.judge.openai:collect"},
                   losses="losses/judge.jsonl", costs="costs/judge.jsonl"),
    "embed": Stage({"embed_images": "benchmaker.similarity.embed:run_images",
                    "embed_queries": "benchmaker.similarity.embed:run_queries"}),  # score merges its losses
    "score": Stage({"score": "benchmaker.similarity.score:run"}, losses="losses/similarity.jsonl"),
    "summary": Stage({"summary": "benchmaker.summary.stage:run"}),
    "export": Stage({"export": "benchmaker.export:run"}),
    "upload": Stage({"upload": "benchmaker.export.upload:run"}),  # no version param: an upload is never redone
    "staging": Stage({"stage_file": "benchmaker.staging:copy_input", "stage_folder": "benchmaker.staging:copy_input"}),
    "evaluate_system": Stage({"evaluate_model": "benchmaker.evaluate.systems:run",
                              "evaluate_system": "benchmaker.evaluate.systems:run",
                              "evaluate_api": "benchmaker.evaluate.systems:run"},  # use rule evaluate_system as
                             losses="losses/evaluate/{evaluate_system}.jsonl",
                             costs="costs/evaluate/{evaluate_system}.jsonl", counted_as="evaluate: {evaluate_system}",
                             outside_benchmark=True),
    "evaluate": Stage({"evaluate": "benchmaker.evaluate.stage:run"}),
    "audit_sample": Stage({"audit_sample": "benchmaker.audit.sample:run"}),
    "audit_labelling": Stage({"audit_labelling": "benchmaker.audit.labelling:run"}),
    "audit_report": Stage({"audit_report": "benchmaker.audit.statistics:run"}),
    "audit_judge2": Stage({"audit_judge2": "benchmaker.audit.judge2:run"}, losses="audit/judge2/{judge2}/losses.jsonl",
                          costs="audit/judge2/{judge2}/costs.jsonl", counted_as="audit_judge2",
                          outside_benchmark=True),
    "deepen_system": Stage({"deepen_system": "benchmaker.deepen.label:run"},
                           losses="losses/deepen/{deepen_system}.jsonl", costs="costs/deepen/{deepen_system}.jsonl",
                           counted_as="deepen: {deepen_system}"),
    "deepen": Stage({"deepen": "benchmaker.deepen.merge:run"}),
}


def _counted(kind: str, items: Mapping[str, Sequence[str]]) -> Iterator[tuple[str, Stage, dict[str, str]]]:
    """Each counted ``kind`` file of each stage, in :data:`STAGES` order: (its name, the stage, its
    wildcards' values)."""
    for name, stage in STAGES.items():
        pattern = getattr(stage, kind)
        if pattern is None:
            continue
        wildcards = list(dict.fromkeys(f for _, f, _, _ in string.Formatter().parse(pattern) if f))
        unknown = [w for w in wildcards if w not in items]
        if unknown:
            raise KeyError(f"stage {name!r}: its {kind} file {pattern!r} has {{{unknown[0]}}}, a set of items that "
                           f"counted_items() in rules/common.smk does not name (it names {', '.join(sorted(items))})")
        for values in itertools.product(*(items[w] for w in wildcards)):
            yield name, stage, dict(zip(wildcards, values))


def counted_files(kind: str, results: str, items: Mapping[str, Sequence[str]]) -> list[str]:
    """The ``kind`` (``"losses"`` or ``"costs"``) files of every stage that the totals count, in
    :data:`STAGES` order, under ``results``: a stage's ``{wildcard}`` runs over ``items[wildcard]``
    (an empty set: no file)."""
    return [f"{results}/" + getattr(stage, kind).format(**values) for _, stage, values in _counted(kind, items)]


def _named(name: str, stage: Stage, values: Mapping[str, str]) -> str:
    """The name a counted file of ``stage`` (called ``name`` in :data:`STAGES`) is counted under."""
    return stage.counted_as.format(**values) if stage.counted_as is not None else name


def counted_stages(kind: str, items: Mapping[str, Sequence[str]]) -> list[str | None]:
    """The stage name the totals count each of ``counted_files(kind, ...)`` under, in the same order:
    its stage's ``counted_as`` with the item's name; else, for ``"losses"``, None (the rows' own
    ``stage``), for ``"costs"`` the stage's name (a cost file's name is known even when it is empty,
    so the totals can name every stage they cover, the ones that paid nothing too)."""
    return [None if kind == "losses" and stage.counted_as is None else _named(name, stage, values)
            for name, stage, values in _counted(kind, items)]


def outside_stages(items: Mapping[str, Sequence[str]]) -> list[str]:
    """The names (:func:`counted_stages`) of the counted losses that are not the benchmark's own
    (``outside_benchmark``), in :data:`STAGES` order."""
    return list(dict.fromkeys(_named(name, stage, values) for name, stage, values in _counted("losses", items)
                              if stage.outside_benchmark))


def rule_target(rule: str) -> str:
    """The ``"module:function"`` that the job of ``rule`` runs."""
    for stage in STAGES.values():
        if rule in stage.rules:
            return stage.rules[rule]
    raise KeyError(f"rule {rule!r} is declared under no stage in benchmaker/stages.py (STAGES)")


def stage_of(rule: str) -> str:
    """The stage that ``rule`` belongs to."""
    for name, stage in STAGES.items():
        if rule in stage.rules:
            return name
    raise KeyError(f"rule {rule!r} is declared under no stage in benchmaker/stages.py (STAGES)")

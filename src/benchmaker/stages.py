"""Every stage of the workflow, declared once: the rules that run it, the library function each
rule's job calls (``"module:function"``), the losses and cost files of it that the totals count, the
memory its jobs ask for and which of its rules run a model on a GPU.

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
* the memory requests (:data:`benchmaker.resources.MEMORY`: every stage's ``memory`` models, which
  ``resources.mem_mb(name)`` evaluates on a job's input sizes);
* the GPU requests (:func:`needs_gpu`, which the rules hand to ``gpu_resources`` in rules/cluster.smk);
* the time requests of the model rules (:data:`benchmaker.resources.PACE`: every stage's ``pace``, the
  images per second of one job per kind of device it runs on, which ``resources.runtime(name)``
  turns into a job's ``runtime``);
* the paid stages ``benchmaker estimate`` does not price, with why (``estimate.NOT_ESTIMATED``: each
  stage's ``not_estimated``);
* the rules a stage's settings decide (tests/test_triggers.py: a key of the schema section named like
  the stage decides its rules);
* the checks of tests/test_versions.py: every rule with a script is declared here, under the stage
  that its ``version=stage_version(...)`` param names, and a rule with its own script calls the
  function declared for it.

Adding a stage (docs/architecture.md, "Adding a stage"): its function, its rule, one entry here and
its settings in config/schema.yaml. This module imports nothing of the project.
"""

from __future__ import annotations

import itertools
import string
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

__all__ = ["PY_MB", "STAGES", "Memory", "Pace", "Stage", "counted_files", "counted_stages", "needs_gpu",
           "outside_stages", "rule_target", "stage_of", "ESTIMATE_FILE", "PILOT_COSTS_FILE"]

PY_MB = 250  # a job's interpreter with polars and benchmaker, MB resident


@dataclass(frozen=True)
class Memory:
    """The memory (MB) one job asks for, from the sizes of the inputs it will read (evaluated by
    :func:`benchmaker.resources.mem_mb`): ``base``; plus, for each input named in ``per_mb``, its
    factor times the size in MB of all its files (how many bytes of memory a byte of it becomes);
    plus, for each input in ``per_largest_mb``, its factor times its largest file (inputs read one
    file at a time); plus, with ``model``, what running a CLIP model holds: torch, the weights twice
    while loading and the loader's in-flight batches (``"images"``: with the rule's DataLoader
    workers; ``"texts"``: none; ``"decode"``: the images' decoding loader with its workers, batches of
    64, and no weights). Never less than ``resources.MIN_MB``; 1.5x per retry."""

    base: int = PY_MB
    per_mb: Mapping[str, float] = field(default_factory=dict)
    per_largest_mb: Mapping[str, float] = field(default_factory=dict)
    model: str | None = None


@dataclass(frozen=True)
class Pace:
    """How fast one job of a model rule gets through its images (evaluated by
    :func:`benchmaker.resources.runtime`): ``per_s``, images per second by the kind of device the job
    runs on (``"cpu"``; ``"gpu"`` for a job a cluster gives a GPU, ``needs_gpu``), for ViT-B-32, the
    shipped model; ``start_s``, its seconds before the first image (interpreter, imports, the model's
    load, CUDA's start). Each figure is a measured rate divided by a stated margin (see :data:`STAGES`
    and docs/clusters.md, "Time requests per device kind"); the request then doubles it (``resources.runtime``)."""

    per_s: Mapping[str, float]
    start_s: float = 60.0


# The paces of the model rules, from measurements (docs/clusters.md, "Time requests per device kind"):
# a CPU job of ViT-B-32 on its 2 threads encodes 25 images/s (section "Pass size per device kind":
# 15.4 rows per CPU-second per thread); a JPEG of 1024x768 decodes at ~140/s per core (section "GPU").
CPU_IMAGES_PER_S = 20.0
# A GPU job that reads pixel stores only runs the model: ViT-B-32 model-only at the CUDA pass size 256
# is 19,825 images/s on an H200 (issue #33) and 18,258-18,917 on an H100 (section "GPU"); ViT-L-14 is
# 1,700 on the H100. 500/s leaves 3.4x below ViT-L-14's model-only rate on an H100 for slower GPUs and
# for the pixel store's reading (150 KB per image: a pod downloads its stores at >= 75 MB/s).
GPU_STORE_IMAGES_PER_S = 500.0
# A GPU job that decodes its image files itself (evaluate clip systems on their own model) is bound by
# that decoding: 1,661 images/s with 16 decoding workers on the H200 (issue #33), ~140/s per worker.
GPU_DECODING_IMAGES_PER_S = 100.0


# written by `benchmaker estimate` outside the workflow (docs/formats.md ``estimate``), under the results
# folder, and read when present: the pilot's cost rows (``--pilot``: counted in the totals under their
# own stage, rules/common.smk ``cost_files()``) and the recorded estimate (the summary shows it beside
# the bill, ``estimate_inputs()``)
ESTIMATE_FILE = "estimate/estimate.json"
PILOT_COSTS_FILE = "estimate/pilot_costs.jsonl"


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
    not rank or label; the report and the card say so). ``memory``: the memory models its rules ask
    for by name (``resources.mem_mb(name)``; mostly a rule's own name, or a variant such as
    ``vision_clip``; a rule of another stage that runs the same code may name it too). ``gpu``: its
    rules that run a model, so that a cluster gives their jobs a GPU: True, or the ``<stage>.adapter``
    values with which it does (:func:`needs_gpu`). ``not_estimated``: for a stage with ``costs``, why
    ``benchmaker estimate`` does not price it (``estimate.NOT_ESTIMATED`` is these); a stage the estimate
    prices has its function in ``estimate.PAID`` instead (tests/test_estimate_bill.py: every stage with
    ``costs`` is in one of the two). ``pace``: the time models (:class:`Pace`) of its rules that
    run a model or decode images, by name as ``memory`` (``resources.runtime(name)``; the other rules
    ask for time by the size of their inputs)."""

    rules: dict[str, str]
    losses: str | None = None
    costs: str | None = None
    counted_as: str | None = None
    outside_benchmark: bool = False
    memory: Mapping[str, Memory] = field(default_factory=dict)
    gpu: Mapping[str, bool | frozenset[str]] = field(default_factory=dict)
    not_estimated: str | None = None
    pace: Mapping[str, Pace] = field(default_factory=dict)


# in the order the totals read them (the losses file and the card list them in this order)
STAGES: dict[str, Stage] = {
    "preprocess": Stage({"preprocess": "benchmaker.preprocess:run_shard",
                         "merge_images": "benchmaker.preprocess:merge"},
                        memory={"preprocess": Memory()}),
    "vision": Stage({"vision": "benchmaker.vision:run", "vision_build": "benchmaker.vision.openai:build",
                     "vision_submit": "benchmaker.vision.openai:submit",
                     "vision_collect": "benchmaker.vision.openai:collect"},
                    costs="costs/vision/{shard}.jsonl",   # the merge stage merges its shards' losses
                    # the clip adapter runs the similarity model on the shard (embed_images' memory);
                    # the API adapters' build and collect hold the shard's images table
                    memory={"vision_clip": Memory(0, {"images": 8.0}, model="images"),
                            "vision_api": Memory(PY_MB, {"images": 12.0})},
                    gpu={"vision": frozenset({"clip"})},
                    # the clip adapter reads the shard's pixel store, as embed_images
                    pace={"vision_clip": Pace({"cpu": CPU_IMAGES_PER_S, "gpu": GPU_STORE_IMAGES_PER_S})}),
    # one part at a time (the largest counts), then a line per part (benchmaker.merge)
    "merge": Stage({"merge_annotations": "benchmaker.merge:merge_annotations"}, losses="losses/vision.jsonl",
                   memory={"merge_annotations": Memory(PY_MB, per_largest_mb={"parts": 8.0})}),
    "plan": Stage({"plan": "benchmaker.plan:run"}, losses="losses/plan.jsonl",
                  memory={"plan": Memory(PY_MB, {"annotations": 8.0, "images": 8.0})}),
    # the same reads as the judge (the writer ranks tags over the planned images' rows), one small
    # request per query
    "queries": Stage({"queries": "benchmaker.queries:run", "queries_build": "benchmaker.queries.openai:build",
                      "queries_submit": "benchmaker.queries.openai:submit",
                      "queries_collect": "benchmaker.queries.openai:collect"},
                     losses="losses/queries.jsonl", costs="costs/queries.jsonl",
                     memory={"queries": Memory(PY_MB + 400, {"plan": 15.0})}),
    "judge": Stage({"judge": "benchmaker.judge:run", "judge_build": "benchmaker.judge.openai:build",
                    "judge_submit": "benchmaker.judge.openai:submit",
                    "judge_collect": "benchmaker.judge.openai:collect"},
                   losses="losses/judge.jsonl", costs="costs/judge.jsonl",
                   # the plan + the planned images' rows of annotations/images, read in 64 MB blocks
                   memory={"judge": Memory(PY_MB + 400, {"plan": 15.0})}),
    "embed": Stage({"embed_images": "benchmaker.similarity.embed:run_images",
                    "decode_images": "benchmaker.similarity.decode:run_shard",
                    "embed_queries": "benchmaker.similarity.embed:run_queries"},  # score merges its losses
                   # decode_images: the image decoding loader (batches of 64 in flight), no model
                   memory={"decode_images": Memory(0, {"images": 8.0}, model="decode"),
                           "embed_images": Memory(0, {"images": 8.0}, model="images"),
                           "embed_queries": Memory(0, {"queries": 8.0}, model="texts")},
                   gpu={"embed_images": True},
                   # decode_images runs on CPUs only (no GPU is asked for: needs_gpu)
                   pace={"decode_images": Pace({"cpu": CPU_IMAGES_PER_S}),
                         "embed_images": Pace({"cpu": CPU_IMAGES_PER_S, "gpu": GPU_STORE_IMAGES_PER_S})}),
    # the pairs and the query embeddings, and one shard's image embeddings at a time during the gather
    "score": Stage({"score": "benchmaker.similarity.score:run"}, losses="losses/similarity.jsonl",
                   memory={"score": Memory(PY_MB, {"qrels": 6.0, "query_embeddings": 6.0},
                                           {"image_embeddings": 3.0})}),
    # the pairs + the scored images' rows; corpus counts aggregated over 64 MB blocks
    "summary": Stage({"summary": "benchmaker.summary.stage:run"},
                     memory={"summary": Memory(PY_MB + 700, {"scored": 6.0, "plan": 6.0})}),
    # the pairs (+ their images' rows, read in blocks) + one row group of image bytes per file
    "export": Stage({"export": "benchmaker.export:run"},
                    memory={"export": Memory(PY_MB + 600, {"scored": 6.0, "plan": 6.0})}),
    # no version param: an upload is never redone. `submit`: the upload and every batch submit stream
    # files and hold no tables
    "upload": Stage({"upload": "benchmaker.export.upload:run"}, memory={"submit": Memory(PY_MB + 250)}),
    "staging": Stage({"stage_file": "benchmaker.staging:copy_input", "stage_folder": "benchmaker.staging:copy_input"}),
    "evaluate_system": Stage({"evaluate_model": "benchmaker.evaluate.systems:run",
                              "evaluate_system": "benchmaker.evaluate.systems:run",
                              "evaluate_api": "benchmaker.evaluate.systems:run"},  # use rule evaluate_system as
                             losses="losses/evaluate/{evaluate_system}.jsonl",
                             costs="costs/evaluate/{evaluate_system}.jsonl", counted_as="evaluate: {evaluate_system}",
                             outside_benchmark=True,
                             not_estimated="a system under evaluation is not part of the benchmark's bill "
                                           "(its cost file is counted, docs/evaluate.md)",
                             # ranx + numba (~300 MB) and one system's runs; a clip system ranking the
                             # similarity stage's embeddings holds every image's vector (frame, matrix, copy)
                             memory={"evaluate_system": Memory(PY_MB + 300, {
                                 "qrels": 8.0, "images": 8.0, "annotations": 8.0, "component_runs": 8.0,
                                 "external": 8.0, "image_embeddings": 3.0, "query_embeddings": 3.0})},
                             gpu={"evaluate_model": True, "evaluate_system": False},
                             # a clip system on its own model decodes its image files in its job
                             pace={"evaluate_model": Pace({"cpu": CPU_IMAGES_PER_S,
                                                           "gpu": GPU_DECODING_IMAGES_PER_S})}),
    "evaluate": Stage({"evaluate": "benchmaker.evaluate.trust:run"},
                      memory={"evaluate": Memory(PY_MB + 300, {"qrels": 8.0, "images": 8.0, "annotations": 8.0,
                                                               "runs": 8.0, "image_embeddings": 8.0})}),
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


def needs_gpu(rule: str, adapter: str | None = None) -> bool:
    """Whether ``rule``'s jobs run a model (a cluster then gives them a GPU), as its stage declares:
    always, never, or with the given ``adapter`` (the stage's ``<stage>.adapter`` setting)."""
    need = STAGES[stage_of(rule)].gpu.get(rule, False)
    return need if isinstance(need, bool) else adapter in need

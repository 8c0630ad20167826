"""Every setting of config/schema.yaml either decides the output of the stages that read it (and then
changing it plans exactly those stages and what follows them) or is a runtime knob (``x-runtime:
true``: changing it plans nothing). Generated from the schema: each output-deciding key of a complete
configuration (clip vision sharing its job with the embeddings, the rules judge, a second judge,
four evaluate systems, one with the similarity stage's model, the audit) is changed on its own, and
``snakemake -n`` (Snakemake's own change detection, through its API: tests/dryrun_probe.py) must
plan exactly the expected rules; all runtime knobs at once must plan nothing.

The outputs are made once (empty files, recorded by ``snakemake --touch`` with the params of the base
config): what Snakemake compares is what a real run records, and no stage has to run.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import support

from benchmaker.config import deep_merge, validate_config
from benchmaker.stages import STAGES
from benchmaker.triggers import RUNTIME, setting_paths, without_runtime

ROOT = Path(__file__).resolve().parents[1]

# rules that follow others (filled from the base DAG); what a change plans = its direct rules + these
AUDIT = {"audit_sample", "audit_labelling", "audit_report"}
EVERYTHING = "*"

# the rules whose output a setting decides (longest matching prefix wins); every output-deciding
# setting is also recorded in the dataset (export's public_config), so export is added to each. A key of
# a section named like a stage of benchmaker/stages.py that no prefix here matches decides that stage's
# rules (direct_rules: plan, summary, evaluate; a new stage's settings need no line here)
DIRECT: dict[str, set[str] | str] = {
    "benchmark": {"summary", "audit_labelling"},  # the title: report and labelling page
    "benchmark.description": {"summary"},
    "benchmark.version": {"summary"},
    "benchmark.smoke_reason": {"summary"},
    "benchmark.citation": set(),      # in the dataset card only (export)
    "benchmark.license": set(),
    "benchmark.authors": set(),
    "columns": EVERYTHING,
    "facets": {"vision", "merge_annotations"},   # and everything after them; never preprocess
    "n_shards": EVERYTHING,
    "preprocess": {"preprocess"},
    # duplicate groups span shards: decided in merge_images, never a preprocess shard
    "preprocess.near_duplicate_threshold": {"merge_images"},
    "vision": set(),                   # the sections of unused adapters: recorded only
    # the batch rules replace `vision`, and embed_images makes the embeddings the clip job shared, from
    # the pixel store both read (decode_images: not again)
    "vision.adapter": {"vision", "embed_images"},
    # the clip model identity: vision reruns, and the embeddings it wrote with the shared job are
    # made by embed_images again (same bytes: the model identity is similarity's); a model or
    # pretrained tag that decides other pixels gets its own pixel store (decode_images), the device
    # and the precision decide none
    "vision.clip": {"vision"},
    "vision.clip.model": {"vision", "decode_images", "embed_images"},
    "vision.clip.pretrained": {"vision", "decode_images", "embed_images"},
    "vision.clip.device": {"vision", "embed_images"},
    "vision.clip.precision": {"vision", "embed_images"},
    # the query writer runs on the judge's adapter: with the rules judge its model and prompts are
    # recorded only (tests below: with an API judge they decide the queries)
    "queries": set(),
    "queries.rules": {"queries"},
    "judge": set(),                    # judge.openai / judge.gemini: unused with the rules judge
    "judge.adapter": {"queries", "judge", "audit_judge2"},   # the batch rules replace them (SWAPPED)
    "judge.labels": {"judge", "audit_judge2"} | AUDIT,
    "judge.rationale": {"judge", "audit_judge2"},
    "judge.rules": {"judge", "audit_judge2"},
    # embeddings and what uses them; never vision, merge_annotations, plan or judge
    "similarity": {"decode_images", "embed_images", "embed_queries", "evaluate"},
    # device auto: the clip system (device auto) gets the similarity stage's model and ranks its
    # embeddings (evaluate_system), clip-same (device cpu) loses it and loads the model (evaluate_model)
    "similarity.device": {"embed_images", "embed_queries", "evaluate", "evaluate_model"},
    "similarity.precision": {"embed_images", "embed_queries", "evaluate"},   # decides no pixel
    # + decode_images of the new model's own pixel store (NEW_JOBS)
    "similarity.model": {"embed_images", "embed_queries", "evaluate"},
    "similarity.pretrained": {"embed_images", "embed_queries", "evaluate"},
    "similarity.logit_column": {"score"},
    "similarity.rank_column": {"score"},
    # embed_images becomes the producer of the embeddings the vision job wrote (the same bytes, from
    # the pixel store the vision job read), and so of clip-same's inputs
    "similarity.share_vision_job": {"embed_images", "score", "evaluate", "evaluate_system"},
    "export": set(),
    "audit": set(),
    "audit.enabled": {"summary"},
    "audit.sample_size": {"audit_sample"},
    "audit.seed": {"audit_sample", "audit_report"},
    "audit.strata": {"audit_sample"},
    "audit.rank_bands": {"audit_sample"},  # the base config evaluates systems: the sample has a rank stratum
    "audit.allocation": {"audit_sample"},
    "audit.min_per_stratum": {"audit_sample"},
    "audit.facets": {"audit_report"},
    "audit.require_complete": {"audit_report"},
    "audit.bootstrap": {"audit_report"},
    "audit.confidence": {"audit_report"},
    "audit.metrics": {"audit_report"},
    "audit.show_judge_label": {"audit_labelling"},
    "audit.thumbnail_max_side": {"audit_labelling"},
    "audit.label_studio_image_prefix": {"audit_labelling"},
    "audit.second_judge": {"audit_judge2", "audit_report"},
    "audit.second_judge.judge": {"audit_judge2"},
    "evaluate.depth": {"evaluate", "evaluate_model", "evaluate_system"},
    "evaluate.report": {"summary"},
    "evaluate.systems.0": {"evaluate_model"},
    "evaluate.systems.1": {"evaluate_system"},
    "evaluate.systems.2": {"evaluate_system"},
    # clip-same ranks the similarity stage's embeddings (evaluate_settings.reuses_similarity_embeddings)
    "evaluate.systems.3": {"evaluate_system"},
    "deepen": set(),                   # off in the base config: recorded only
}

# rules of the base DAG that a change replaces by others (adapter switches: batch rules)
SWAPPED = {
    "vision.adapter": ({"vision"}, {"vision_build", "vision_submit", "vision_collect"}),
    # the query writer runs on the judge's adapter and mode: its batch rules replace `queries` too
    "judge.adapter": ({"judge", "queries"}, {"judge_build", "judge_submit", "judge_collect", "queries_build",
                                             "queries_submit", "queries_collect"}),
    # a clip system that gets or loses the similarity stage's model identity changes its rule:
    # with it, it ranks that stage's embeddings (evaluate_system); without, it loads the model
    "evaluate.systems.0.device": ({"evaluate_model"}, {"evaluate_system"}),
    **{f"evaluate.systems.3.{k}": ({"evaluate_system"}, {"evaluate_model"})
       for k in ("model", "pretrained", "device", "precision")},
    **{f"similarity.{k}": ({"evaluate_system"}, {"evaluate_model"}) for k in ("model", "pretrained", "precision")},
}

# rules that a change plans as new jobs beside the base DAG's (not followed by their users there): the
# similarity stage's new model decides other pixels, so its pixel store has a new key
# (pixels/<key>/{shard}, docs/similarity.md) that embed_images alone reads; the vision jobs keep
# reading the store of the old key
NEW_JOBS = {"similarity.model": {"decode_images"}, "similarity.pretrained": {"decode_images"}}

# new values where "another value of the same type" is not valid or not a change
NEW_VALUE = {
    "benchmark.title": "Another title",
    "benchmark.smoke_reason": "another reason",
    "benchmark.citation": "@misc{x}",
    "benchmark.authors": [{"name": "someone else"}],
    "preprocess.extensions": [".png"],
    "preprocess.image_base_url": "https://example.org/images",
    "vision.adapter": "openai",
    "vision.clip.model": "ViT-B-16",
    "vision.clip.pretrained": "openai",
    "vision.clip.device": "auto",
    "vision.clip.precision": "fp32",
    "vision.metadata.facet_columns": {"color": "label_color"},
    "vision.metadata.tags_column": "label_tags",
    "vision.metadata.summary_column": "label_summary",
    "plan.core_facets": ["shape"],
    "plan.off_facets": ["color"],
    "plan.diversity_facets": ["color"],
    "plan.neg_total": None,           # must equal the sum: changed with neg_easy below
    "plan.neg_hard": None,
    "plan.neg_nearmiss": None,
    "judge.adapter": "openai",
    "similarity.model": "ViT-B-16",
    "similarity.pretrained": "openai",
    "similarity.device": "auto",
    "similarity.precision": "fp32",
    "similarity.logit_column": "clip_logit",
    "export.repo_id": "me/tiny",
    "export.endpoint": "http://127.0.0.1:9",
    "audit.strata": ["pool"],
    "audit.facets": ["color"],
    "audit.metrics": ["map"],
    "audit.second_judge.judge": {"rules": {"relevant_min_jaccard": 0.3}},
    "audit.second_judge.name": "other",
    "evaluate.k": [5, 10],
    "evaluate.power.deltas": [0.03],
    "evaluate.compare.metrics": ["map"],
    "evaluate.facets": ["color"],
    "evaluate.systems.0.pretrained": "openai",
    "evaluate.systems.0.model": "ViT-B-16",
    "evaluate.systems.0.device": "cpu",
    "evaluate.systems.0.precision": "fp32",
    "evaluate.systems.0.depth": 50,
    "evaluate.systems.1.fields": ["summary"],
    "evaluate.systems.1.k1": 1.2,
    "evaluate.systems.1.b": 0.5,
    "evaluate.systems.1.depth": 50,
    "evaluate.systems.2.method": "sum",
    "evaluate.systems.2.norm": "min-max",
    "evaluate.systems.2.depth": 50,
    "evaluate.systems.3.pretrained": "openai",
    "evaluate.systems.3.model": "ViT-B-16",
    "evaluate.systems.3.device": "auto",
    "evaluate.systems.3.precision": "fp32",
    "evaluate.systems.3.depth": 50,
    "similarity.cache_dir": "elsewhere/embeddings",
    "facets.tags.vocabulary": None,
    "facets.boolean": [],
    "facets.taxonomy": None,
    "columns.image": "picture",
}
# changed together: one setting is only valid with the other (plan.neg_total = the sum of the three)
TOGETHER = {"plan.neg_easy": {"plan.neg_easy": 2, "plan.neg_total": 4},
            # a band's key changes as part of the list (the base config leaves the default list to the schema)
            **{f"audit.rank_bands.{i}.{k}": {"audit.rank_bands": [
                {"max_rank": 3 + ((i, k) == (0, "max_rank")), "weight": 4 + ((i, k) == (0, "weight"))},
                {"max_rank": 10 + ((i, k) == (1, "max_rank")), "weight": 2 + ((i, k) == (1, "weight"))}]}
               for i in (0, 1) for k in ("max_rank", "weight")},
            # weights only with a weighted method (evaluate_settings.check_hybrid)
            "evaluate.systems.2.weights": {"evaluate.systems.2.method": "wsum",
                                           "evaluate.systems.2.weights": [0.3, 0.7]}}

# settings this test does not change, and why
SKIP = {
    "benchmark.name": "a new name is a new results folder (a new build), not a change of one",
    "benchmark.smoke_test": "set by benchmaker for the tiny CLIP whatever the config says",
    "paths": "files and folders: tests/test_change_detection.py and tests/test_staging.py",
    "audit.human_labels": "label files: inputs of audit_report (tests/test_audit_workflow.py)",
    "evaluate.systems.0.name": "a new name is a new system (its own run file)",
    "evaluate.systems.1.name": "a new name is a new system (its own run file)",
    "evaluate.systems.2.name": "a new name is a new system (its own run file)",
    "evaluate.systems.0.kind": "another kind is another system",
    "evaluate.systems.1.kind": "another kind is another system",
    "evaluate.systems.2.kind": "another kind is another system",
    "evaluate.systems.3.name": "a new name is a new system (its own run file)",
    "evaluate.systems.3.kind": "another kind is another system",
    "evaluate.systems.2.systems": "the fused systems: structural (tests/test_evaluate_workflow.py)",
    "evaluate.systems.0.scope": "trec_run/rerank only",
    "evaluate.compare.baseline": "a folder of a kept evaluation: tests/test_evaluate_compare.py",
    "deepen.enabled": "adds the deepen rules: tests/test_deepen_workflow.py",
}


def base_config(tmp: Path, corpus: Path, clip: Path) -> dict:
    clip_model = f"local-dir:{clip}"
    return support.tiny_config(tmp, corpus, clip, **{
        "paths": {"results": "results"},
        # the shipped setting: one CLIP job per shard writes annotations and embeddings
        "vision": {"clip": {"device": "cpu", "num_workers": 0}},
        "similarity": {"share_vision_job": True},
        "audit": {"second_judge": {"judge": {}}, "sample_size": 8, "bootstrap": 10},
        "evaluate": {"systems": [
            {"name": "clip", "kind": "clip", "model": clip_model, "pretrained": None, "num_workers": 0,
             "batch_size": 4},
            {"name": "bm25", "kind": "bm25"},
            {"name": "fused", "kind": "hybrid", "systems": ["clip", "bm25"]},
            # the similarity stage's model (device cpu as similarity's): it ranks that stage's files
            {"name": "clip-same", "kind": "clip", "model": clip_model, "pretrained": None, "device": "cpu",
             "num_workers": 0, "batch_size": 4},
        ]},
    })


def _get(cfg: dict, path: str):
    node = cfg
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _set(cfg: dict, path: str, value) -> dict:
    cfg = copy.deepcopy(cfg)
    parts = path.split(".")
    node = cfg
    for part in parts[:-1]:
        if isinstance(node, list):
            node = node[int(part)]
        else:
            node = node.setdefault(part, {})
    if isinstance(node, list):
        node[int(parts[-1])] = value
    else:
        node[parts[-1]] = value
    return cfg


def another(node: dict, value):
    """A valid value of the schema ``node`` other than ``value`` (None: none found)."""
    if "enum" in node:
        others = [e for e in node["enum"] if e != value and e is not None]
        return others[0] if others else None
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        new = value + 1
        return value - 1 if new > node.get("maximum", new) else new
    if isinstance(value, float):
        new = round(value + 0.05, 4)
        if new > node.get("maximum", new) or new >= node.get("exclusiveMaximum", new + 1):
            new = round(value - 0.05, 4)
        return new
    if isinstance(value, str) and re.fullmatch(node.get("pattern", ".*"), value + "x"):
        return value + "x"
    types = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
    if value is None:
        for t, new in (("boolean", True), ("string", "x"), ("number", 0.5), ("integer", 2)):
            if t in types:
                return new
    if value == [] and node.get("items", {}).get("type") == "string":
        return ["x"]
    return None


def concrete_settings(filled: dict) -> list[tuple[str, dict]]:
    """Every leaf setting of the filled base config, with its schema (array items by index)."""
    out = []
    for path, node in setting_paths():
        if ".[]." not in path:
            try:
                _get(filled, path)
            except (KeyError, IndexError, TypeError):
                continue
            out.append((path, node))
            continue
        head, _, tail = path.partition(".[].")
        key = tail.split(".")[0]
        for i, item in enumerate(_get(filled, head) or []):
            # a key the item sets, or one its kind reads (the schema's description says "<kind>: ...")
            applies = key in item or key == "depth" or \
                str(node.get("description", "")).startswith(f"{item.get('kind')}:")
            if applies and "." not in tail:
                out.append((f"{head}.{i}.{tail}", node))
    return out


def runtime(node: dict) -> bool:
    return bool(node.get(RUNTIME))


def skipped(path: str) -> str | None:
    for prefix, why in SKIP.items():
        if path == prefix or path.startswith(prefix + "."):
            return why
    return None


def direct_rules(path: str, stages=STAGES) -> set[str] | str:
    """The rules whose output ``path`` decides: DIRECT's longest prefix of it, else, for a key of the
    section named like a stage, that stage's rules (its declaration in ``stages``)."""
    best = max((p for p in DIRECT if path == p or path.startswith(p + ".")), key=len, default=None)
    if best is not None:
        return DIRECT[best]
    section = path.split(".")[0]
    assert section in stages, f"{path}: which rules does it decide? Add it to DIRECT"
    return set(stages[section].rules)


def downstream(rules: set[str], edges: dict[str, list[str]]) -> set[str]:
    """``rules`` and every rule that (transitively) uses their outputs."""
    users: dict[str, set[str]] = {}
    for rule, deps in edges.items():
        for d in deps:
            users.setdefault(d, set()).add(rule)
    out, todo = set(rules), list(rules)
    while todo:
        for u in users.get(todo.pop(), ()):
            if u not in out:
                out.add(u)
                todo.append(u)
    return out


def probe(workdir: Path, requests: dict[str, str]) -> dict:
    req = workdir / f"requests-{len(requests)}-{time.monotonic_ns()}.json"
    req.write_text(json.dumps(requests))
    env = dict(os.environ, HF_HUB_OFFLINE="1", PATH=support.no_slurm_path(),
               PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "dryrun_probe.py"), str(ROOT), str(workdir), str(req)],
                       capture_output=True, text=True, env=env, timeout=1800)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def touched_build(work: Path, raw: dict) -> tuple[Path, dict, dict]:
    """``raw`` written as base.yaml in ``work``, its outputs recorded as made (``snakemake --touch``):
    (the config file, the files it makes, the rule edges)."""
    base = support.write_config(work / "base.yaml", raw)
    made = probe(work, {"create": str(base)})["create"]
    assert "error" not in made, made
    r = support.snakemake(["--touch", "--forceall", "-c1"], work, base)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return base, made, rule_edges(work, base)


@pytest.fixture(scope="module")
def touched(tmp_path_factory, tiny_corpus, tiny_clip):
    """A workdir whose outputs are recorded as made by the base config (``snakemake --touch``)."""
    work = tmp_path_factory.mktemp("triggers")
    support.rights_map(work / "rights_map.json")
    raw = base_config(work, tiny_corpus, tiny_clip)
    base, made, edges = touched_build(work, raw)
    check = probe(work, {"base": str(base)})["base"]
    assert check == {"planned": {}, "reasons": {}}, check
    return {"work": work, "raw": raw, "filled": validate_config(raw), "edges": edges, "made": made}


def rule_edges(work: Path, config: Path) -> dict[str, list[str]]:
    """rule -> the rules whose outputs it reads (Snakemake's --rulegraph of the base config)."""
    r = support.snakemake(["--rulegraph", "--forceall"], work, config)
    assert r.returncode == 0, r.stderr[-3000:]
    names = dict(re.findall(r'^\s*(\d+)\[label = "([^"]+)"', r.stdout, re.M))
    edges: dict[str, list[str]] = {n: [] for n in names.values()}
    for a, b in re.findall(r"^\s*(\d+) -> (\d+)", r.stdout, re.M):
        edges[names[b]].append(names[a])
    return edges


@pytest.mark.slow
def test_every_output_setting_plans_exactly_its_stages_and_no_runtime_knob_plans_anything(touched):
    work, raw, filled, edges = touched["work"], touched["raw"], touched["filled"], touched["edges"]
    every_rule = set(edges) - {"all"}
    requests, expected, knobs, not_changed, recorded = {}, {}, {}, [], {}
    public = without_runtime(filled)
    for path, node in concrete_settings(filled):
        if skipped(path):
            continue
        try:
            value = _get(filled, path)
        except KeyError:  # an optional key of an evaluate system, not set in the base config
            value = None
        if runtime(node):
            knobs[path] = NEW_VALUE[path] if path in NEW_VALUE else another(node, value)
            assert knobs[path] is not None, f"{path}: add a new value to NEW_VALUE"
            continue
        if path in TOGETHER:
            changes = TOGETHER[path]
        else:
            new = NEW_VALUE[path] if path in NEW_VALUE else another(node, value)
            if new is None or new == value:
                not_changed.append(path)
                continue
            changes = {path: new}
        cfg = raw
        for p, v in changes.items():
            cfg = _set(cfg, p, v)
        direct = direct_rules(path)
        if direct == set() and path not in SWAPPED:
            # recorded in the dataset only: export compares the recorded config, so the key must
            # change it; all such keys go in one dry run, which must plan export and nothing else
            # (a key that planned more would show up there)
            assert without_runtime(validate_config(cfg)) != public, f"{path}: not in the recorded config"
            recorded.update(changes)
            continue
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", path)
        requests[path] = str(support.write_config(work / f"{name}.yaml", cfg))
        expected[path] = every_rule if direct == EVERYTHING else \
            downstream(set(direct) | {"export"}, edges) - {"all"}
        if path in SWAPPED:
            expected[path] = expected[path] - SWAPPED[path][0] | SWAPPED[path][1]
        expected[path] = expected[path] | NEW_JOBS.get(path, set())
    # NEW_VALUE = None marks settings changed only together with another (TOGETHER) or not at all
    not_changed = [p for p in not_changed if NEW_VALUE.get(p, 0) is not None]
    assert not not_changed, f"no other valid value found for {not_changed}: add them to NEW_VALUE or SKIP"
    assert len(knobs) >= 10, knobs
    assert len(recorded) >= 50, recorded
    cfg = raw
    for p, v in recorded.items():
        cfg = _set(cfg, p, v)
    requests["recorded only"] = str(support.write_config(work / "recorded.yaml", cfg))
    expected["recorded only"] = {"export"}
    cfg = raw
    for p, v in knobs.items():
        cfg = _set(cfg, p, v)
    requests["runtime knobs"] = str(support.write_config(work / "knobs.yaml", cfg))
    expected["runtime knobs"] = set()

    started = time.monotonic()
    got = probe(work, requests)
    print(f"{len(requests)} dry runs in {time.monotonic() - started:.0f} s")
    wrong = []
    for path, want in expected.items():
        res = got[path]
        if "error" in res:
            wrong.append(f"{path}: {res['error'][:300]}")
            continue
        planned = set(res["planned"]) - {"all"}
        if planned != want:
            extra = {r: res["reasons"][r][:200] for r in sorted(planned - want)}
            wrong.append(f"{path}: planned {sorted(planned)}; missing {sorted(want - planned)}, "
                         f"unexpected {extra}")
    assert not wrong, "\n".join(wrong)
    # beside the rule graph it is read from: a labelling change never embeds the query texts again
    # (embed_queries reads queries.jsonl); a change of the written queries does
    labelling = [p for p in got if p.startswith(("judge.rules.", "judge.labels", "judge.rationale"))]
    writing = [p for p in got if p.startswith("queries.rules.")]
    assert labelling and writing, sorted(got)
    assert not [p for p in labelling if "embed_queries" in got[p]["planned"]], labelling
    assert all("embed_queries" in got[p]["planned"] for p in writing), writing


def test_runtime_knobs_are_declared_in_the_schema():
    """The knobs that change no byte are marked, and nothing else is (the list is the schema's)."""
    knobs = {p for p, node in setting_paths() if runtime(node)}
    for must in ("preprocess.workers", "vision.clip.batch_size", "vision.clip.num_workers",
                 "similarity.batch_size", "similarity.num_workers", "similarity.cache_dir",
                 "vision.openai.concurrency", "judge.gemini.poll_seconds",
                 "evaluate.systems.[].batch_size", "evaluate.systems.[].llm.concurrency"):
        assert must in knobs, must
    for never in ("similarity.precision", "similarity.device", "vision.clip.device", "judge.openai.model",
                  "judge.openai.max_attempts", "judge.openai.prices.input", "plan.random_seed"):
        assert never not in knobs, never


def test_split_runtime_follows_the_schema_into_nested_sections():
    from benchmaker.triggers import split_runtime, without_runtime

    judge = {"adapter": "openai", "labels": "binary",
             "openai": {"model": "m", "concurrency": 3, "retry_max_tries": 2, "max_attempts": 4}}
    out, run = split_runtime(judge, "judge")
    assert out == {"adapter": "openai", "labels": "binary", "openai": {"model": "m", "max_attempts": 4}}
    assert run == {"openai": {"concurrency": 3, "retry_max_tries": 2}}
    cfg = deep_merge({"audit": {"second_judge": {"judge": {"openai": {"concurrency": 2, "model": "x"}}}}},
                     {"evaluate": {"systems": [{"name": "a", "kind": "clip", "batch_size": 3}]}})
    public = without_runtime(cfg)
    assert public["audit"]["second_judge"]["judge"] == {"openai": {"model": "x"}}
    assert public["evaluate"]["systems"] == [{"name": "a", "kind": "clip"}]


# -- an API judge: what the query writer's requests are made of, and what only the labelling's ---------
# setting -> (new value, the rules it plans: those it decides and every rule after them)
API_CHANGES = {
    "judge.openai.prompts.system": ("label strictly", {"judge"}),             # labelling prompt: re-labels only
    "judge.openai.send_thumbnails": (True, {"judge"}),                        # labelling with images
    "judge.openai.image_detail": ("high", {"judge"}),                         # the writer sends its seeds at low
    "judge.labels": ("graded", {"judge"}),
    "queries.prompts.system": ("write short queries", {"queries"}),           # the writer's prompt: rewrites
    "queries.model": ("gpt-4.1-mini", {"queries"}),                           # the writer's model: rewrites
    "judge.openai.model": ("gpt-4.1-mini", {"queries"}),                      # both run on it: rewrites
    "judge.openai.concurrency": (3, set()),                                   # a runtime knob: nothing
}


@pytest.mark.slow
def test_api_judge_a_labelling_change_relabels_only_and_a_writer_change_rewrites(tmp_path, tiny_corpus, tiny_clip):
    """With the openai judge (sync) the query writer runs on the judge's provider settings less what only
    labelling reads: a change of the labelling prompt, of labelling with images or of the label scale
    re-labels (judge and what follows) and never rewrites a query; a change of the writer's prompt or
    model, or of the model both run on, rewrites the queries and re-labels (the judge reads them)."""
    support.rights_map(tmp_path / "rights_map.json")
    raw = support.tiny_config(tmp_path, tiny_corpus, tiny_clip, paths={"results": "results"},
                              judge={"adapter": "openai", "openai": {"mode": "sync", "base_url": "http://127.0.0.1:9"}},
                              audit={"enabled": False})
    base, made, edges = touched_build(tmp_path, raw)
    assert "queries" in edges["judge"], edges["judge"]      # the judge reads queries.jsonl
    requests, expected = {}, {}
    for path, (value, direct) in API_CHANGES.items():
        requests[path] = str(support.write_config(tmp_path / f"{path}.yaml", _set(raw, path, value)))
        expected[path] = downstream(direct | {"export"}, edges) - {"all"} if direct else set()
    got = probe(tmp_path, requests)
    wrong = [f"{p}: planned {sorted(set(got[p].get('planned', {})) - {'all'})}, expected {sorted(expected[p])} "
             f"{got[p].get('error', '')[:300]}" for p in requests
             if "error" in got[p] or set(got[p]["planned"]) - {"all"} != expected[p]]
    assert not wrong, "\n".join(wrong)
    # the query texts are embedded from queries.jsonl, never from the labels: a labelling change plans
    # no query embedding (a model load); a change of the written queries does
    assert "queries" in edges["embed_queries"] and "judge" not in edges["embed_queries"], edges["embed_queries"]
    for path in ("judge.openai.prompts.system", "judge.openai.send_thumbnails", "judge.labels"):
        assert "queries" not in got[path]["planned"]
        assert "embed_queries" not in got[path]["planned"] and "score" in got[path]["planned"], got[path]
    for path in ("queries.prompts.system", "queries.model", "judge.openai.model"):
        assert "embed_queries" in got[path]["planned"], got[path]

"""The ``openai`` judge adapter: one request per planned query labels every candidate (binary, or
graded 0..3) against the query and narrative written before (the ``queries`` stage), optionally with
a short rationale each.

Candidates reach the model as descriptions (and, with ``send_thumbnails``, their images at low
detail) under opaque keys (see :mod:`.prompts`); the answer
is validated to cover exactly the planned keys, and mapped back to image ids here. Sync mode runs in
the plain ``judge`` rule (:class:`OpenAIJudge`); batch mode in ``judge_build`` → ``judge_submit`` →
``judge_collect`` (:func:`build`, :func:`submit`, :func:`collect`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

import polars as pl

from ..formats import FacetModel, write_table
from ..logs import get_logger
from ..losses import Losses
from ..providers.batch_build import build_requests
from ..providers.batch_collect import collect_results
from ..providers.batch_submit import submit_requests
from ..providers.engine import Item, Runner
from ..providers.runners import provider_runner
from ..providers.spec import ImageRef
from .prompts import candidate_keys, check_answer, judge_spec, judgments_by_key

__all__ = ["OpenAIJudge", "judge_items", "answers_to_frame", "build", "submit", "collect", "merged_settings"]

log = get_logger("judge.openai")


def merged_settings(settings: Mapping[str, Any]) -> dict:
    """judge.<adapter> settings with the stage-wide ``labels`` / ``rationale`` on top."""
    s = dict(settings)
    adapter = dict(s.pop("adapter_settings", {}) or {})
    return {**adapter, **s}


def image_refs(ids, images: Mapping[str, Mapping[str, Any]], image_root: str) -> dict[str, ImageRef]:
    """image_id -> the image as a request part (its content digest, local path, URL and size)."""
    out = {}
    for i in ids:
        r = images.get(i)
        if r is not None:
            out[i] = ImageRef(sha256=r["sha256"], path=str(Path(image_root) / i), url=r.get("image_url"),
                              width=int(r.get("width") or 0), height=int(r.get("height") or 0))
    return out


def judge_items(plan: pl.DataFrame, annotations: pl.DataFrame, images: pl.DataFrame, fm: FacetModel,
                settings: Mapping[str, Any], image_root: str, losses: Losses) -> Iterator[tuple[Item, dict]]:
    """(item, keys) per judgeable planned query; queries missing annotations go to ``losses``. The plan
    carries each query's ``query_text`` (and ``narrative`` when it has one): benchmaker.judge.run joins
    them from queries.jsonl, pool deepening from the published qrels."""
    ann = {r["image_id"]: r for r in annotations.iter_rows(named=True)}
    img = {r["image_id"]: r for r in images.iter_rows(named=True)}
    thumbs = bool(settings.get("send_thumbnails"))
    narrative = ["narrative"] if "narrative" in plan.columns else []
    for q in plan.select("query_id", "seed_image_ids", "candidates", "query_text", *narrative).iter_rows(named=True):
        qid = q["query_id"]
        cand_ids = list(dict.fromkeys(c["image_id"] for c in q["candidates"]))
        missing = [i for i in cand_ids if i not in ann]
        if missing:
            losses.add("query", qid, "missing_annotation", f"no annotation for {len(missing)} image(s)")
            continue
        keys = candidate_keys(qid, cand_ids)
        spec = judge_spec(query_text=q["query_text"], narrative=q.get("narrative"),
                          candidates=[ann[i] for i in cand_ids], keys=keys,
                          meta_row=img.get(q["seed_image_ids"][0], {}) if q["seed_image_ids"] else {},
                          fm=fm, settings=settings,
                          thumbnails=image_refs(cand_ids, img, image_root) if thumbs else None)
        yield Item(qid, spec, check_answer(list(keys.values()))), keys


def answers_to_frame(answers: Mapping[str, dict], keys_of: Mapping[str, dict], judge_name: str,
                     rationale: bool) -> pl.DataFrame:
    rows = []
    for qid, keys in keys_of.items():
        a = answers.get(qid)
        if a is None:
            continue
        by_key = judgments_by_key(a)
        for image_id, k in keys.items():
            j = by_key[k]
            rows.append({"query_id": qid, "image_id": image_id,
                         "relevance_label": int(j["label"]),
                         "rationale": (str(j.get("rationale") or "").strip() or None) if rationale else None,
                         "judge": judge_name})
    schema = {"query_id": pl.String, "image_id": pl.String, "relevance_label": pl.Int64,
              "rationale": pl.String, "judge": pl.String}
    return pl.DataFrame(rows, schema=schema)


class OpenAIJudge:
    """Sync mode (the plain ``judge`` rule). Other providers subclass it and override
    ``provider`` and ``answers`` (see judge/gemini.py)."""

    provider = "openai"
    stage, item_type = "judge", "query"   # the runner's (sync here, batch in _runner)

    def __init__(self, *, facets: FacetModel, settings: dict[str, Any], image_root: str, cache_dir: str | None,
                 threads: int = 1, client: Any = None):
        self.facets, self.image_root = facets, image_root
        self.runner = self.make_runner(merged_settings(settings), cache_dir, client)
        self.settings = self.runner.settings
        self.name = f"{self.provider}:{self.runner.llm.model}"

    def make_runner(self, settings: dict[str, Any], cache_dir: str | None, client: Any):
        return provider_runner(self.provider, stage=self.stage, item_type=self.item_type, settings=settings,
                               cache_dir=cache_dir, client=client)

    def answers(self, items: list, losses: Losses) -> dict[str, dict]:
        return self.runner.run_sync(items, losses)

    @property
    def costs(self) -> list[dict]:
        return self.runner.cost_rows

    def judge(self, plan: pl.DataFrame, annotations: pl.DataFrame, images: pl.DataFrame,
              losses: Losses) -> pl.DataFrame:
        pairs = list(judge_items(plan, annotations, images, self.facets, self.settings, self.image_root, losses))
        answers = self.answers([it for it, _ in pairs], losses)
        return answers_to_frame(answers, {it.item_id: k for it, k in pairs}, self.name,
                                bool(self.settings.get("rationale")))


# -- batch mode ---------------------------------------------------------------------------------------
def _load(plan: str, annotations: str, images: str, columns, facets, queries: str):
    from . import read_planned

    fm = FacetModel.from_config(facets)
    return (fm, *read_planned(plan, annotations, images, columns, fm, queries))


def _runner(settings, cache_dir, adapter: str = "openai") -> Runner:
    return provider_runner(adapter, stage=OpenAIJudge.stage, item_type=OpenAIJudge.item_type, settings=settings,
                           cache_dir=cache_dir)


def build(*, plan: str, queries: str, annotations: str, images: str, requests: str, manifest: str,
          settings: Mapping[str, Any],
          facets: Mapping[str, Any], image_root: str, columns: Mapping[str, str], cache_dir: str | None = None,
          threads: int = 1, adapter: str = "openai", reuse: str | None = None) -> None:
    from ..reuse import split_reused

    s = merged_settings(settings)
    fm, plan_df, ann, imgs = _load(plan, annotations, images, columns, facets, queries)
    plan_df = split_reused(plan_df, reuse, graded=s.get("labels") == "graded", columns=columns)[0]
    items = (it for it, _ in judge_items(plan_df, ann, imgs, fm, s, image_root, Losses("judge")))
    build_requests(_runner(s, cache_dir, adapter), items, requests=requests, manifest=manifest, threads=threads)


def submit(*, requests: str, submitted: str, settings: Mapping[str, Any], state_dir: str, benchmark: str,
           cache_dir: str | None = None, adapter: str = "openai") -> None:
    from ..providers.records import batch_metadata

    submit_requests(_runner(merged_settings(settings), cache_dir, adapter), requests=requests, submitted=submitted,
                    state_dir=state_dir, metadata=batch_metadata(benchmark, "judge", "all"))


def collect(*, plan: str, queries: str, annotations: str, images: str, manifest: str, submitted: str, qrels: str,
            losses: str,
            costs: str, settings: Mapping[str, Any], facets: Mapping[str, Any], image_root: str,
            columns: Mapping[str, str], state_dir: str, benchmark: str, cache_dir: str | None = None,
            adapter: str = "openai", reuse: str | None = None) -> None:
    from ..providers.records import attach_ledger, batch_metadata, write_costs
    from ..reuse import split_reused
    from . import finalize

    s = merged_settings(settings)
    fm, full_plan, ann, imgs = _load(plan, annotations, images, columns, facets, queries)
    # queries the reuse file answers are not in the requests (build) and are added back here
    plan_df, reused, reuse_costs = split_reused(full_plan, reuse, graded=s.get("labels") == "graded",
                                                columns=columns)
    runner = _runner(s, cache_dir, adapter)
    attach_ledger(runner, str(Path(state_dir) / "ledger.jsonl"))
    loss = Losses("judge")
    keys_of: dict[str, dict] = {}
    calls = 0

    def items() -> Iterator[Item]:
        """The items streamed (their request specs are not held: made again only for retries); the
        first pass records the losses and each query's candidate keys."""
        nonlocal calls
        calls += 1
        first = calls == 1
        for it, keys in judge_items(plan_df, ann, imgs, fm, s, image_root, loss if first else Losses("judge")):
            if first:
                keys_of[it.item_id] = keys
            yield it

    with runner.ledger:
        answers = collect_results(runner, items, manifest=manifest, submitted=submitted,
                                  state_dir=state_dir, losses=loss,
                                  metadata=batch_metadata(benchmark, "judge", "all"),
                                  wait=bool(runner.settings["wait"]),
                                  poll_seconds=float(runner.settings["poll_seconds"]))
    name = f"{adapter}:{runner.llm.model}"
    judged = answers_to_frame(answers, keys_of, name, bool(s.get("rationale")))
    if reused.height:
        judged = pl.concat([reused, judged], how="diagonal_relaxed")
    out = finalize(full_plan, judged, loss, judge_name=name, graded=s.get("labels") == "graded")
    write_table(out, "qrels", qrels, columns=columns)
    loss.write(losses)
    write_costs(reuse_costs + runner.cost_rows, costs, runner.ledger)
    log.info("judge collect: %d qrels rows for %d queries; %d losses", out.height, out["query_id"].n_unique(),
             len(loss))

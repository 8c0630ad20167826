"""The ``openai`` query writer: one request per planned query, from its seed image(s) alone.

Each request holds the seeds' pixels (low detail: :data:`.prompts.WRITER_IMAGE`) and their annotation
rows, and asks for ``{query_text, narrative}`` (:mod:`.prompts`). Same engine as every API stage
(response cache, attempts, losses, cost rows, the crash-safe ledger). Sync mode runs in the plain
``queries`` rule (:class:`OpenAIWriter`); batch mode in ``queries_build`` → ``queries_submit`` →
``queries_collect`` (:func:`build`, :func:`submit`, :func:`collect`). The ``gemini`` writer is the
same on the Gemini provider (:mod:`.gemini`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

import polars as pl

from ..formats import FacetModel
from ..logs import get_logger
from ..losses import Losses
from ..providers.batch_build import build_requests
from ..providers.batch_collect import collect_results
from ..providers.batch_submit import submit_requests
from ..providers.engine import Item, Runner
from ..providers.runners import provider_runner
from ..providers.spec import ImageRef
from .prompts import WRITER_IMAGE, check_answer, query_spec

__all__ = ["OpenAIWriter", "query_items", "answers_to_frame", "writer_settings", "build", "submit", "collect"]

log = get_logger("queries.openai")
SCHEMA = {"query_id": pl.String, "query_text": pl.String, "narrative": pl.String, "writer": pl.String}


def writer_settings(settings: Mapping[str, Any]) -> dict:
    """The provider settings the writer's requests are made with: the seeds at low detail."""
    return {**dict(settings), **WRITER_IMAGE}


def query_items(plan: pl.DataFrame, annotations: pl.DataFrame, images: pl.DataFrame, fm: FacetModel,
                settings: Mapping[str, Any], image_root: str, losses: Losses) -> Iterator[Item]:
    """One item per planned query whose seeds all have an annotation (the others go to ``losses``)."""
    ann = {r["image_id"]: r for r in annotations.iter_rows(named=True)}
    img = {r["image_id"]: r for r in images.iter_rows(named=True)}
    for qid, seeds in plan.select("query_id", "seed_image_ids").iter_rows():
        missing = [i for i in seeds if i not in ann]
        if missing or not seeds:
            losses.add("query", qid, "missing_annotation", f"no annotation for {len(missing)} seed image(s)")
            continue
        refs = []
        for i in seeds:
            r = img.get(i)
            refs.append(None if r is None else ImageRef(
                sha256=r["sha256"], path=str(Path(image_root) / i), url=r.get("image_url"),
                width=int(r.get("width") or 0), height=int(r.get("height") or 0)))
        spec = query_spec(seed_rows=[ann[i] for i in seeds], seed_images=refs, meta_row=img.get(seeds[0], {}),
                          fm=fm, settings=settings)
        yield Item(qid, spec, check_answer)


def answers_to_frame(answers: Mapping[str, dict], order: list[str], writer: str) -> pl.DataFrame:
    rows = [{"query_id": q, "query_text": str(answers[q]["query_text"]).strip(),
             "narrative": str(answers[q]["narrative"]).strip(), "writer": writer} for q in order if q in answers]
    return pl.DataFrame(rows, schema=SCHEMA)


class OpenAIWriter:
    """Sync mode (the plain ``queries`` rule). :class:`.gemini.GeminiWriter` overrides ``provider``
    and ``answers``."""

    provider = "openai"
    stage, item_type = "queries", "query"   # the runner's (sync here, batch in _runner)

    def __init__(self, *, facets: FacetModel, settings: dict[str, Any], image_root: str, cache_dir: str | None,
                 threads: int = 1, client: Any = None):
        self.facets, self.image_root = facets, image_root
        self.runner = self.make_runner(writer_settings(settings), cache_dir, client)
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

    def write(self, plan: pl.DataFrame, annotations: pl.DataFrame, images: pl.DataFrame,
              losses: Losses) -> pl.DataFrame:
        items = list(query_items(plan, annotations, images, self.facets, self.settings, self.image_root, losses))
        answers = self.answers(items, losses)
        return answers_to_frame(answers, [it.item_id for it in items], self.name)


# -- batch mode ---------------------------------------------------------------------------------------
def _runner(settings, cache_dir, adapter: str) -> Runner:
    return provider_runner(adapter, stage=OpenAIWriter.stage, item_type=OpenAIWriter.item_type,
                           settings=writer_settings(settings), cache_dir=cache_dir)


def build(*, plan: str, annotations: str, images: str, requests: str, manifest: str, settings: Mapping[str, Any],
          facets: Mapping[str, Any], image_root: str, columns: Mapping[str, str], cache_dir: str | None = None,
          threads: int = 1, adapter: str = "openai", reuse: str | None = None, reuse_labels: str | None = None
          ) -> None:
    from . import to_write

    fm, _, todo, _, ann, imgs = to_write(plan, annotations, images, columns, facets, reuse, reuse_labels)
    runner = _runner(settings, cache_dir, adapter)
    items = query_items(todo, ann, imgs, fm, runner.settings, image_root, Losses("queries"))
    build_requests(runner, items, requests=requests, manifest=manifest, threads=threads)


def submit(*, requests: str, submitted: str, settings: Mapping[str, Any], state_dir: str, benchmark: str,
           cache_dir: str | None = None, adapter: str = "openai") -> None:
    from ..providers.records import batch_metadata

    submit_requests(_runner(settings, cache_dir, adapter), requests=requests, submitted=submitted,
                    state_dir=state_dir, metadata=batch_metadata(benchmark, "queries", "all"))


def collect(*, plan: str, annotations: str, images: str, manifest: str, submitted: str, queries: str, losses: str,
            costs: str, settings: Mapping[str, Any], facets: Mapping[str, Any], image_root: str,
            columns: Mapping[str, str], state_dir: str, benchmark: str, cache_dir: str | None = None,
            adapter: str = "openai", reuse: str | None = None, reuse_labels: str | None = None) -> None:
    from ..providers.records import attach_ledger, batch_metadata
    from . import finish, to_write

    fm, plan_df, todo, imported, ann, imgs = to_write(plan, annotations, images, columns, facets, reuse,
                                                       reuse_labels)
    runner = _runner(settings, cache_dir, adapter)
    attach_ledger(runner, str(Path(state_dir) / "ledger.jsonl"))
    loss = Losses("queries")
    calls = 0

    def items() -> Iterator[Item]:
        """The items streamed; the first pass records the losses."""
        nonlocal calls
        calls += 1
        yield from query_items(todo, ann, imgs, fm, runner.settings, image_root,
                               loss if calls == 1 else Losses("queries"))

    with runner.ledger:
        answers = collect_results(runner, items, manifest=manifest, submitted=submitted,
                                  state_dir=state_dir, losses=loss,
                                  metadata=batch_metadata(benchmark, "queries", "all"),
                                  wait=bool(runner.settings["wait"]),
                                  poll_seconds=float(runner.settings["poll_seconds"]))
    written = answers_to_frame(answers, todo["query_id"].to_list(), f"{adapter}:{runner.llm.model}")
    finish(plan=plan_df, written=written, imported=imported, loss=loss, queries=queries, losses=losses,
           costs=costs, cost_rows=runner.cost_rows, ledger=runner.ledger, columns=columns)

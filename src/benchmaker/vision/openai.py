"""The ``openai`` vision adapter: one Responses-API (or Chat-Completions) request per image.

Sync mode runs inside the plain ``vision`` rule (:class:`OpenAIAnnotator`); batch mode runs as the
``vision_build`` → ``vision_submit`` → ``vision_collect`` rules (:func:`build`, :func:`submit`,
:func:`collect`). Both share the items, the cache, validation, retries and costs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, Mapping

import polars as pl

from ..formats import FacetModel, empty_table, read_table
from ..io import iter_jsonl
from ..logs import get_logger
from ..losses import Losses
from ..providers.batch_build import build_requests
from ..providers.batch_collect import collect_results
from ..providers.batch_submit import submit_requests
from ..providers.engine import Item, Runner
from ..providers.fastjson import dumps as fast_dumps
from ..providers.records import attach_ledger, batch_metadata, write_costs
from ..providers.runners import provider_runner
from ..providers.spec import ImageRef, RequestSpec, Text, fill_metadata, with_own_instructions
from .prompts import SCHEMA_NAME, check_answer, confidence_of, default_system_prompt, default_user_prompt, vision_schema

__all__ = ["OpenAIAnnotator", "vision_items", "answers_to_frame", "build", "submit", "collect"]

log = get_logger("vision.openai")


def _image_ref(row: Mapping[str, Any], image_root: str) -> ImageRef:
    return ImageRef(sha256=row["sha256"], path=os.path.join(image_root, row["image_id"]), url=row.get("image_url"),
                    width=int(row.get("width") or 0), height=int(row.get("height") or 0))


def vision_items(images: pl.DataFrame, fm: FacetModel, settings: Mapping[str, Any], image_root: str) -> Iterator[Item]:
    """One item per image row, streamed. Everything shared (prompt templates, the schema object, the
    check) is built once: the schema is then serialised and compiled once, not per request."""
    prompts = settings.get("prompts") or {}
    meta_cols = list(settings.get("metadata_columns") or []) or None
    system = with_own_instructions(default_system_prompt(fm), prompts.get("system"))
    user = prompts.get("user") or default_user_prompt(meta_cols)
    check = check_answer(fm)
    schema = vision_schema(fm)
    root = str(image_root)
    for row in images.iter_rows(named=True):
        yield Item(row["image_id"], RequestSpec(
            system=fill_metadata(system, row, meta_cols), parts=(Text(fill_metadata(user, row, meta_cols)),
                                                                 _image_ref(row, root)),
            schema=schema, schema_name=SCHEMA_NAME), check)


def answers_to_frame(answers: Mapping[str, dict], order: list[str], fm: FacetModel, annotator: str) -> pl.DataFrame:
    """Validated answers -> annotation rows (built column by column: fast for 100,000s of rows)."""
    cols: dict[str, list] = {"image_id": [], "summary": [], "tags": []}
    facet_cols: dict[str, list] = {n: [] for n in fm.names}
    conf: list[dict] = []
    for image_id in order:
        a = answers.get(image_id)
        if a is None:
            continue
        cols["image_id"].append(image_id)
        cols["summary"].append(str(a["summary"]).strip())
        tags = list(dict.fromkeys(t.strip() for t in a.get("tags", []) if isinstance(t, str) and t.strip()))
        cols["tags"].append(tags[: fm.max_tags])
        conf.append(confidence_of(a, fm))
        for n in fm.taxonomy:
            facet_cols[n].append(a[n])
        for n in fm.boolean:
            facet_cols[n].append(bool(a[n]))
    if not cols["image_id"]:
        return empty_table("annotations", fm)
    n_rows = len(cols["image_id"])
    data = {
        "image_id": pl.Series(cols["image_id"], dtype=pl.String),
        "summary": pl.Series(cols["summary"], dtype=pl.String),
        "tags": pl.Series(cols["tags"], dtype=pl.List(pl.String)),
        "annotator": pl.Series([annotator] * n_rows, dtype=pl.String),
        "confidence": pl.Series(conf, dtype=fm.confidence_dtype()) if fm.names
        else pl.Series([{}] * n_rows, dtype=pl.Struct({})),
    }
    for n in fm.taxonomy:
        data[n] = pl.Series(facet_cols[n], dtype=pl.String)
    for n in fm.boolean:
        data[n] = pl.Series(facet_cols[n], dtype=pl.Boolean)
    return pl.DataFrame(data)


def answer_row(image_id: str, a: Mapping[str, Any], fm: FacetModel, annotator: str) -> dict:
    tags = list(dict.fromkeys(t.strip() for t in a.get("tags", []) if isinstance(t, str) and t.strip()))
    row = {"image_id": image_id, "summary": str(a["summary"]).strip(), "tags": tags[: fm.max_tags],
           "annotator": annotator, "confidence": confidence_of(a, fm)}
    for n in fm.taxonomy:
        row[n] = a[n]
    for n in fm.boolean:
        row[n] = bool(a[n])
    return row


class AnswerSpill:
    """Annotation rows spilled as answers arrive (in any order) to part files of ``rows_per_part``
    consecutive item indexes each, then written part by part, in item order: each part is read,
    ordered and de-duplicated on its own and appended to the output, so memory stays bounded by one
    part however many answers a shard has. Each part holds a disjoint range of item indexes and
    polars writes JSON lines row by row, so the output is byte-identical to ordering and writing
    the whole table at once. ``ids``: the item ids in order (a column of the shard's table)."""

    MAX_OPEN = 64

    def __init__(self, path: str | Path, fm: FacetModel, annotator: str, ids: Any, rows_per_part: int = 10_000):
        import shutil

        self.dir, self.fm, self.annotator, self.ids = Path(path), fm, annotator, ids
        self.rows_per_part = int(rows_per_part)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._fhs: dict[int, Any] = {}
        self._parts: set[int] = set()

    def _fh(self, part: int):
        fh = self._fhs.get(part)
        if fh is None:
            if len(self._fhs) >= self.MAX_OPEN:          # close the least recently opened one
                self._fhs.pop(next(iter(self._fhs))).close()
            fh = self._fhs[part] = open(self.dir / f"{part:08d}.jsonl", "a", encoding="utf-8")  # noqa: SIM115
            self._parts.add(part)
        return fh

    def __call__(self, i: int, answer: Mapping[str, Any]) -> None:
        row = answer_row(self.ids[i], answer, self.fm, self.annotator)
        self._fh(i // self.rows_per_part).write(fast_dumps({"__i": i, **row}) + "\n")

    def _close(self) -> None:
        while self._fhs:
            self._fhs.popitem()[1].close()

    def _schema(self) -> dict:
        fm = self.fm
        schema = {"__i": pl.Int64, "image_id": pl.String, "summary": pl.String, "tags": pl.List(pl.String),
                  "annotator": pl.String, "confidence": fm.confidence_dtype() if fm.names else pl.Struct({})}
        return schema | {n: pl.String for n in fm.taxonomy} | {n: pl.Boolean for n in fm.boolean}

    def _part_frame(self, part: int) -> pl.DataFrame:
        path = self.dir / f"{part:08d}.jsonl"
        return (pl.scan_ndjson(path, schema=self._schema()).sort("__i", maintain_order=True)
                .unique("__i", keep="first", maintain_order=True).drop("__i").collect(engine="streaming"))

    def frames(self) -> Iterator[pl.DataFrame]:
        """The annotation rows, in item order, one part at a time (each part's file is removed)."""
        self._close()
        for part in sorted(self._parts):
            df = self._part_frame(part)
            (self.dir / f"{part:08d}.jsonl").unlink()
            if df.height:
                yield df

    def write(self, path: str, *, columns: Mapping[str, str] | None = None) -> int:
        """Validate and write the annotations file part by part (atomically); returns the rows."""
        from ..formats import to_disk_names, validate_table
        from ..io import atomic_path

        n = 0
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            for df in self.frames():
                df = validate_table(df, "annotations", facets=self.fm,
                                    source=f"annotations output {path} (rows {n + 1}..{n + df.height})")
                to_disk_names(df, columns).write_ndjson(fh)
                n += df.height
        self.dir.rmdir()
        return n

    def frame(self) -> pl.DataFrame:
        """The whole table at once (small shards and sync callers)."""
        frames = list(self.frames())
        self.dir.rmdir()
        return pl.concat(frames) if frames else empty_table("annotations", self.fm)


class OpenAIAnnotator:
    """Sync mode (the plain ``vision`` rule): bounded concurrency, cache, retries, costs. Other providers
    subclass it and override ``provider`` and ``answers`` (see vision/gemini.py)."""

    provider = "openai"
    stage, item_type = "vision", "image"   # the runner's (sync here, batch in _runner)

    def __init__(self, *, facets: FacetModel, settings: dict[str, Any], image_root: str, cache_dir: str | None,
                 threads: int = 1, client: Any = None):
        self.facets, self.image_root = facets, image_root
        self.runner = self.make_runner(dict(settings), cache_dir, client)
        self.settings = self.runner.settings
        self.name = f"{self.provider}:{self.runner.llm.model}"

    def make_runner(self, settings: dict[str, Any], cache_dir: str | None, client: Any):
        return provider_runner(self.provider, stage=self.stage, item_type=self.item_type, settings=settings,
                               cache_dir=cache_dir, client=client)

    def answers(self, items: list, losses: Losses) -> dict[str, dict]:
        if self.settings["mode"] == "batch":
            log.warning("vision.openai.mode is 'batch' but the plain vision rule runs: sending synchronously")
        return self.runner.run_sync(items, losses)

    @property
    def costs(self) -> list[dict]:
        return self.runner.cost_rows

    def annotate(self, images: pl.DataFrame, losses: Losses) -> pl.DataFrame:
        items = list(vision_items(images, self.facets, self.settings, self.image_root))
        answers = self.answers(items, losses)
        return answers_to_frame(answers, images["image_id"].to_list(), self.facets, self.name)


# -- batch mode: the three rules ----------------------------------------------------------------------
def _runner(settings, cache_dir, adapter: str = "openai") -> Runner:
    return provider_runner(adapter, stage=OpenAIAnnotator.stage, item_type=OpenAIAnnotator.item_type,
                           settings=dict(settings), cache_dir=cache_dir)


def build(*, images: str, requests: str, manifest: str, settings: Mapping[str, Any], facets: Mapping[str, Any],
          image_root: str, columns: Mapping[str, str], cache_dir: str | None = None, threads: int = 1,
          adapter: str = "openai") -> None:
    fm = FacetModel.from_config(facets)
    imgs = read_table("images", images, columns=columns)
    build_requests(_runner(settings, cache_dir, adapter), vision_items(imgs, fm, settings, image_root),
                   requests=requests, manifest=manifest, threads=threads)


def submit(*, requests: str, submitted: str, settings: Mapping[str, Any], state_dir: str, benchmark: str,
           shard: str = "all", cache_dir: str | None = None, adapter: str = "openai") -> None:
    submit_requests(_runner(settings, cache_dir, adapter), requests=requests, submitted=submitted,
                    state_dir=state_dir, metadata=batch_metadata(benchmark, "vision", shard))


def collect(*, images: str, manifest: str, submitted: str, annotations: str, losses: str, costs: str,
            settings: Mapping[str, Any], facets: Mapping[str, Any], image_root: str, columns: Mapping[str, str],
            state_dir: str, benchmark: str, shard: str = "all", cache_dir: str | None = None,
            adapter: str = "openai") -> None:
    fm = FacetModel.from_config(facets)
    imgs = read_table("images", images, columns=columns)
    runner = _runner(settings, cache_dir, adapter)
    loss = Losses("vision")
    # items are streamed (and made again only for retries): collect holds ids and keys, not requests
    items = lambda: vision_items(imgs, fm, settings, image_root)  # noqa: E731
    ids = imgs["image_id"]
    spill = AnswerSpill(Path(state_dir) / "answers.parts", fm, f"{adapter}:{runner.llm.model}", ids)
    attach_ledger(runner, str(Path(state_dir) / "ledger.jsonl"))
    cached_rows = Path(state_dir) / "costs.cached.part.jsonl"
    try:
        with open(cached_rows, "w", encoding="utf-8") as cost_fh, runner.ledger:
            runner.cost_sink = lambda row: cost_fh.write(fast_dumps(row) + "\n")   # streamed, not held
            collect_results(runner, items, manifest=manifest, submitted=submitted, state_dir=state_dir,
                            losses=loss, metadata=batch_metadata(benchmark, "vision", shard),
                            wait=bool(runner.settings["wait"]),
                            poll_seconds=float(runner.settings["poll_seconds"]), on_answer=spill, ids=ids)
        # written part by part in item order: the whole annotations table is never in memory
        n_ann = spill.write(annotations, columns=columns)
        loss.write(losses)
        write_costs(iter_jsonl(cached_rows), costs, runner.ledger)
    finally:
        cached_rows.unlink(missing_ok=True)
    log.info("vision collect: %d annotations, %d losses", n_ann, len(loss))

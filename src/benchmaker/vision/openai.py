"""The ``openai`` vision adapter: one Responses-API (or Chat-Completions) request per image.

Sync mode runs inside the plain ``vision`` rule (:class:`OpenAIAnnotator`); batch mode runs as the
``vision_build`` → ``vision_submit`` → ``vision_collect`` rules (:func:`build`, :func:`submit`,
:func:`collect`). Both share the items, the cache, validation, retries and costs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

import polars as pl

from ..formats import FacetModel, empty_table, read_table, write_table
from ..logs import get_logger
from ..losses import Losses
from ..providers import batch as pb
from ..providers.engine import Item, Runner
from ..providers.spec import ImageRef
from .prompts import check_answer, default_system_prompt, vision_schema, vision_spec

__all__ = ["OpenAIAnnotator", "vision_items", "answers_to_frame", "build", "submit", "collect", "write_costs"]

log = get_logger("vision.openai")


def _image_ref(row: Mapping[str, Any], image_root: str) -> ImageRef:
    return ImageRef(sha256=row["sha256"], path=str(Path(image_root) / row["image_id"]), url=row.get("image_url"),
                    width=int(row.get("width") or 0), height=int(row.get("height") or 0))


def vision_items(images: pl.DataFrame, fm: FacetModel, settings: Mapping[str, Any], image_root: str) -> Iterator[Item]:
    prompts = settings.get("prompts") or {}
    system = prompts.get("system") or default_system_prompt(fm)
    check = check_answer(fm)
    schema = vision_schema(fm)  # one object shared by every request: serialised and compiled once
    for row in images.iter_rows(named=True):
        yield Item(row["image_id"], vision_spec(row, _image_ref(row, image_root), fm, settings, system=system,
                                                schema=schema), check)


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
        c = a.get("confidence") or {}
        conf.append({n: float(c.get(n, 0.0)) for n in fm.names})
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


def write_costs(rows: list[dict], path: str | None) -> None:
    if not path:
        return
    if rows:
        write_table(pl.DataFrame(rows), "costs", path)
    else:
        write_table(empty_table("costs"), "costs", path)


class OpenAIAnnotator:
    """Sync mode (the plain ``vision`` rule): bounded concurrency, cache, retries, costs."""

    def __init__(self, *, facets: FacetModel, settings: dict[str, Any], image_root: str, cache_dir: str | None,
                 threads: int = 1, client: Any = None):
        self.facets, self.settings, self.image_root = facets, dict(settings), image_root
        self.runner = Runner(stage="vision", item_type="image", settings=self.settings, cache_dir=cache_dir,
                             client=client)
        self.name = f"openai:{self.runner.llm.model}"

    @property
    def costs(self) -> list[dict]:
        return self.runner.cost_rows

    def annotate(self, images: pl.DataFrame, losses: Losses) -> pl.DataFrame:
        if self.settings.get("mode", "batch") == "batch":
            log.warning("vision.openai.mode is 'batch' but the plain vision rule runs: sending synchronously")
        items = list(vision_items(images, self.facets, self.settings, self.image_root))
        answers = self.runner.run_sync(items, losses)
        return answers_to_frame(answers, images["image_id"].to_list(), self.facets, self.name)


# -- batch mode: the three rules ----------------------------------------------------------------------
def _runner(settings, cache_dir) -> Runner:
    return Runner(stage="vision", item_type="image", settings=dict(settings), cache_dir=cache_dir)


def build(*, images: str, requests: str, manifest: str, settings: Mapping[str, Any], facets: Mapping[str, Any],
          image_root: str, columns: Mapping[str, str], cache_dir: str | None = None, threads: int = 1,
          **_: Any) -> None:
    fm = FacetModel.from_config(facets)
    imgs = read_table("images", images, columns=columns)
    pb.build_requests(_runner(settings, cache_dir), vision_items(imgs, fm, settings, image_root),
                      requests=requests, manifest=manifest, threads=threads)


def batch_metadata(benchmark: str, stage: str, shard: str) -> dict[str, str]:
    return {"benchmaker": benchmark, "bm_stage": stage, "bm_shard": shard}


def submit(*, requests: str, submitted: str, settings: Mapping[str, Any], state_dir: str, benchmark: str,
           shard: str = "all", cache_dir: str | None = None, **_: Any) -> None:
    pb.submit_requests(_runner(settings, cache_dir), requests=requests, submitted=submitted, state_dir=state_dir,
                       metadata=batch_metadata(benchmark, "vision", shard))


def collect(*, images: str, manifest: str, submitted: str, annotations: str, losses: str, costs: str,
            settings: Mapping[str, Any], facets: Mapping[str, Any], image_root: str, columns: Mapping[str, str],
            state_dir: str, benchmark: str, shard: str = "all", cache_dir: str | None = None, **_: Any) -> None:
    fm = FacetModel.from_config(facets)
    imgs = read_table("images", images, columns=columns)
    runner = _runner(settings, cache_dir)
    loss = Losses("vision")
    items = list(vision_items(imgs, fm, settings, image_root))
    answers = pb.collect_results(runner, items, manifest=manifest, submitted=submitted, state_dir=state_dir,
                                 losses=loss, metadata=batch_metadata(benchmark, "vision", shard),
                                 wait=bool(settings.get("wait", True)),
                                 poll_seconds=float(settings.get("poll_seconds", 30)))
    ann = answers_to_frame(answers, imgs["image_id"].to_list(), fm, f"openai:{runner.llm.model}")
    write_table(ann, "annotations", annotations, columns=columns, facets=fm)
    loss.write(losses)
    write_costs(runner.cost_rows, costs)
    log.info("vision collect: %d annotations, %d losses", ann.height, len(loss))

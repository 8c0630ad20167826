"""The ``rerank`` system: a vision-language model reranks the top ``k`` of another system's ranking
(docs/evaluate.md), through the provider layer (response cache, sync or Batch API, cost ledger)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ..logs import get_logger
from ..losses import Losses
from ..settings_schema import LLM, default
from .data import Bench
from .runs import sort_run

__all__ = ["RERANK_SYSTEM", "make_rerank_runner", "rerank_run"]

log = get_logger("evaluate")


RERANK_SYSTEM = (
    "You rank images for an image search engine. Given a search query and candidate images, each labelled "
    "with a key, order ALL keys from the image that best matches the query to the one that matches it least. "
    "Judge only what is visible in the images. Answer with JSON: {\"ranking\": [keys, best first]}.")


def _rerank_spec(query_text: str, cands: Sequence[tuple[str, Any]]):
    from ..providers.spec import RequestSpec, Text

    keys = [k for k, _ in cands]
    parts: list[Any] = [Text(f"Search query: {query_text}\nCandidates ({len(keys)}):")]
    for key, ref in cands:
        parts += [Text(f"Key {key}:"), ref]
    schema = {"type": "object", "additionalProperties": False, "required": ["ranking"],
              "properties": {"ranking": {"type": "array", "items": {"type": "string", "enum": keys},
                                         "minItems": len(keys), "maxItems": len(keys)}}}
    return RequestSpec(system=RERANK_SYSTEM, parts=tuple(parts), schema=schema, schema_name="rerank")


def _check_permutation(keys: Sequence[str]):
    want = sorted(keys)

    def check(answer: dict) -> str | None:
        got = answer.get("ranking")
        if not isinstance(got, list) or sorted(got) != want:
            return f"ranking must list each of the {len(want)} keys exactly once"
        return None

    return check


def make_rerank_runner(system: Mapping[str, Any], cache_dir: str | None, client: Any = None):
    """The provider layer's runner for this reranker (openai/compatible or gemini). ``llm.mode`` is
    ``sync`` unless the system sets ``mode: batch`` (the provider's Batch API: half price, slower)."""
    from ..providers.runners import provider_runner

    settings = {"mode": default(f"{LLM}.mode", under="rerank"), **dict(system.get("llm") or {})}
    return provider_runner(system["provider"], stage="evaluate", item_type="query", settings=settings,
                           cache_dir=cache_dir, client=client)


def _rerank_answers(runner: Any, items: list, losses: Losses, *, batch_dir: str | None,
                    benchmark: str) -> dict[str, dict]:
    """Sync requests, or (``mode: batch``) the shared build -> submit -> poll -> collect of
    :func:`benchmaker.providers.batch.run_batch`, resumable from ``batch_dir`` (its journal never
    submits a request twice); cache misses only either way."""
    s = runner.settings
    if s["mode"] != "batch":
        return runner.run_sync(items, losses)
    from ..providers.batch import run_batch

    if batch_dir is None:
        import tempfile

        batch_dir = tempfile.mkdtemp(prefix="bm-evaluate-batches-")
        log.warning("evaluate: batch mode without a batch state folder: state in %s, an interrupted run "
                    "cannot resume", batch_dir)
    return run_batch(runner, items, losses, state_dir=batch_dir, wait=bool(s["wait"]),
                     poll_seconds=float(s["poll_seconds"]), benchmark=benchmark)


def rerank_run(system: Mapping[str, Any], base: pl.DataFrame, bench: Bench, *, image_root: str | None,
               cache_dir: str | None, losses: Losses, client: Any = None, batch_dir: str | None = None,
               ledger: str | None = None, benchmark: str = "benchmaker") -> tuple[pl.DataFrame, dict, Any]:
    """Rerank the first ``k`` images of each query's base ranking (corpus scope: of the whole corpus
    ranking; pool scope: of the judged pool's ranking). Reranked images get scores above every other
    image, in the model's order; the rest keep the base order below. A query whose answer fails keeps its
    base order and is written to the losses.

    Requests go through the provider layer: the response cache (never paid twice), sync or
    ``mode: batch`` (:func:`_rerank_answers`), and, with ``ledger``, every paid request on record in
    that crash-safe cost ledger as it arrives (:mod:`benchmaker.providers.ledger`). Returns the run,
    its timing and the runner (its ``cost_rows``: the rows not in the ledger; ``ledger``: closed)."""
    from ..providers.engine import Item
    from ..providers.spec import ImageRef
    from .runs import pool_view

    k = int(system["k"])
    scope = system["scope"]
    base = sort_run(pool_view(base, bench.qrels) if scope == "pool" else base).drop("rank")
    img = {r["image_id"]: r for r in bench.images.select("image_id", "sha256", "image_url", "width", "height")
           .iter_rows(named=True)}
    texts = dict(bench.queries.iter_rows())
    runner = make_rerank_runner(system, cache_dir, client)
    items, keys_of = [], {}
    tops = base.group_by("query_id", maintain_order=True).head(k)
    for qid, ids in tops.group_by("query_id", maintain_order=True).agg("image_id").iter_rows():
        cands = []
        for j, iid in enumerate(ids):
            r = img.get(iid)
            if r is None:
                continue
            ref = ImageRef(sha256=r["sha256"], path=str(Path(image_root or ".") / iid), url=r.get("image_url"),
                           width=int(r.get("width") or 0), height=int(r.get("height") or 0))
            cands.append((f"c{j + 1}", ref))
        if len(cands) < 2:
            continue
        keys_of[qid] = {f"c{j + 1}": iid for j, iid in enumerate(ids)}
        items.append(Item(qid, _rerank_spec(texts.get(qid, ""), cands), _check_permutation([c for c, _ in cands])))
    if ledger:
        from ..providers.ledger import CostLedger

        runner.ledger = CostLedger(ledger)
    mode = runner.settings["mode"]
    t0 = time.perf_counter()
    try:
        answers = _rerank_answers(runner, items, losses, batch_dir=batch_dir, benchmark=benchmark) if items else {}
    finally:
        if runner.ledger is not None:
            runner.ledger.close()
    t_query = time.perf_counter() - t0
    top = float(base["score"].max()) if base.height else 0.0
    new_rows = []
    for qid, ans in answers.items():
        order = ans["ranking"]
        for pos, key in enumerate(order):
            new_rows.append((qid, keys_of[qid][key], top + 1.0 + (len(order) - pos)))
    if new_rows:
        re_df = pl.DataFrame(new_rows, schema=["query_id", "image_id", "score"], orient="row")
        base = pl.concat([re_df, base.join(re_df, on=["query_id", "image_id"], how="anti")])
    timing = {"query_seconds": round(t_query, 4), "reranked_queries": len(answers), "requested": len(items),
              "mode": mode, "requests_sent": runner.sent, "model": runner.llm.model}
    return base, timing, runner

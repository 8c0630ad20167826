"""Retrieval systems of the ``evaluate`` target: one job per configured system (docs/evaluate.md).

Kinds:

* ``clip``: any open_clip model (architecture + tag or file, ``hf-hub:``, ``local-dir:``), loaded and
  cached exactly as the similarity stage does (:mod:`benchmaker.similarity`): every image is encoded
  once per model identity, through the shared embedding cache. A system with the similarity stage's
  own model (``reuses_similarity_embeddings``) loads nothing: it ranks the embeddings files that
  stage wrote (:func:`reused_clip_run`).
* ``bm25``: BM25 (the ``bm25s`` library) over each image's annotation text (summary and tags). It reads
  the annotator's output, which is what the judge labelled from: it *sees what the judge saw*.
* ``hybrid``: fusion of other systems' runs with ``ranx.fuse`` (``rrf`` by default; or a normalised
  weighted sum, ``method: wsum`` + ``norm: min-max`` ...).
* ``rerank``: a vision-language model reranks the top ``k`` of another system's run through the
  project's provider layer (OpenAI / OpenAI-compatible / Gemini; response cache, retries, costs).
* ``trec_run``: an external system given as a TREC run file (ids as written by ``trec_id``).
* ``http``: a running search service queried over HTTP (:mod:`.live`).
* ``milvus``: a Milvus collection queried directly (:mod:`.milvus`).

Every kind takes ``version`` (the system's version or deployment tag): recorded with the run
(``system_version``) and compared by ``benchmaker compare`` (:mod:`.compare`).

Each job writes ``runs/<name>.trec`` (see :mod:`.runs`), ``runs/<name>.json`` (kind, scopes, timings,
cost) and its losses and costs files.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..evaluate_settings import (  # noqa: F401 - re-exported: the kinds and their settings are declared there
    COLLECTION_KINDS,
    COMMON,
    DEFAULTS,
    KINDS,
    LIVE_KINDS,
    LIVE_RUNTIME,
    MODEL_KINDS,
    NAME_RE,
    check_systems,
    has_corpus_scope,
    reuses_similarity_embeddings,
    runs_model,
    system_settings,
)
from ..formats import FormatError, read_table
from ..ids import trec_id
from ..io import as_paths, atomic_write_text
from ..logs import get_logger
from ..losses import Losses
from .data import Bench, load_bench
from .live import http_run
from .milvus import milvus_run
from .rerank import rerank_run
from .runs import empty_run, rank_dense, rank_scored, read_run, set_numba_cache, trec_eval_ties, write_run

__all__ = [
    "KINDS",
    "LIVE_KINDS",
    "LIVE_RUNTIME",
    "MODEL_KINDS",
    "annotation_texts",
    "bm25_run",
    "check_systems",
    "clip_run",
    "external_run",
    "has_corpus_scope",
    "hybrid_run",
    "rerank_run",
    "reused_clip_run",
    "reuses_similarity_embeddings",
    "run",
    "runs_model",
    "sees_judge_text",
    "system_settings",
]

log = get_logger("evaluate")

def sees_judge_text(system: Mapping[str, Any], systems: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a system reads the annotator's text (summaries, tags) that the judge labelled from."""
    by = {s["name"]: s for s in systems}
    kind = system["kind"]
    if kind == "bm25":
        return True
    if kind == "hybrid":
        return any(sees_judge_text(by[n], systems) for n in system["systems"] if n in by)
    if kind == "rerank":
        return system["base"] in by and sees_judge_text(by[system["base"]], systems)
    return bool(system.get("sees_judge_text"))


# ------------------------------------------------------------------------------------------------ kinds
def clip_run(system: Mapping[str, Any], bench: Bench, *, image_root: str | None, cache_dir: str | None,
             losses: Losses, threads: int = 1) -> tuple[pl.DataFrame, dict]:
    from ..similarity.cache import EmbeddingCache
    from ..similarity.embed import embed_image_table
    from ..similarity.loads import load_counted

    system = system_settings(system)          # a library caller may pass a partial system
    clip = load_counted(system["model"], system.get("pretrained"), device=system["device"],
                        precision=system["precision"], purpose=f"evaluate system {system['name']}")
    if clip.device == "cpu" and threads:
        import torch

        torch.set_num_threads(max(1, int(threads)))
    cache = EmbeddingCache.for_model(cache_dir, clip) if cache_dir else None
    t0 = time.perf_counter()
    table = embed_image_table(bench.images, clip, image_root=image_root, cache=cache, losses=losses,
                              batch_size=int(system["batch_size"]),
                              num_workers=int(system["num_workers"]), desc=f"evaluate {system['name']}")
    t_index = time.perf_counter() - t0
    encoded = table.height - (cache.hits if cache is not None else 0)
    rate = encoded / t_index if encoded > 0 and t_index > 0 else None
    if rate is None and table.height:  # everything came from the cache: time a small fresh sample
        rate = _encode_rate(clip, bench.images, image_root, int(system["batch_size"]))
    t1 = time.perf_counter()
    q_emb, _ = clip.encode_texts(bench.queries["query_text"].to_list())  # fixed-shape passes
    doc_ids = table["image_id"].to_list()
    docs = table["embedding"].to_numpy() if table.height else np.zeros((0, clip.embed_dim), np.float32)
    run = rank_dense(q_emb, docs, bench.query_ids, doc_ids, bench.pools(doc_ids), int(system["depth"]),
                     collection=bench.collection(doc_ids))
    t_query = time.perf_counter() - t1
    timing = {"images_indexed": table.height, "images_encoded": max(0, encoded),
              "index_seconds": round(t_index, 4),
              "images_per_s": round(rate, 2) if rate else None, "images_per_s_from_sample": encoded <= 0,
              "query_seconds": round(t_query, 4), "device": clip.device, "model_id": clip.model_id}
    return run, timing


def reused_clip_run(system: Mapping[str, Any], bench: Bench, *, image_embeddings: Sequence[str],
                    query_embeddings: str, embed_losses: Sequence[str] | None, losses: Losses,
                    columns: Mapping[str, str] | None = None) -> tuple[pl.DataFrame, dict]:
    """A clip system whose model is the similarity stage's (:func:`reuses_similarity_embeddings`): the
    run of :func:`clip_run` from the files ``embed_images`` and ``embed_queries`` wrote (docs/similarity.md),
    with no model loaded and nothing encoded (no torch). The same query and image embeddings in the
    same order, so the same run. Images without an embedding go to ``losses`` with the reason the
    embed losses give (as ``clip_run`` would have found it), else ``image_not_embedded``."""
    from ..similarity.embed import read_embeddings
    from ..similarity.score import gather_image_embeddings, image_loss_reasons

    t0 = time.perf_counter()
    qe, qmeta = read_embeddings(query_embeddings, columns=columns, kind="query")  # checks kind, dim, vectors
    if "query_text" not in qe.columns:
        raise FormatError(f"{query_embeddings}: missing column 'query_text' (has {qe.columns})")
    # the texts clip_run would encode: every benchmark query, with the same text
    mine = bench.queries.join(qe.select("query_id", pl.col("query_text").alias("_text"), "embedding"),
                              on="query_id", how="left", maintain_order="left")
    bad = mine.filter(pl.col("_text").is_null() | (pl.col("_text") != pl.col("query_text")))
    if bad.height:
        raise FormatError(f"{query_embeddings}: query {bad['query_id'][0]!r} is missing or has another text than "
                          f"in qrels.jsonl ({bad.height} such queries); rerun embed_queries")
    model_id = qmeta.get("model_id")
    images = gather_image_embeddings(list(image_embeddings), bench.images["image_id"], model_id=model_id,
                                     columns=columns)
    images = images.unique("image_id", keep="first", maintain_order=True)
    table = bench.images.select("image_id").join(images, on="image_id", how="inner", maintain_order="left")
    dim = int(qmeta["dim"])
    q_emb = np.asarray(mine["embedding"].to_numpy(), dtype=np.float32) if mine.height else \
        np.zeros((0, dim), np.float32)
    docs = np.asarray(table["embedding"].to_numpy(), dtype=np.float32) if table.height else \
        np.zeros((0, dim), np.float32)
    if docs.ndim != 2 or docs.shape[1] != dim:
        raise FormatError(f"the image embeddings files: embeddings are not all {dim}-d vectors as the queries' "
                          f"(images {docs.shape}); rerun the embed rules")
    lost = bench.images.select("image_id").join(table.select("image_id"), on="image_id", how="anti",
                                                maintain_order="left")
    if lost.height:
        reasons = dict(image_loss_reasons(list(embed_losses or [])).select(
            "image_id", pl.struct("reason", "detail")).iter_rows())
        for image_id in lost["image_id"].to_list():
            why = reasons.get(image_id) or {"reason": "image_not_embedded",
                                             "detail": "no row in the similarity stage's image embeddings files"}
            losses.add("image", image_id, why["reason"], why["detail"])
    t_index = time.perf_counter() - t0
    t1 = time.perf_counter()
    doc_ids = table["image_id"].to_list()
    run = rank_dense(q_emb, docs, bench.query_ids, doc_ids, bench.pools(doc_ids), int(system["depth"]),
                     collection=bench.collection(doc_ids))
    t_query = time.perf_counter() - t1
    # images_per_s: null, this job encoded nothing (embed_images' logs time the encoding);
    # query_seconds: the ranking only (embed_queries encoded the texts)
    timing = {"images_indexed": table.height, "images_encoded": 0, "index_seconds": round(t_index, 4),
              "images_per_s": None, "images_per_s_from_sample": False, "query_seconds": round(t_query, 4),
              "embeddings": "similarity stage", "device": None, "model_id": model_id,
              # how the embeddings were computed (device kind, precision, pass size, torch)
              "numerics": {"queries": qmeta.get("numerics") or None, "images": _numerics(image_embeddings)}}
    log.info("evaluate %s: ranked the similarity stage's embeddings of %d images and %d queries (%s): "
             "no model in this job, nothing encoded", system["name"], table.height, len(q_emb), model_id)
    return run, timing


def _numerics(paths: Sequence[str]) -> list[str]:
    """The distinct ``benchmaker.numerics`` of embeddings files (their parquet metadata only)."""
    import pyarrow.parquet as pq

    found = {(pq.read_metadata(p).metadata or {}).get(b"benchmaker.numerics", b"").decode() for p in paths}
    return sorted(n for n in found if n)


def _encode_rate(clip, images: pl.DataFrame, image_root: str | None, batch_size: int, n: int = 64) -> float | None:
    """Images per second of decoding + encoding a sample of ``n`` images (no cache), after one warm-up batch."""
    from ..similarity.embed import image_paths, iter_image_batches

    paths = image_paths(images.head(n), image_root)
    if not paths:
        return None
    for _ in iter_image_batches(clip, paths[:2], batch_size=2, num_workers=0):
        pass
    t0 = time.perf_counter()
    done = sum(len(idx) for idx, _, _ in iter_image_batches(clip, paths, batch_size=min(batch_size, n),
                                                            num_workers=0))
    dt = time.perf_counter() - t0
    return done / dt if done and dt > 0 else None


def annotation_texts(annotations: pl.DataFrame, fields: Sequence[str]) -> pl.DataFrame:
    """``image_id, text``: the annotation fields joined by spaces (lists joined, facet values included)."""
    parts = []
    for f in fields:
        if f not in annotations.columns:
            raise FormatError(f"bm25 field {f!r} is not an annotations column (has {annotations.columns})")
        dt = annotations.schema[f]
        col = pl.col(f)
        if isinstance(dt, pl.List):
            col = col.cast(pl.List(pl.String)).list.join(" ")
        else:
            col = col.cast(pl.String)
        parts.append(col.fill_null(""))
    return annotations.select("image_id", pl.concat_str(parts, separator=" ").alias("text"))


def bm25_run(system: Mapping[str, Any], bench: Bench, annotations: pl.DataFrame) -> tuple[pl.DataFrame, dict]:
    import bm25s

    corpus = annotation_texts(annotations, system["fields"]).join(
        bench.images.select("image_id"), on="image_id", how="semi").sort("image_id")
    doc_ids = corpus["image_id"].to_list()
    t0 = time.perf_counter()
    tokens = bm25s.tokenize(corpus["text"].to_list(), stopwords="en", show_progress=False)
    retriever = bm25s.BM25(k1=float(system["k1"]), b=float(system["b"]))
    retriever.index(tokens, show_progress=False)
    t_index = time.perf_counter() - t0
    t1 = time.perf_counter()
    q_tokens = bm25s.tokenize(bench.queries["query_text"].to_list(), stopwords="en", return_ids=False,
                              show_progress=False)
    n = len(doc_ids)

    def chunks(size: int = 64):
        for start in range(0, len(q_tokens), size):
            block = q_tokens[start:start + size]
            scores = np.zeros((len(block), n), dtype=np.float32)
            for j, toks in enumerate(block):
                if toks and n:
                    scores[j] = retriever.get_scores(list(toks))
            yield np.arange(start, start + len(block)), scores

    run = rank_scored(chunks(), bench.query_ids, doc_ids, bench.pools(doc_ids), int(system["depth"]),
                      collection=bench.collection(doc_ids))
    t_query = time.perf_counter() - t1
    return run, {"images_indexed": n, "index_seconds": round(t_index, 4),
                 "images_per_s": round(n / t_index, 2) if t_index > 0 and n else None,
                 "query_seconds": round(t_query, 4)}


def hybrid_run(system: Mapping[str, Any], runs: Sequence[str], bench: Bench) -> tuple[pl.DataFrame, dict]:
    from ranx import Run, fuse

    from .runs import RanxIds, to_ranx_run

    frames = [read_run(p) for p in runs]
    # fixed-width codes: ranx's compiled fusion is the same for every benchmark (RanxIds, warm.py)
    ids = RanxIds(bench.query_ids, sorted({i for f in frames for i in f["image_id"].to_list()}))
    parts = [to_ranx_run(f, Path(p).stem, bench.query_ids, ids) for f, p in zip(frames, runs)]
    params = {"weights": list(system["weights"])} if system.get("weights") is not None else None
    kw = {"norm": system.get("norm"), "method": system.get("method") or DEFAULTS["hybrid"]["method"], "params": params}
    # warm-up on a one-query run: ranx's numba compilation is not the system's query cost
    tiny = [Run({ids.query("q"): {ids.image("d"): 1.0, ids.image("e"): 0.5}}, name=f"w{i}")
            for i in range(len(parts))]
    fuse(tiny, **kw)
    t0 = time.perf_counter()
    fused: Run = fuse(parts, **kw)
    q_of, d_of = ids.decode()
    rows = [(q_of[q], d_of[d], float(s)) for q, docs in fused.to_dict().items() for d, s in docs.items()]
    run = pl.DataFrame(rows, schema=["query_id", "image_id", "score"], orient="row") if rows else empty_run()
    return run, {"query_seconds": round(time.perf_counter() - t0, 4), "fused": [Path(p).stem for p in runs]}


def external_run(system: Mapping[str, Any], bench: Bench, losses: Losses) -> tuple[pl.DataFrame, dict]:
    run = read_run(system["path"])
    known_q = set(bench.query_ids)
    known_d = set(bench.images["image_id"].to_list())
    _check_matches(run, "query_id", known_q, system["path"], "query")
    _check_matches(run, "image_id", known_d, system["path"], "image")
    bad_q = run.filter(~pl.col("query_id").is_in(list(known_q)))
    bad_d = run.filter(~pl.col("image_id").is_in(list(known_d)))
    for q in bad_q["query_id"].unique().sort().to_list():
        losses.add("query", q, "unknown_query", f"{system['path']}: query id not in the benchmark")
    for d in bad_d["image_id"].unique().sort().to_list():
        losses.add("image", d, "unknown_image", f"{system['path']}: image id not in the benchmark corpus")
    if bad_q.height or bad_d.height:
        log.warning("evaluate %s: %d lines with unknown query ids and %d with unknown image ids dropped "
                    "(losses file)", system["name"], bad_q.height, bad_d.height)
    run = run.filter(pl.col("query_id").is_in(list(known_q)) & pl.col("image_id").is_in(list(known_d)))
    # ties as trec_eval breaks them in the user's file, so the leaderboard is trec_eval's number on it
    return trec_eval_ties(run), {}


def _check_matches(run: pl.DataFrame, col: str, known: set[str], path: str, what: str) -> None:
    """A run none of whose query (or image) ids is the benchmark's was made for another benchmark or
    version: scoring it would give 0 everywhere, so it is an error showing both kinds of ids."""
    ids = run[col].unique().sort().to_list()
    if not ids or not known.isdisjoint(ids):
        return
    where = ("this benchmark's queries (hf_dataset/trec/qrels.txt, beir/queries.jsonl)" if what == "query"
             else "this benchmark's images (image paths under paths.image_root, hf_dataset/beir/corpus.jsonl)")
    raise FormatError(
        f"{path}: none of the {len(ids)} {what} ids of the run is one of this benchmark's (the run has "
        f"{', '.join(repr(trec_id(x)) for x in ids[:3])}; the benchmark has "
        f"{', '.join(repr(trec_id(x)) for x in sorted(known)[:3])}): the run was made for another benchmark "
        f"or version. Run the system on {where}, ids written with benchmaker.ids.trec_id.")


# ------------------------------------------------------------------------------------------------ stage
def _write_costs(runner: Any, costs: str, timing: dict[str, Any]) -> float:
    """The system's cost file: every paid request to date (the ledger's, across reruns: what this system
    has cost) plus this run's answers from the response cache (cost 0); an empty one without a provider
    runner. Adds this run's ``paid_requests`` and ``cost_usd_last_run`` to ``timing``; returns the
    spend to date."""
    from ..formats import empty_table, write_table

    if runner is None:
        write_table(empty_table("costs"), "costs", costs)
        return 0.0
    from ..providers.ledger import write_cost_file

    write_cost_file(costs, runner.ledger, runner.cost_rows)
    led = runner.ledger
    if led is not None:
        paid = list(led.rows())
        now = [r for r in paid if r.get("run") == led.run]
    else:
        paid = now = [r for r in runner.cost_rows if not r.get("cached")]
    timing["paid_requests"] = len(now)
    timing["cost_usd_last_run"] = round(sum(float(r.get("cost_usd") or 0.0) for r in now), 6)
    return round(sum(float(r.get("cost_usd") or 0.0) for r in paid), 6)


def run(*, system: Mapping[str, Any], qrels: str, images: str, run_file: str, meta: str, losses: str,
        costs: str, annotations: str | None = None, component_runs: Sequence[str] | None = None,
        external: str | None = None, systems: Sequence[Mapping[str, Any]] | None = None,
        image_embeddings: Sequence[str] | None = None, query_embeddings: str | None = None,
        embed_losses: Sequence[str] | None = None,
        image_root: str | None = None, cache_dir: str | None = None, llm_cache_dir: str | None = None,
        columns: Mapping[str, str] | None = None, facets: Mapping[str, Any] | None = None,
        version: str | None = None, threads: int = 1, client: Any = None, batch_dir: str | None = None,
        ledger: str | None = None, benchmark: str = "benchmaker", numba_cache_dir: str | None = None,
        transport: Any = None) -> dict:
    """Stage ``evaluate_system`` / ``evaluate_model``: one system's run + its metadata.

    Rerankers only: ``batch_dir`` (Batch API state, ``llm.mode: batch``), ``ledger`` (crash-safe
    record of every paid request), ``benchmark`` (batch metadata), ``numba_cache_dir`` (ranx's JIT
    cache, for hybrid's ``ranx.fuse``). A clip system with the similarity stage's model
    (``reuses_similarity_embeddings``): ``image_embeddings``, ``query_embeddings``, ``embed_losses``,
    that stage's files, ranked without a model (:func:`reused_clip_run`). ``system`` holds every
    setting, runtime knobs included (the rule compares only its ``triggers`` param). Live systems
    (http, milvus): ``llm_cache_dir`` (the http answer cache, ``<llm_cache_dir>/http``), ``client``
    (a MilvusClient) / ``transport`` (an httpx2 transport) for tests."""
    set_numba_cache(numba_cache_dir)
    from ..formats import FacetModel

    s = system_settings(system, system.get("depth"))
    # the rule passes this system only (so editing another system never reruns it), with its derived
    # sees_judge_text; a library caller may pass every system instead
    sees = sees_judge_text(s, [system_settings(x) for x in systems]) if systems else bool(s.get("sees_judge_text"))
    bench = load_bench(qrels, images, columns)
    loss = Losses("evaluate")
    runner = None  # a reranker's provider runner (its cost rows and ledger)
    t0 = time.perf_counter()
    kind = s["kind"]
    if kind == "clip" and query_embeddings:
        result, timing = reused_clip_run(s, bench, image_embeddings=as_paths(image_embeddings),
                                         query_embeddings=query_embeddings, embed_losses=as_paths(embed_losses),
                                         losses=loss, columns=columns)
    elif kind == "clip":
        result, timing = clip_run(s, bench, image_root=image_root, cache_dir=cache_dir, losses=loss, threads=threads)
    elif kind == "bm25":
        fm = FacetModel.from_config(facets) if facets else None
        ann = read_table("annotations", annotations, columns=columns, facets=fm)
        result, timing = bm25_run(s, bench, ann)
    elif kind == "hybrid":
        result, timing = hybrid_run(s, list(component_runs or []), bench)
    elif kind == "rerank":
        base = read_run((component_runs or [None])[0])
        result, timing, runner = rerank_run(s, base, bench, image_root=image_root, cache_dir=llm_cache_dir,
                                            losses=loss, client=client, batch_dir=batch_dir, ledger=ledger,
                                            benchmark=benchmark)
    elif kind == "http":
        result, timing = http_run(s, bench, cache_dir=llm_cache_dir, losses=loss, transport=transport)
    elif kind == "milvus":
        result, timing = milvus_run(s, bench, losses=loss, threads=threads, client=client)
    else:
        # `path` as configured: in a pod the staged copy (input `external`) is linked there
        # (benchmaker.jobpaths), so the leaderboard and losses name the user's file, never a pod's
        result, timing = external_run(s, bench, loss)
    seconds = time.perf_counter() - t0
    scopes = ["pool", "corpus"] if has_corpus_scope(s) else ["pool"]
    nq = bench.queries.height
    q_sec = timing.get("query_seconds")
    timing.setdefault("query_latency_ms", round(1000 * q_sec / nq, 4) if q_sec is not None and nq else None)
    lines = write_run(result, run_file, s["name"])
    cost_usd = _write_costs(runner, costs, timing)
    record = {"name": s["name"], "kind": kind, "scopes": scopes, "depth": int(s["depth"]),
              "sees_judge_text": sees, "queries": nq, "run_lines": lines,
              # clip, bm25: the run also holds the judged collection's top depth (runs.rank_scored)
              "collection_depth": int(s["depth"]) if kind in COLLECTION_KINDS else None,
              "seconds": round(seconds, 4), "timing": timing,
              "cost_usd": cost_usd, "cost_usd_last_run": timing.get("cost_usd_last_run", 0.0), "losses": len(loss),
              "settings": {k: v for k, v in s.items() if k not in ("llm", *LIVE_RUNTIME)}, "version": version,
              # the system's own version / deployment tag (config key `version`), compared by `benchmaker compare`
              "system_version": None if s.get("version") is None else str(s["version"])}
    if kind == "rerank":
        record["settings"]["llm_model"] = (s.get("llm") or {}).get("model")
    atomic_write_text(meta, json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    loss.write(losses)
    log.info("evaluate %s (%s): %d run lines for %d queries in %.1f s -> %s", s["name"], kind, lines, nq, seconds,
             run_file)
    return record

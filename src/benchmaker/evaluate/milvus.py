"""The ``milvus`` system: a Milvus collection queried directly (docs/evaluate.md, "Live systems").

The query text is encoded by an open_clip model (loaded as the ``clip`` kind loads it) and searched in
the collection's vector field, the way imsearch_eval's ``MilvusQuery.vector_query`` searches (COSINE,
``MilvusClient.search``), without its bugs:

* the image id field is requested (``output_fields``), so every hit says which image it is (the adapter
  once asked for the vector only, so its rows carried no id and scored 0);
* search parameters are the config's (``search_params``, given to the index actually built: ``ef`` for
  HNSW, ``nprobe`` for IVF), not a hard-coded ``nprobe`` for every index;
* a hit without a distance is an error, never a score of 0; a failed search raises (nothing is scored
  as an empty answer); several objects of one image (Sage's loaders store one per (query, image) row)
  are grouped by the id field (``group_by_field``), so an image takes one place, at its best score;
* L2 distances (lower is better) are negated; COSINE and IP are similarities.

With ``legs`` the search is the adapter's hybrid (``clip_hybrid_query``): one ``AnnSearchRequest`` per
leg (a vector field searched with the query embedding, or ``text: true``: a BM25 sparse field searched
with the query text), fused by ``WeightedRanker`` over the legs' weights (Sage's production H: image
0.455, caption 0.195, BM25 0.35).

Beside the top ``depth`` of the collection, each query's judged pool is searched with a filter on the
id field (``score_pools``), so the pool view of the run is exact, as for the built-in systems.

Latency: with ``batch_size: 1`` (the default) each query's top-``depth`` search is its own call, timed
alone, so ``latency_ms_p50``/``p95``/``mean``/``max`` are per-query measurements; with a larger
``batch_size`` the calls carry several queries, no query can be timed, and the percentiles are null
(``search_calls`` and ``search_call_ms_mean`` say what was measured instead). ``requests_sent``
counts every search call, the pool searches included.

:func:`index_embeddings` loads the benchmark's CLIP image embeddings into a collection (the tests' and
the docs' recipe).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from ..errors import ConfigError
from ..evaluate_settings import MAX_LIMIT, MILVUS_DEFAULTS, check_milvus  # noqa: F401 - re-exported
from ..logs import get_logger
from ..losses import Losses
from .data import Bench
from .live import latency_summary
from .runs import empty_run

__all__ = ["MILVUS_DEFAULTS", "check_milvus", "connect", "index_embeddings", "milvus_run"]

log = get_logger("evaluate")

def connect(s: Mapping[str, Any]):
    """A ``MilvusClient`` for the system (the token from the environment variable ``token_env``)."""
    from pymilvus import MilvusClient

    kw: dict[str, Any] = {}
    if s.get("token_env"):
        tok = os.environ.get(str(s["token_env"]))
        if not tok:
            raise ConfigError(f"evaluate system {s.get('name')!r}: environment variable {s['token_env']} (token_env) "
                              f"is not set; export the Milvus token (user:password or an API key)")
        kw["token"] = tok
    if s.get("db_name"):
        kw["db_name"] = str(s["db_name"])
    uri = str(s.get("uri") or s.get("db_file"))
    return MilvusClient(uri=uri, timeout=float(s.get("timeout_s") or MILVUS_DEFAULTS["timeout_s"]), **kw)


def index_embeddings(client: Any, collection: str, embeddings: pl.DataFrame, *, id_field: str = "image_id",
                     anns_field: str = "vector", metric: str = "COSINE", drop: bool = False) -> int:
    """Create ``collection`` (auto primary key, ``id_field`` VARCHAR, ``anns_field`` FLOAT_VECTOR, a FLAT
    index with ``metric``) and insert ``embeddings`` (``image_id``, ``embedding``: e.g. the benchmark's
    ``embeddings/images/*.parquet`` read with :func:`benchmaker.similarity.embed.read_embeddings`)."""
    from pymilvus import DataType

    if client.has_collection(collection):
        if not drop:
            raise ValueError(f"Milvus collection {collection!r} exists (drop=True replaces it)")
        client.drop_collection(collection)
    dim = len(embeddings["embedding"][0])
    schema = client.create_schema(auto_id=True, enable_dynamic_field=False)
    schema.add_field("pk", DataType.INT64, is_primary=True)
    schema.add_field(id_field, DataType.VARCHAR, max_length=4096)
    schema.add_field(anns_field, DataType.FLOAT_VECTOR, dim=dim)
    idx = client.prepare_index_params()
    idx.add_index(anns_field, index_type="FLAT", metric_type=metric)
    client.create_collection(collection, schema=schema, index_params=idx)
    rows = [{id_field: i, anns_field: np.asarray(v, dtype=np.float32).tolist()}
            for i, v in zip(embeddings["image_id"].to_list(), embeddings["embedding"].to_list())]
    n = 0
    for start in range(0, len(rows), 1000):
        n += int(client.insert(collection, rows[start:start + 1000]).get("insert_count", 0))
    client.flush(collection)
    return n


def _hits(result: Sequence, id_field: str, metric: str, what: str) -> list[list[tuple[str, float]]]:
    out = []
    for hits in result:
        rows = []
        for h in hits:
            ent = h.get("entity") or {}
            iid, dist = ent.get(id_field), h.get("distance")
            if iid is None:
                raise RuntimeError(f"{what}: a hit has no {id_field!r} field (id_field): {dict(h)!r}"[:400])
            if dist is None or not np.isfinite(float(dist)):
                raise RuntimeError(f"{what}: hit {iid!r} has no finite distance: {dict(h)!r}"[:400])
            rows.append((str(iid), -float(dist) if metric == "L2" else float(dist)))
        out.append(rows)
    return out


def _searcher(client: Any, s: Mapping[str, Any], metric: str) -> Callable[[list, list[str], int, str], Any]:
    """The search the system's settings ``s`` describe, on ``client``."""
    params = {"metric_type": metric, "params": dict(s.get("search_params") or {})}
    legs = list(s.get("legs") or [])
    id_field, field = str(s["id_field"]), str(s["anns_field"])

    def search(vecs: list, texts: list[str], limit: int, flt: str):
        """One search (anns_field) or, with legs, one hybrid search per query (imsearch_eval's
        clip_hybrid_query: AnnSearchRequest per leg, WeightedRanker over the legs' weights)."""
        if not legs:
            return client.search(s["collection"], data=vecs, anns_field=field, limit=limit,
                                 search_params=params, output_fields=[id_field], group_by_field=id_field,
                                 filter=flt)
        from pymilvus import AnnSearchRequest, WeightedRanker

        out = []
        for vec, text in zip(vecs, texts):
            reqs = [AnnSearchRequest(data=[text] if leg.get("text") else [vec], anns_field=str(leg["field"]),
                                     param={"metric_type": "BM25"} if leg.get("text") else
                                     {"metric_type": metric, "params": dict(leg.get("search_params") or
                                                                            s.get("search_params") or {})},
                                     limit=limit, expr=flt or None) for leg in legs]
            out.append(client.hybrid_search(s["collection"], reqs=reqs,
                                            ranker=WeightedRanker(*[float(leg["weight"]) for leg in legs]),
                                            limit=limit, output_fields=[id_field], group_by_field=id_field)[0])
        return out

    return search


def _benchmark_hits(rows: list[tuple[str, str, float]], known: set[str], losses: Losses, what: str,
                    name: str) -> pl.DataFrame:
    """The run of the hits (the first of a repeated pair); a hit that is not a benchmark image is a loss."""
    run = (pl.DataFrame(rows, schema=["query_id", "image_id", "score"], orient="row") if rows else empty_run())
    run = run.unique(["query_id", "image_id"], keep="first", maintain_order=True)
    bad = run.filter(~pl.col("image_id").is_in(list(known)))
    for q, d in bad.select("query_id", "image_id").iter_rows():
        losses.add("image", d, "unknown_image", f"{what}: not a benchmark image", query_id=q)
    if bad.height:
        log.warning("evaluate %s: %d hits are not benchmark images: dropped (losses file)", name, bad.height)
    return run.filter(pl.col("image_id").is_in(list(known)))


def milvus_run(system: Mapping[str, Any], bench: Bench, *, losses: Losses, threads: int = 1,
               client: Any = None) -> tuple[pl.DataFrame, dict]:
    """Search the collection for every query (top ``depth``, and each judged pool when ``score_pools``)."""
    from ..similarity.model import load_clip

    s = {**MILVUS_DEFAULTS, **dict(system)}
    name, depth, metric = s["name"], int(s["depth"]), str(s["metric"]).upper()
    id_field = str(s["id_field"])
    clip = load_clip(s["model"], s.get("pretrained"), device=s["device"],
                     precision=s["precision"])
    if clip.device == "cpu" and threads:
        import torch

        torch.set_num_threads(max(1, int(threads)))
    t0 = time.perf_counter()
    q_emb, _ = clip.encode_texts(bench.queries["query_text"].to_list())
    t_encode = time.perf_counter() - t0
    own = client is None
    client = connect(s) if own else client
    what = f"evaluate {name}: Milvus collection {s['collection']!r}"
    try:
        if not client.has_collection(s["collection"]):
            raise ConfigError(f"evaluate system {name!r}: Milvus has no collection {s['collection']!r} "
                              f"(collections: {client.list_collections()})")
        client.load_collection(s["collection"])
        legs = list(s.get("legs") or [])
        search = _searcher(client, s, metric)

        qids = bench.query_ids
        texts = bench.queries["query_text"].to_list()
        known = set(bench.images["image_id"].to_list())
        rows: list[tuple[str, str, float]] = []
        call_ms: list[float] = []  # one per top-depth search call
        bs = max(1, int(s["batch_size"]))
        t1 = time.perf_counter()
        for start in range(0, len(qids), bs):
            vecs = [np.asarray(v, dtype=np.float32).tolist() for v in q_emb[start:start + bs]]
            t = time.perf_counter()
            res = search(vecs, texts[start:start + bs], depth, s.get("filter") or "")
            call_ms.append(1000 * (time.perf_counter() - t))
            for qid, hits in zip(qids[start:start + bs], _hits(res, id_field, "IP" if legs else metric, what)):
                rows += [(qid, iid, sc) for iid, sc in hits]
        t_search = time.perf_counter() - t1
        pool_calls = 0
        if s.get("score_pools"):
            pools = bench.qrels.group_by("query_id").agg("image_id")
            pool_of = {q: sorted(ids) for q, ids in pools.iter_rows()}
            for qi, qid in enumerate(qids):
                ids = pool_of.get(qid) or []
                if not ids:
                    continue
                flt = f"{id_field} in {json.dumps(ids, ensure_ascii=False)}"
                if s.get("filter"):
                    flt = f"({s['filter']}) and ({flt})"
                res = search([np.asarray(q_emb[qi], dtype=np.float32).tolist()], [texts[qi]],
                             min(MAX_LIMIT, len(ids)), flt)
                pool_calls += 1
                rows += [(qid, iid, sc) for iid, sc in _hits(res, id_field, "IP" if legs else metric, what)[0]]
    finally:
        if own:
            client.close()
    run = _benchmark_hits(rows, known, losses, what, name)
    timing = {"query_seconds": round(t_encode + t_search, 4), "encode_seconds": round(t_encode, 4),
              "search_seconds": round(t_search, 4), **latency_summary(call_ms if bs == 1 else []),
              "requests_sent": len(call_ms) + pool_calls, "search_calls": len(call_ms),
              "search_call_ms_mean": round(float(np.mean(call_ms)), 3) if call_ms else None,
              "model_id": clip.model_id,
              "device": clip.device, "system_version": None if s.get("version") is None else str(s["version"])}
    nq = len(qids)
    timing["query_latency_ms"] = round(1000 * (t_encode + t_search) / nq, 4) if nq else None
    return run, timing

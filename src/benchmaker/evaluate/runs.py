"""TREC run files and the ranking core shared by every system (docs/evaluate.md).

A system's run holds, per query, the union of (a) its ranking of the whole benchmark corpus cut at
``depth`` and (b) its score of every image of the query's judged pool, in one order by score (ties by
image id). Both scopes are views of that one file: the **pool** view keeps the judged pool's images
(exact: every pool image is scored), the **corpus** view keeps the first ``depth`` entries (exact: an
image below the cut that is in the pool has a lower score than every image above it).

Ids are written with :func:`benchmaker.ids.trec_id` (whitespace-free, reversible) and read back with
:func:`benchmaker.ids.from_trec_id`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from ..formats import FormatError
from ..ids import from_trec_id, trec_id
from ..io import atomic_path

__all__ = [
    "RUN_SCHEMA",
    "RanxIds",
    "corpus_view",
    "empty_run",
    "exported_view",
    "pool_view",
    "rank_dense",
    "rank_scored",
    "read_run",
    "set_numba_cache",
    "sort_run",
    "strict_scores",
    "to_ranx_run",
    "trec_eval_ties",
    "write_run",
]

RUN_SCHEMA = {"query_id": pl.String, "image_id": pl.String, "score": pl.Float64}


def empty_run() -> pl.DataFrame:
    return pl.DataFrame(schema=RUN_SCHEMA)


def sort_run(run: pl.DataFrame) -> pl.DataFrame:
    """Canonical order: query id, score descending, image id; with a 1-based ``rank`` per query."""
    run = run.select(pl.col("query_id").cast(pl.String), pl.col("image_id").cast(pl.String),
                     pl.col("score").cast(pl.Float64))
    run = run.unique(["query_id", "image_id"], keep="first").sort(
        ["query_id", "score", "image_id"], descending=[False, True, False])
    return run.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("query_id").alias("rank"))


_SIGN32 = np.int32(-(2**31))
_NEG_INF_KEY32 = -0x7F800000


def _float_keys(x: np.ndarray) -> np.ndarray:
    """float32 -> int64 keys in the same order, adjacent float32 one apart (-0.0 and 0.0 both 0)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.int32).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def _key_floats(k: np.ndarray) -> np.ndarray:
    bits = np.where(k < 0, (-k) | np.int64(-(2**31)), k).astype(np.int64)
    return (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32)


def strict_scores(run: pl.DataFrame) -> pl.DataFrame:
    """A sorted run (:func:`sort_run`) with float32 scores strictly decreasing within each query.

    Tools break score ties differently (trec_eval / pytrec_eval by document id, ranx and the
    leaderboard by file order), and pytrec_eval reads scores as float32 (scores 1e-9 apart tie there),
    so a run file holds scores that differ as float32: each score is rounded to float32, then lowered
    to at most the float32 just below the previous line's (``min(s_i, nextafter(s'_{i-1}, -inf))``).
    The order is the canonical one (score descending, ties by image id), only tied and nearly tied
    scores move, by a few float32 units in the last place, and every tool reads the same ranking.
    Only scores of ``-inf`` can stay tied (there is no float below them)."""
    if not run.height:
        return run.with_columns(pl.col("score").cast(pl.Float32))
    key = _float_keys(run["score"].to_numpy().astype(np.float32))
    pos = (run["rank"] - 1).to_numpy().astype(np.int64)
    lowered = (pl.DataFrame({"q": run["query_id"], "u": key + pos})
               .select(pl.col("u").cum_min().over("q"))["u"].to_numpy() - pos)
    lowered = np.maximum(lowered, np.where(key == _NEG_INF_KEY32, key, _NEG_INF_KEY32 + 1))
    return run.with_columns(pl.Series("score", _key_floats(lowered), dtype=pl.Float32))


def trec_eval_ties(run: pl.DataFrame) -> pl.DataFrame:
    """A run read from someone else's file with its ties broken as trec_eval breaks them.

    trec_eval (and pytrec_eval, its code) orders a query's documents by score descending and tied
    scores by document id **descending** (the id as written in the file, byte order:
    ``form_res_rels.c``, ``comp_sim_docno``); our canonical order breaks ties by image id ascending
    (:func:`sort_run`). So that the leaderboard gives trec_eval's numbers on the user's own file, the
    run's scores are made strictly decreasing in trec_eval's order (float32, as :func:`strict_scores`
    writes them): tied scores move by a few units in the last place, no other order changes."""
    if not run.height:
        return run
    d = run["image_id"].unique().to_list()
    docno = dict(zip(d, (trec_id(x) for x in d)))
    r = (run.with_columns(pl.col("image_id").replace_strict(docno, return_dtype=pl.String).alias("_docno"))
         .sort(["query_id", "score", "_docno"], descending=[False, True, True])
         .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("query_id").alias("rank")))
    return strict_scores(r).select("query_id", "image_id", pl.col("score").cast(pl.Float64))


def write_run(run: pl.DataFrame, path: str | os.PathLike, tag: str) -> int:
    """Write ``query_id, image_id, score`` as a TREC run (``qid Q0 docid rank score tag``); returns lines.

    Scores are float32, strictly decreasing within a query (:func:`strict_scores`), so trec_eval's
    tie rule and the file order give the same ranking."""
    if not tag or any(c.isspace() for c in tag):
        raise ValueError(f"run tag {tag!r} must be a non-empty token without whitespace")
    r = strict_scores(sort_run(run))
    q = pl.Series(r["query_id"].unique().to_list(), dtype=pl.String)
    qmap = dict(zip(q.to_list(), (trec_id(x) for x in q.to_list())))
    d = r["image_id"].unique().to_list()
    dmap = dict(zip(d, (trec_id(x) for x in d)))
    lines = r.select(
        pl.col("query_id").replace_strict(qmap, return_dtype=pl.String),
        pl.col("image_id").replace_strict(dmap, return_dtype=pl.String),
        pl.col("rank"),
        # shortest text that reads back as the same float32: the same run always gives the same bytes
        pl.col("score").cast(pl.String),
    ).select(pl.format("{} Q0 {} {} {} " + tag, "query_id", "image_id", "rank", "score").alias("l"))
    with atomic_path(path, suffix=".tmp") as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        fh.writelines("\n".join(chunk) + "\n" for chunk in _chunks(lines["l"].to_list(), 100_000))
    return r.height


def _chunks(items: list, n: int) -> Iterator[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def _read_fast(path: Path) -> pl.DataFrame | None:
    """Single-space-separated files (what write_run writes) through polars; None = use the careful reader."""
    names = ["qid", "q0", "docid", "rank", "score", "tag"]
    try:
        raw = pl.read_csv(path, separator=" ", has_header=False, new_columns=names, quote_char=None,
                          schema_overrides={n: pl.String for n in names}, infer_schema=False)
    except (pl.exceptions.PolarsError, ValueError):  # ragged lines, tabs: the careful reader names the line
        return None
    if raw.width != 6 or any(raw[c].null_count() or (raw[c] == "").any() for c in names):
        return None
    try:
        raw.select(pl.col("rank").cast(pl.Int64, strict=True))
        score = raw["score"].cast(pl.Float64, strict=True)
    except pl.exceptions.PolarsError:
        return None
    if score.is_nan().any():  # the careful reader names the line
        return None
    decode = {}
    for col in ("qid", "docid"):
        u = raw[col].unique().to_list()
        decode[col] = dict(zip(u, (from_trec_id(x) for x in u)))
    return pl.DataFrame({"query_id": raw["qid"].replace_strict(decode["qid"], return_dtype=pl.String),
                         "image_id": raw["docid"].replace_strict(decode["docid"], return_dtype=pl.String),
                         "score": score}, schema=RUN_SCHEMA)


def read_run(path: str | os.PathLike) -> pl.DataFrame:
    """A TREC run file as ``query_id, image_id, score`` (ids decoded); names file and line on errors."""
    path = Path(path)
    if not path.is_file():
        raise FormatError(f"{path}: run file not found")
    if path.stat().st_size == 0:
        return empty_run()
    run = _read_fast(path)
    if run is not None:
        return _check_unique(run, path)
    qs, ds, ss = [], [], []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 6:
                raise FormatError(f"{path}:{n}: a TREC run line has 6 fields (qid Q0 docid rank score tag), "
                                  f"got {len(parts)}: {line.strip()[:120]!r}")
            try:
                score = float(parts[4])
                int(parts[3])
            except ValueError:
                raise FormatError(
                    f"{path}:{n}: rank must be an integer and score a number: {line.strip()[:120]!r}") from None
            if score != score:  # NaN orders nothing: trec_eval's sort gives an arbitrary ranking, polars puts it first
                raise FormatError(f"{path}:{n}: score is NaN: a run's scores must be numbers that order its "
                                  f"documents; give this line a number: {line.strip()[:120]!r}")
            qs.append(from_trec_id(parts[0]))
            ds.append(from_trec_id(parts[2]))
            ss.append(score)
    return _check_unique(pl.DataFrame({"query_id": qs, "image_id": ds, "score": ss}, schema=RUN_SCHEMA), path)


def _check_unique(run: pl.DataFrame, path: Path) -> pl.DataFrame:
    dup = run.group_by("query_id", "image_id").len().filter(pl.col("len") > 1)
    if dup.height:
        raise FormatError(f"{path}: image {dup['image_id'][0]!r} appears twice for query {dup['query_id'][0]!r} "
                          f"({dup.height} such pairs): a run ranks each image at most once per query (trec_eval "
                          "refuses duplicates too); keep one line per (query, image), e.g. the best-scored one")
    return run


def pool_view(run: pl.DataFrame, qrels: pl.DataFrame) -> pl.DataFrame:
    """The run restricted to each query's judged pool."""
    return run.join(qrels.select("query_id", "image_id"), on=["query_id", "image_id"], how="semi")


def corpus_view(run: pl.DataFrame, depth: int) -> pl.DataFrame:
    """The first ``depth`` entries of each query's ranking."""
    return sort_run(run).filter(pl.col("rank") <= depth).drop("rank")


def exported_view(run: pl.DataFrame, qrels: pl.DataFrame, depth: int) -> pl.DataFrame:
    """The first ``depth`` entries of each query's ranking of the exported images only (every judged
    pool's images, each once: the corpus of the export's mteb, BEIR and TREC views, docs/export.md).
    Exact for a run that holds the judged collection's top ``depth`` (``collection`` of :func:`rank_scored`)."""
    return corpus_view(run.join(qrels.select("image_id").unique(), on="image_id", how="semi"), depth)


class RanxIds:
    """Fixed-width stand-ins for the query and image ids handed to ranx.

    ranx turns ids into numpy fixed-width strings and numba specialises its compiled functions to
    that width, so every benchmark (every longest id) would compile ranx anew (20–60 s on 2 cores).
    With codes of one width (``q`` / ``d`` + 10 digits) the per-user JIT cache serves every
    benchmark. The numbers do not change: ranx orders a query's documents by score and breaks ties
    in the order the documents are given, never by id (tests/test_evaluate.py checks codes in id
    order and in reverse order against ranx on the ids). The given ids get codes in sorted order;
    any other id gets the next free code when first seen."""

    def __init__(self, query_ids: Sequence[str] = (), image_ids: Sequence[str] = ()):
        self._q = {x: f"q{i:010d}" for i, x in enumerate(sorted(set(query_ids)))}
        self._d = {x: f"d{i:010d}" for i, x in enumerate(sorted(set(image_ids)))}

    def query(self, x: str) -> str:
        c = self._q.get(x)
        if c is None:
            c = self._q[x] = f"q{len(self._q):010d}"
        return c

    def image(self, x: str) -> str:
        c = self._d.get(x)
        if c is None:
            c = self._d[x] = f"d{len(self._d):010d}"
        return c

    def decode(self) -> tuple[dict[str, str], dict[str, str]]:
        """(query code -> query id, image code -> image id) for results ranx keys by code."""
        return {c: x for x, c in self._q.items()}, {c: x for x, c in self._d.items()}


def to_ranx_run(run: pl.DataFrame, name: str, queries: Sequence[str] | None = None, ids: RanxIds | None = None):
    """A ranx Run; ``queries`` adds an empty ranking for each listed query that has none (scored 0);
    ``ids``: hand ranx the codes of :class:`RanxIds` instead of the ids (results keyed by codes)."""
    from ranx import Run

    qc = ids.query if ids is not None else str
    dc = ids.image if ids is not None else str
    d: dict[str, dict[str, float]] = {}
    for qid, docs, scores in run.group_by("query_id").agg("image_id", "score").iter_rows():
        d[qc(qid)] = {dc(i): s for i, s in zip(docs, scores)}
    for q in queries or ():
        d.setdefault(qc(q), {})
    return Run(d, name=name)


def _top(s: np.ndarray, k: int) -> np.ndarray:
    """Column indices of the ``k`` highest scores of each row (all columns when k covers them)."""
    n = s.shape[1]
    return np.argpartition(-s, k - 1, axis=1)[:, :k] if k < n else np.tile(np.arange(n), (s.shape[0], 1))


def rank_scored(score_chunks: Iterator[tuple[np.ndarray, np.ndarray]], query_ids: Sequence[str],
                doc_ids: Sequence[str], pools: Sequence[np.ndarray], depth: int,
                collection: np.ndarray | None = None) -> pl.DataFrame:
    """Turn dense score rows into a run: the top ``depth`` of each row plus the row's pool columns.

    ``score_chunks`` yields ``(row indices, scores [len(rows), n_docs])``; ``pools[i]`` holds the
    document indices of query i's judged pool. NaN scores (documents a system cannot score) are dropped.
    ``collection`` (the document indices of every judged pool together): the top ``depth`` of those
    columns too, so the run also holds the ranking of the judged collection the Sage evaluator searches
    (the ``sage`` view, :mod:`.sage`); they all score at most the corpus cut, so the corpus view is unchanged.
    """
    qi_all, di_all, sc_all = [], [], []
    n_docs = len(doc_ids)
    coll = None if collection is None else np.asarray(collection, dtype=np.int64)
    for rows, scores in score_chunks:
        k = min(depth, n_docs)
        if k <= 0:
            continue
        s = np.where(np.isnan(scores), -np.inf, scores)
        top = _top(s, k)
        if coll is not None and len(coll):
            top = np.concatenate([top, coll[_top(s[:, coll], min(depth, len(coll)))]], axis=1)
        for j, qi in enumerate(rows):
            idx = np.unique(np.concatenate([top[j], pools[qi]]).astype(np.int64))
            val = scores[j, idx]
            keep = ~np.isnan(val)
            qi_all.append(np.full(int(keep.sum()), qi, dtype=np.int64))
            di_all.append(idx[keep])
            sc_all.append(val[keep].astype(np.float64))
    if not qi_all:
        return empty_run()
    qi = np.concatenate(qi_all)
    di = np.concatenate(di_all)
    q_arr = pl.Series(list(query_ids), dtype=pl.String)
    d_arr = pl.Series(list(doc_ids), dtype=pl.String)
    return pl.DataFrame({"query_id": q_arr.gather(qi), "image_id": d_arr.gather(di),
                         "score": np.concatenate(sc_all)}, schema=RUN_SCHEMA)


def rank_dense(queries: np.ndarray, docs: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str],
               pools: Sequence[np.ndarray], depth: int, chunk: int = 256,
               collection: np.ndarray | None = None) -> pl.DataFrame:
    """Cosine ranking of L2-normalised embeddings (queries [nq,d], docs [n,d]) in query chunks
    (``collection``: as :func:`rank_scored`)."""
    docs = np.ascontiguousarray(docs, dtype=np.float32)

    def chunks():
        for start in range(0, len(queries), chunk):
            q = np.ascontiguousarray(queries[start:start + chunk], dtype=np.float32)
            yield np.arange(start, start + len(q)), q @ docs.T

    return rank_scored(chunks(), query_ids, doc_ids, pools, depth, collection)


def set_numba_cache(path: str | None) -> None:
    """Point numba's on-disk cache (ranx's JIT) at a persistent folder, before ranx is imported.

    numba files a function's cache entries under a hash of the folder of its source file *as
    imported* (``numba.core.caching._CacheLocator.get_suitable_cache_subpath``: ``abspath``, not
    ``realpath``), so ranx imported through a symlinked virtual environment or another checkout's
    path to the same installation would compile again into a new folder. The ``sys.path`` entries
    are therefore resolved first: ranx is imported from its real location, and every checkout using
    one installation shares one compiled cache (per user: ``$NUMBA_CACHE_DIR``)."""
    if path and not os.environ.get("NUMBA_CACHE_DIR"):
        Path(path).mkdir(parents=True, exist_ok=True)
        os.environ["NUMBA_CACHE_DIR"] = str(Path(path).resolve())
    if "ranx" not in sys.modules:
        sys.path[:] = list(dict.fromkeys(os.path.realpath(p) if p else p for p in sys.path))
    # numba's typed Dict / List helpers (ranx's Qrels and Runs) stay uncached, as numba leaves them:
    # cached once (commit e1009c6), those compiled by a hybrid system's job (ranx.fuse) made the
    # evaluate job that loaded them score every pool as unjudged (same inputs, other bytes:
    # tests/test_nrp_dryrun.py, the shipped controller Job against a local run; the two-builds test)

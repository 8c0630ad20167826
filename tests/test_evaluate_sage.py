"""The sage view: our runs scored as the Sage evaluator (imsearch_eval) reports its per-query statistics.

A hand-worked example fixes every column's value; a straightforward per-query implementation of the
evaluator's algorithm (pandas + sklearn, written here from its description in docs/evaluate.md) checks
the vectorised code on random runs with ties, graded labels, images in several pools and shared texts.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import polars as pl
import pytest

from benchmaker.evaluate import stage
from benchmaker.evaluate.sage import returned_objects, sage_columns, sage_view
from benchmaker.formats import write_table

L3 = 1 / math.log2(3)  # the discount of rank 2 (rank 1: 1, rank 3: 1/2)

# the flat table, in file order: B is in the pools of q1 and q2; q3 has q1's text (never evaluated, but
# its row is an object of the collection); labels are graded (C: 2, q2's B: 2)
FLAT = [("q1", "red", "A", 1), ("q1", "red", "B", 0), ("q1", "red", "C", 2),
        ("q2", "blue", "B", 2), ("q2", "blue", "D", 0),
        ("q3", "red", "E", 1),
        ("q4", "green", "F", 1),
        ("q5", "one", "G", 1),
        ("q6", "none", "H", 0)]
RUN = [("q1", "B", 0.9), ("q1", "X", 0.85), ("q1", "E", 0.8), ("q1", "A", 0.7), ("q1", "C", 0.6),  # X: in no pool
       ("q2", "D", 0.5), ("q2", "B", 0.4),
       ("q4", "F", 0.3), ("q4", "A", 0.2),
       ("q5", "G", 0.9)]  # q6: nothing returned
VEC = {"A": [0.0, 2.0], "B": [1.0, 0.0], "C": [1.0, 1.0], "D": [3.0, 4.0], "E": [0.0, 1.0], "F": [1.0, 1.0],
       "G": [1.0, 0.0], "H": [1.0, 0.0], "X": [1.0, 0.0]}


def _flat() -> pl.DataFrame:
    return pl.DataFrame(FLAT, schema=["query_id", "query_text", "image_id", "relevance_label"], orient="row")


def _run() -> pl.DataFrame:
    return pl.DataFrame(RUN, schema=["query_id", "image_id", "score"], orient="row")


def _emb():
    ids = sorted(VEC)
    return {i: n for n, i in enumerate(ids)}, np.asarray([VEC[i] for i in ids], dtype=np.float32)


def test_hand_worked_example_every_column():
    idx, emb = _emb()
    got = sage_view(_run(), _flat(), limit=3, emb_index=idx, emb=emb)
    assert got.columns == [*sage_columns(), "complete"]
    rows = {r["query_id"]: r for r in got.iter_rows(named=True)}
    assert list(rows) == ["q1", "q2", "q4", "q5", "q6"]  # deduplicated by text: q3 ("red") is q1's
    assert rows["q1"]["query"] == "red"
    # q1: collection images by score B .9, E .8, A .7 (X is in no pool); objects B/q1 (0, own), B/q2 (2),
    # E/q3 (1), A/q1 (1): the own row first on the tie, cut at 3 -> [B/q1:0, B/q2:2, E/q3:1]
    want = {
        "q1": {"total_images": 3, "correctly_returned": 1, "incorrectly_returned": 2, "relevant_images": 0,
               "non_relevant_images": 3, "accuracy": 1 / 3, "precision": 0.0, "recall": 0.0, "hit": 0,
               # B, B, E: similarities 1, 0, 0
               "diversity": 1 - 1 / 3,
               # all three rows count (other queries' labels): tie of ranks 1-2 averages gains 0 and 2
               "score_NDCG": (1.0 * (1 + L3) + 1 * 0.5) / (2 * 1 + 1 * L3 + 0),
               # the first row with a label > 0 is B/q2 (another query's row): the cross-query quirk
               "score_reciprocal_rank": 0.5},
        # q2: D/q2 (0), then B's two objects tied: B/q2 (2, own) before B/q1 (0)
        "q2": {"total_images": 3, "correctly_returned": 2, "incorrectly_returned": 1, "relevant_images": 2,
               "non_relevant_images": 1, "accuracy": 2 / 3, "precision": 2 / 3, "recall": 2 / 2, "hit": 1,
               # D = (0.6, 0.8) normalised; D.B = 0.6 twice, B.B = 1
               "diversity": 1 - (0.6 + 0.6 + 1.0) / 3,
               "score_NDCG": (0 * 1 + 1.0 * (L3 + 0.5)) / (2 * 1), "score_reciprocal_rank": 0.5},
        # q4: F/q4 (1), A/q1 (1): recall over q4's own labels only
        "q4": {"total_images": 2, "correctly_returned": 1, "incorrectly_returned": 1, "relevant_images": 1,
               "non_relevant_images": 1, "accuracy": 0.5, "precision": 0.5, "recall": 1.0, "hit": 1,
               "diversity": 1 - 1 / math.sqrt(2), "score_NDCG": 1.0, "score_reciprocal_rank": 1.0},
        # q5: one row: NDCG 0 (the evaluator's |R| < 2 rule), diversity NaN (fewer than two vectors)
        "q5": {"total_images": 1, "correctly_returned": 1, "incorrectly_returned": 0, "relevant_images": 1,
               "non_relevant_images": 0, "accuracy": 1.0, "precision": 1.0, "recall": 1.0, "hit": 1,
               "diversity": None, "score_NDCG": 0.0, "score_reciprocal_rank": 1.0},
        # q6: empty result: the fixed dict (diversity 0, no NDCG / RR: NaN)
        "q6": {"total_images": 0, "correctly_returned": 0, "incorrectly_returned": 0, "relevant_images": 0,
               "non_relevant_images": 0, "accuracy": 0.0, "precision": 0.0, "recall": 0.0, "hit": 0,
               "diversity": 0.0, "score_NDCG": None, "score_reciprocal_rank": None},
    }
    for q, cols in want.items():
        for c, v in cols.items():
            assert rows[q][c] == (v if v is None or isinstance(v, int) else pytest.approx(v, abs=1e-9)), (q, c)
    # recall's denominator is the sum of q1's labels (1 + 0 + 2): A returned would give 1/3
    got = sage_view(_run(), _flat(), limit=4)
    assert got.filter(pl.col("query_id") == "q1")["recall"][0] == pytest.approx(1 / 3)
    # the score column is named as the vector DB would name it
    assert sage_view(_run(), _flat(), score_column="rerank_score").columns[-3:-1] == [
        "rerank_score_NDCG", "rerank_score_reciprocal_rank"]


def test_complete_only_where_the_run_reaches_the_cut():
    # depth 2: the run is known only down to X (.85); B's two objects are above it, 2 < limit 3
    r, comp = returned_objects(_run(), _flat(), 3, depth=2, queries=["q1", "q2"])
    assert dict(comp.iter_rows()) == {"q1": False, "q2": True}  # q2's run is shorter than depth: all of it
    assert r.filter(pl.col("query_id") == "q1")["object_query_id"].to_list() == ["q1", "q2", "q3"]
    _, comp = returned_objects(_run(), _flat(), 3, depth=3, queries=["q1"])
    assert comp["complete"].to_list() == [True]
    # a collection cut (clip, bm25 runs hold the collection's top depth) lowers the trusted score
    _, comp = returned_objects(_run(), _flat(), 3, depth=2, collection_depth=2, queries=["q1"])
    assert comp["complete"].to_list() == [True]


# -------------------------------------------------------------- the evaluator's algorithm, per query
def _reference(flat: pd.DataFrame, run: pd.DataFrame, vec: dict, limit: int) -> pd.DataFrame:
    """imsearch_eval's evaluate_query over an emulated vector DB: one object per flat-table row, a query
    returns the objects of the images its run scores, by score (ties: own row, query id, image id)."""
    from sklearn.metrics import ndcg_score
    from sklearn.metrics.pairwise import cosine_similarity

    objects = flat.rename(columns={"query_id": "object_query_id"})[["object_query_id", "image_id",
                                                                     "relevance_label"]]
    stats = []
    for _, qrow in flat.drop_duplicates(subset=["query_text"], keep="first").iterrows():
        qid = qrow["query_id"]
        hits = run[run["query_id"] == qid][["image_id", "score"]].merge(objects, on="image_id")
        hits["own"] = hits["object_query_id"] == qid
        res = hits.sort_values(["score", "own", "object_query_id", "image_id"],
                               ascending=[False, False, True, True]).head(limit)
        row = {"query_id": qid, "query": qrow["query_text"]}
        if res.empty:
            row.update(total_images=0, correctly_returned=0, incorrectly_returned=0, relevant_images=0,
                       non_relevant_images=0, accuracy=0.0, precision=0.0, recall=0.0, hit=0, diversity=0)
            stats.append(row)
            continue
        n = len(res)
        correct = int(res["own"].sum())
        relevant = int(res.loc[res["own"], "relevance_label"].sum())
        in_dataset = flat[flat["query_id"] == qid]["relevance_label"].sum()
        ordered = res.sort_values("score", ascending=False, kind="stable")
        ndcg = 0.0 if n < 2 else ndcg_score(ordered["relevance_label"].values.reshape(1, -1),
                                            ordered["score"].values.reshape(1, -1))
        rr = 0.0
        for rank, label in enumerate(ordered["relevance_label"], start=1):
            if label > 0:
                rr = 1.0 / rank
                break
        vecs = [vec.get(i) for i in res["image_id"]]
        div = np.nan
        if n >= 2 and all(v is not None for v in vecs):
            sim = cosine_similarity(np.asarray(vecs, dtype=float))
            div = 1.0 - float(np.mean(sim[np.triu_indices(n, k=1)]))
        row.update(total_images=n, correctly_returned=correct, incorrectly_returned=n - correct,
                   relevant_images=relevant, non_relevant_images=n - relevant, accuracy=correct / n,
                   precision=relevant / n, recall=relevant / in_dataset if in_dataset else 0.0,
                   hit=int(relevant > 0), diversity=div, score_NDCG=ndcg, score_reciprocal_rank=rr)
        stats.append(row)
    return pd.DataFrame(stats)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_the_evaluators_algorithm_on_random_runs(seed):
    rng = np.random.default_rng(seed)
    n_img, n_q, limit = 40, 30, [5, 10, 25][seed]
    imgs = [f"img {i:03d}.jpg" for i in range(n_img)]
    texts = [f"text {rng.integers(0, 20)}" for _ in range(n_q - 2)] + ["empty a", "empty b"]  # shared texts
    flat = []
    for q in range(n_q):
        pool = rng.choice(n_img, size=int(rng.integers(1, 12)), replace=False)  # images in several pools
        for i in pool:
            flat.append((f"q{q:02d}", texts[q], imgs[i], int(rng.choice([0, 0, 1, 2]))))
    run = []
    for q in range(n_q - 2):  # the last two queries return nothing
        for i in rng.choice(n_img, size=int(rng.integers(1, n_img)), replace=False):
            run.append((f"q{q:02d}", imgs[i], float(np.round(rng.random(), 1))))  # ties between images
    vec = {imgs[i]: rng.standard_normal(4) for i in range(n_img) if i % 13}  # a few without a vector
    flat_pl = pl.DataFrame(flat, schema=["query_id", "query_text", "image_id", "relevance_label"], orient="row")
    run_pl = pl.DataFrame(run, schema=["query_id", "image_id", "score"], orient="row")
    ids = sorted(vec)
    got = sage_view(run_pl, flat_pl, limit=limit, emb_index={i: n for n, i in enumerate(ids)},
                    emb=np.asarray([vec[i] for i in ids], dtype=np.float32)).drop("complete").to_pandas()
    want = _reference(flat_pl.to_pandas(), run_pl.to_pandas(), vec, limit)
    assert got["query_id"].tolist() == want["query_id"].tolist()
    assert got["total_images"].max() == limit and (got["total_images"] == 0).sum() >= 2
    pd.testing.assert_frame_equal(got[want.columns.tolist()], want, check_dtype=False, atol=1e-6, rtol=0)
    # diversity in blocks of whole queries (bounded memory) gives the same values
    from benchmaker.evaluate.sage import _diversity

    r, _ = returned_objects(run_pl, flat_pl, limit)
    index = {i: n for n, i in enumerate(ids)}
    vectors = np.asarray([vec[i] for i in ids], dtype=np.float32)
    one, blocks = _diversity(r, index, vectors), _diversity(r, index, vectors, block_rows=7)
    assert one.keys() == blocks.keys() and all(blocks[q] == pytest.approx(v, abs=1e-12) for q, v in one.items())


def test_aggregate_writes_the_sage_files(tmp_path):
    """stage.run: one CSV per corpus-ranked system, none for a pool-only one, the means beside."""
    flat = _flat().with_columns(pl.lit("positive").alias("pool"), (pl.col("image_id") == "A").alias("is_seed"),
                                pl.lit(False).alias("seed_not_relevant"), pl.lit("test").alias("judge"))
    write_table(flat, "qrels", tmp_path / "qrels.jsonl")
    ids = sorted(VEC)
    write_table(pl.DataFrame({"image_id": ids, "image_url": None, "mime_type": "image/jpeg", "width": 1,
                              "height": 1, "file_size": 1, "sha256": [f"{n:064x}" for n in range(len(ids))],
                              "phash": None, "license": None, "doi": None, "original_dataset_name": "t"}),
                "images", tmp_path / "images.jsonl")
    write_table(pl.DataFrame({"image_id": ids, "summary": "x", "tags": [["x"]] * len(ids),
                              "confidence": [{"x": 1.0}] * len(ids), "annotator": "t"}),
                "annotations", tmp_path / "annotations.jsonl")
    from benchmaker.evaluate.runs import write_run

    for name, scopes in (("sys", ["pool", "corpus"]), ("poolonly", ["pool"])):
        write_run(_run(), tmp_path / f"{name}.trec", name)
        (tmp_path / f"{name}.json").write_text(json.dumps({"name": name, "kind": "trec_run", "scopes": scopes,
                                                           "depth": 100, "sees_judge_text": False}))
    out = tmp_path / "evaluate"
    doc = stage.run(qrels=str(tmp_path / "qrels.jsonl"), images=str(tmp_path / "images.jsonl"),
                      annotations=str(tmp_path / "annotations.jsonl"),
                      runs=[str(tmp_path / f"{n}.trec") for n in ("sys", "poolonly")],
                      metas=[str(tmp_path / f"{n}.json") for n in ("sys", "poolonly")],
                      leaderboard_csv=str(out / "leaderboard.csv"), leaderboard_json=str(out / "leaderboard.json"),
                      drilldown=str(out / "drilldown.csv"), significance_csv=str(out / "significance.csv"),
                      per_query=str(out / "per_query.csv"), settings={"k": [3], "sage": {"limit": 3}},
                      sage_leaderboard=str(out / "sage_leaderboard.csv"),
                      sage=[str(out / "sage" / "sys.csv"), str(out / "sage" / "poolonly.csv")])
    per = pl.read_csv(out / "sage" / "sys.csv")
    assert per.columns[:15] == [*sage_columns(), "complete"] and "difficulty" in per.columns
    assert per["query_id"].to_list() == ["q1", "q2", "q4", "q5", "q6"]
    assert pl.read_csv(out / "sage" / "poolonly.csv").height == 0  # declared, not corpus-ranked: header only
    board = pl.read_csv(out / "sage_leaderboard.csv")
    assert board["system"].to_list() == ["sys"] and board["queries"][0] == 5 and board["complete_queries"][0] == 5
    # means skip the NaN of q5's diversity and q6's NDCG / RR, as a pandas mean of the evaluator's table
    assert board["hit"][0] == pytest.approx(3 / 5)
    assert board["score_reciprocal_rank"][0] == pytest.approx((0.5 + 0.5 + 1 + 1) / 4)
    assert doc["sage"]["limit"] == 3 and doc["sage"]["systems"][0]["system"] == "sys"

"""The export's IR views load unchanged in datasets, mteb's own loader, BEIR and ranx (odd file names)."""

from __future__ import annotations

import shutil

import numpy as np
import polars as pl
import pytest
import yaml

from benchmaker.export.ir_views import mteb_configs, write_ir_views
from benchmaker.ids import from_trec_id, trec_id

ODD = "red/my café #1.jpg"


@pytest.fixture()
def views(tmp_path, tiny_corpus):
    root = tmp_path / "images"
    shutil.copytree(tiny_corpus, root)
    first = min((root / "red").glob("*.jpg"))
    first.rename(root / ODD)
    ids = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "broken" not in p.parts)
    rows = []
    for n, qid in enumerate(("q 1", "q été")):
        for j, iid in enumerate(ids[n * 3:n * 3 + 6] + ([ODD] if n else [])):
            rows.append({"query_id": qid, "query_text": f"query {n}", "image_id": iid,
                         "relevance_label": int(j % 2 == 0), "summary": f"summary of {iid}"})
    df = pl.DataFrame(rows).unique(["query_id", "image_id"], keep="first", maintain_order=True)
    out = tmp_path / "hf"
    out.mkdir()
    counts = write_ir_views(df, out, "test", root)
    # the card's YAML configs as the export writes them (default = the flat table, not needed here)
    (out / "README.md").write_text("---\n" + yaml.safe_dump({"configs": mteb_configs("test")}) + "---\n")
    return out, df, counts


def test_datasets_loads_every_mteb_config(views):
    from datasets import load_dataset

    out, df, counts = views
    corpus = load_dataset(str(out), "corpus", split="test")
    assert corpus.column_names == ["id", "image"] and len(corpus) == counts["corpus"]
    assert trec_id(ODD) in corpus["id"] and all(" " not in i for i in corpus["id"])
    assert corpus[0]["image"].size[0] > 0  # decodes to PIL
    queries = load_dataset(str(out), "queries", split="test")
    assert sorted(from_trec_id(i) for i in queries["id"]) == ["q 1", "q été"]
    qrels = load_dataset(str(out), "mteb-qrels", split="test")
    assert qrels.column_names == ["query-id", "corpus-id", "score"] and len(qrels) == df.height


def test_mteb_own_loader(views):
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalDatasetLoader

    out, df, _ = views
    # AbsTaskRetrieval.load_data builds exactly this loader with config=<hf_subset> (docs/evaluate.md)
    split = RetrievalDatasetLoader(hf_repo=str(out), revision=None, split="test", config="mteb").load()
    assert len(split["corpus"]) == df["image_id"].n_unique()
    assert set(split["queries"]["id"]) == {trec_id("q 1"), trec_id("q été")}
    rel = split["relevant_docs"]
    assert rel[trec_id("q été")][trec_id(ODD)] in (0, 1)


def test_beir_loader_and_exact_dense_search(views):
    from beir.datasets.data_loader import GenericDataLoader
    from beir.retrieval.search.dense.exact_search import DenseRetrievalExactSearch

    out, _, _ = views
    corpus, queries, qrels = GenericDataLoader(data_folder=str(out / "beir")).load(split="test")
    assert all(doc["title"] == "" for doc in corpus.values())
    # BEIR's loader keeps title and text only; the file's `image` field and the id both name the image
    raw = pl.read_ndjson(out / "beir" / "corpus.jsonl")
    assert raw.columns == ["_id", "title", "text", "image"]
    assert all(from_trec_id(i) == img for i, img in raw.select("_id", "image").iter_rows())
    assert trec_id(ODD) in corpus
    assert qrels[trec_id("q été")][trec_id(ODD)] in (0, 1)

    class Model:  # BEIR's dense-model interface: encode_queries / encode_corpus -> arrays
        def encode_queries(self, texts, batch_size=16, **kw):
            return np.stack([np.eye(8, dtype=np.float32)[len(t) % 8] for t in texts])

        def encode_corpus(self, docs, batch_size=16, **kw):
            return np.stack([np.eye(8, dtype=np.float32)[len(d["title"] + " " + d["text"]) % 8] for d in docs])

    results = DenseRetrievalExactSearch(Model(), batch_size=4).search(corpus, queries, top_k=5, score_function="dot")
    assert set(results) == set(queries) and all(len(v) <= 5 for v in results.values())


def test_ranx_reads_trec_qrels(views):
    from ranx import Qrels

    out, df, _ = views
    q = Qrels.from_file(str(out / "trec" / "qrels.txt"), kind="trec")
    assert q.to_dict()[trec_id("q été")][trec_id(ODD)] == int(
        df.filter((pl.col("query_id") == "q été") & (pl.col("image_id") == ODD))["relevance_label"][0])


def test_mteb_task_definition_from_the_docs_loads(views):
    """The task class of docs/evaluate.md, pointed at the local folder, loads through mteb's own code."""
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.task_metadata import TaskMetadata

    out, df, _ = views

    class MyBenchT2IRetrieval(AbsTaskRetrieval):
        metadata = TaskMetadata(
            name="MyBenchT2IRetrieval",
            description="Text-to-image retrieval on a benchmark built with benchmaker.",
            reference=None,
            dataset={"path": str(out), "revision": "main"},
            type="Any2AnyRetrieval",
            category="t2i",
            modalities=["text", "image"],
            eval_splits=["test"],
            eval_langs={"mteb": ["eng-Latn"]},  # the subset name selects the mteb-* configs
            main_score="ndcg_at_10",
        )

    task = MyBenchT2IRetrieval()
    task.load_data()
    data = task.dataset["mteb"]["test"]
    assert len(data["corpus"]) == df["image_id"].n_unique()
    assert data["corpus"][0]["image"].size[0] > 0
    assert trec_id("q été") in data["relevant_docs"]


def test_odd_file_name_survives_the_real_export(tmp_path, tiny_corpus):
    """export.run on a pool holding `red/my café #1.jpg`: the flat table keeps the id, every IR view
    encodes it reversibly, and datasets / mteb / BEIR / ranx all load it."""
    from beir.datasets.data_loader import GenericDataLoader
    from datasets import load_dataset
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalDatasetLoader
    from openai_helpers import images_frame
    from ranx import Qrels
    from support import TINY_FACETS

    from benchmaker.export import run as export_run
    from benchmaker.formats import write_table

    root = tmp_path / "images"
    shutil.copytree(tiny_corpus, root)
    min((root / "red").glob("*.jpg")).rename(root / ODD)
    imgs = images_frame(root).drop("caption")
    write_table(imgs, "images", tmp_path / "images.jsonl")
    ids = imgs["image_id"].to_list()
    write_table(pl.DataFrame([{"image_id": i, "summary": f"about {i}", "tags": ["red"], "confidence": {"color": 1.0},
                               "annotator": "t", "color": "red", "shape": "circle", "is_bright": True} for i in ids]),
                "annotations", tmp_path / "annotations.jsonl")
    pool = [ODD] + [i for i in ids if i != ODD][:4]
    write_table(pl.DataFrame([{"query_id": "q été 1", "query_text": "a red thing", "image_id": i,
                               "relevance_label": int(n < 2), "pool": "seed" if n == 0 else "hard",
                               "is_seed": n == 0, "seed_not_relevant": False, "judge": "t",
                               "clip_score": 0.5 - n / 10, "clip_rank": n + 1} for n, i in enumerate(pool)]),
                "qrels_with_score", tmp_path / "scored.jsonl")
    out = tmp_path / "hf"
    export_run(images=str(tmp_path / "images.jsonl"), annotations=str(tmp_path / "annotations.jsonl"),
               scored=str(tmp_path / "scored.jsonl"), dataset=str(out), facets=TINY_FACETS, image_root=str(root),
               settings={"split": "test"}, public_config={}, similarity={})
    flat = load_dataset(str(out), split="test")
    assert flat[0]["image_id"] == ODD and flat[0]["image"].size[0] > 0
    data = RetrievalDatasetLoader(hf_repo=str(out), revision=None, split="test", config="mteb").load()
    assert trec_id(ODD) in data["relevant_docs"][trec_id("q été 1")]
    assert from_trec_id(data["corpus"].filter(lambda r: r["id"] == trec_id(ODD))[0]["id"]) == ODD
    _, _, qrels = GenericDataLoader(data_folder=str(out / "beir")).load(split="test")
    assert qrels[trec_id("q été 1")][trec_id(ODD)] == 1
    q = Qrels.from_file(str(out / "trec" / "qrels.txt"), kind="trec")
    assert {from_trec_id(d) for d in q.to_dict()[trec_id("q été 1")]} == set(pool)

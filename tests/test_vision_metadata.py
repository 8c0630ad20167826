"""The `metadata` vision adapter: labels the collection already has become annotations."""

from __future__ import annotations

import json

import polars as pl
import pytest
import support

from benchmaker.formats import FacetModel, read_table
from benchmaker.losses import Losses, read_losses
from benchmaker.vision.metadata import MetadataAnnotator

FM = FacetModel(taxonomy={"color": ["red", "blue", "unknown"], "shape": ["circle", "square"]},
                boolean=["is_bright"], vocabulary=["round", "angular", "shiny"], min_tags=1, max_tags=2)


def images(**cols):
    base = {"image_id": ["a.jpg", "b.jpg", "c.jpg", "d.jpg"]}
    return pl.DataFrame(base | cols)


def test_labels_tags_summary_and_fallbacks():
    df = images(colour=["red", "Blue", "green", None], shape=["circle", "square", "circle", "square"],
                is_bright=["yes", "False", "0", "true"],
                label_tags=[["round", "shiny", "angular"], ["angular", "weird"], None, ["round"]])
    settings = {"facet_columns": {"color": "colour"}, "tags_column": "label_tags"}
    ann = MetadataAnnotator(facets=FM, settings=settings).annotate(df, loss := Losses("vision"))
    assert len(loss) == 0
    rows = {r["image_id"]: r for r in ann.iter_rows(named=True)}
    assert rows["a.jpg"]["color"] == "red" and rows["a.jpg"]["confidence"]["color"] == 1.0
    assert rows["b.jpg"]["color"] == "blue"  # case-insensitive match to the allowed value
    assert rows["c.jpg"]["color"] == "unknown" and rows["c.jpg"]["confidence"]["color"] == 0.0  # invalid -> unknown
    assert rows["d.jpg"]["color"] == "unknown"  # missing -> unknown
    assert [rows[i]["is_bright"] for i in ("a.jpg", "b.jpg", "c.jpg", "d.jpg")] == [True, False, False, True]
    assert rows["a.jpg"]["tags"] == ["round", "shiny"]  # vocabulary order kept, cut at max
    assert rows["b.jpg"]["tags"] == ["angular"]  # out-of-vocabulary tag dropped
    as_text = images(color=["red"] * 4, shape=["circle"] * 4, is_bright=[True] * 4,
                     label_tags=["round, shiny", "angular; weird", "", None])
    ann2 = MetadataAnnotator(facets=FM, settings={"tags_column": "label_tags"}).annotate(as_text, Losses("vision"))
    assert ann2["tags"].to_list() == [["round", "shiny"], ["angular"], [], []]
    assert rows["c.jpg"]["tags"] == []
    assert rows["a.jpg"]["summary"] == "red, circle, is bright, round, shiny"
    assert set(ann["annotator"]) == {"metadata"}


def test_invalid_label_without_unknown_is_a_loss():
    df = images(color=["red"] * 4, shape=["circle", "hexagon", None, "square"],
                is_bright=["true", "maybe", "true", "true"])
    loss = Losses("vision")
    ann = MetadataAnnotator(facets=FM, settings={"tags_column": None}).annotate(df, loss)
    assert ann["image_id"].to_list() == ["a.jpg", "d.jpg"]
    by_id = {r["item_id"]: r for r in loss.rows}
    assert set(by_id) == {"b.jpg", "c.jpg"}
    assert "hexagon" in by_id["b.jpg"]["detail"] and "maybe" in by_id["b.jpg"]["detail"]
    assert by_id["c.jpg"]["reason"] == "invalid_label" and "shape: missing" in by_id["c.jpg"]["detail"]


def test_missing_column_names_the_key():
    df = images(color=["red"] * 4, is_bright=[True] * 4)
    with pytest.raises(ValueError, match=r"vision.metadata.facet_columns.shape -> 'shape'"):
        MetadataAnnotator(facets=FM, settings={}).annotate(df, Losses("vision"))
    with pytest.raises(ValueError, match="not facets"):
        MetadataAnnotator(facets=FM, settings={"facet_columns": {"size": "s"}})


@pytest.mark.slow
def test_workflow_with_metadata_labels(tmp_path, tiny_corpus, tiny_clip):
    """An already-labelled collection: labels from metadata.jsonl, rules judge, end to end."""
    rows = []
    for p in sorted(tiny_corpus.rglob("*")):
        rel = p.relative_to(tiny_corpus).as_posix()
        if p.is_file() and not rel.startswith("broken/"):
            color, shape = rel.split("/")[0], rel.split("/")[1].split("_")[0]
            rows.append({"image_id": rel, "color": color, "shape": shape, "is_bright": color in ("yellow", "red")})
    meta = tmp_path / "metadata.jsonl"
    meta.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    # one shard: the adapter's labels are the point (sharded runs: tests/test_change_detection.py)
    cfg = support.tiny_config(tmp_path, tiny_corpus, tiny_clip, n_shards=1, vision={"adapter": "metadata"},
                              paths={"metadata_jsonl": str(meta)})
    path = support.write_config(tmp_path / "config.yaml", cfg)
    res = tmp_path / "results" / "tiny"
    r = support.snakemake(["-c2"], tmp_path, path, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    fm = FacetModel.from_config(support.TINY_FACETS)
    ann = read_table("annotations", res / "annotations.jsonl", facets=fm)
    assert ann.height == len(rows) and read_losses(res / "losses" / "vision.jsonl").height == 0
    truth = {r["image_id"]: (r["color"], r["shape"]) for r in rows}
    assert all(truth[i] == (c, s) for i, c, s in ann.select("image_id", "color", "shape").iter_rows())
    qrels = read_table("qrels", res / "qrels.jsonl")
    assert qrels.height > 0 and qrels.filter(pl.col("is_seed"))["relevance_label"].min() == 1
    # labels decide relevance: same colour (the core facet) = relevant, the planned hard negatives included
    colour = {i: truth[i][0] for i in truth}
    seeds = dict(qrels.filter(pl.col("is_seed")).select("query_id", "image_id").iter_rows())
    for q, img, label in qrels.select("query_id", "image_id", "relevance_label").iter_rows():
        assert label == int(colour[img] == colour[seeds[q]]), (q, img, label)
    assert (res / "hf_dataset" / "README.md").is_file()


def test_reserved_tags_column_is_a_config_error():
    from benchmaker.config import ConfigError, validate_config

    cfg = {"benchmark": {"name": "b"}, "paths": {"image_root": "x"}, "facets": support.TINY_FACETS,
           "plan": {"neg_total": 3, "neg_hard": 1, "neg_nearmiss": 1, "neg_easy": 1},
           "vision": {"adapter": "metadata", "metadata": {"tags_column": "tags"}}}
    with pytest.raises(ConfigError, match="vision.metadata.tags_column"):
        validate_config(cfg)

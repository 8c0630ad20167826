"""Export stage (HF parquet + card) and the upload target against a fake Hub."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import polars as pl
import pytest
import yaml
from fake_hub import FakeHub
from test_summary import build_inputs

from benchmaker.formats import FormatError, write_table

COLS = {"query_id": "qid", "relevance_label": "rel", "image": "img", "image_id": "img_id"}
TOKEN = "hf_FAKEtoken0123456789abcdefXYZ"
OPENAI = "sk-FAKEopenai0123456789abcdefghij"


def _public_config(corpus: Path) -> dict:
    return {
        "benchmark": {"name": "tiny", "license": "cc-by-4.0"},
        "paths": {"image_root": str(corpus)},
        "vision": {"adapter": "openai", "openai": {"model": "gpt-5-mini", "mode": "batch",
                                                   "api_key_env": "OPENAI_API_KEY",
                                                   "prompts": {"system": f"note {OPENAI} leaked", "user": None}}},
        "judge": {"adapter": "rules", "labels": "binary"},
        "plan": {"num_seeds": 4, "pos_total": 1, "neutral_total": 1, "neg_total": 3, "neg_hard": 1,
                 "neg_nearmiss": 1, "neg_easy": 1},
        "export": {"split": "test", "token_env": "HF_TOKEN", "hub_token": "abc-not-a-real-key-123"},
        "_hf_repo_id": "me/secret-repo", "_base_dir": "/private/dir",
    }


def _export(tmp: Path, corpus: Path, **over):
    from benchmaker.export import run as export_run
    from benchmaker.summary.stage import run as summary_run

    kw = build_inputs(tmp, corpus, columns=COLS)
    truth = kw.pop("_truth")
    summary_dir = tmp / "results" / "summary"
    summary_run(summary=str(summary_dir), settings={"sample_grid": 4, "scale_factor": 0.5}, **kw)
    out = tmp / "results" / "hf_dataset"
    kw.pop("estimate", None)  # the summary's alone: the estimate is not published
    args = dict(kw, summary=str(summary_dir), dataset=str(out),
                settings={"split": "test", "rows_per_file": 6, "repo_id": "me/tiny-bench", "token_env": "HF_TOKEN"},
                similarity={"model": "ViT-B-32", "pretrained": "laion2b_s34b_b79k", "precision": "fp32"},
                public_config=_public_config(corpus))
    args.update(over)
    meta = export_run(**args)
    return out, meta, truth, args


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_corpus):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_TOKEN", TOKEN)
        mp.setenv("OPENAI_API_KEY", OPENAI)
        tmp = tmp_path_factory.mktemp("export")
        return _export(tmp, tiny_corpus)


def test_layout_and_parquet_files(exported):
    out, meta, _, _ = exported
    for f in ("README.md", "annotations.jsonl", "losses.jsonl", "config.yaml", "dataset_metadata.json",
              "summary/summary.json", "summary/report.html", "summary/config_values.csv",
              "summary/relevance_overview.png"):
        assert (out / f).is_file(), f
    parts = sorted(p.name for p in (out / "data").iterdir())
    assert parts == [f"test-0000{i}-of-00003.parquet" for i in range(3)]
    assert [f["rows"] for f in meta["files"]] == [6, 6, 5]


def test_load_with_datasets_decodes_images_in_order(exported, tiny_corpus):
    import datasets
    from PIL import Image

    out, _, truth, _ = exported
    ds = datasets.load_dataset("parquet", data_files=sorted(str(p) for p in (out / "data").glob("*.parquet")),
                               split="train")
    assert ds.num_rows == 17
    assert isinstance(ds.features["img"], datasets.Image)
    for name in ("qid", "rel", "img_id", "query_text", "clip_score", "summary", "tags", "confidence", "color",
                 "shape", "is_bright", "license", "doi", "original_dataset_name", "image_url", "mime_type",
                 "width", "height", "sha256", "pool", "is_seed"):
        assert name in ds.column_names, name
    assert "query_id" not in ds.column_names and "image" not in ds.column_names
    row = ds[0]
    assert isinstance(row["img"], Image.Image) and row["img"].size == (row["width"], row["height"])
    # every embedded image is the file's bytes
    raw = ds.cast_column("img", datasets.Image(decode=False))
    for r in raw:
        assert r["img"]["bytes"] == (tiny_corpus / r["img_id"]).read_bytes()
    # queries contiguous, in file order, seed row first (q1's seed was last in the file)
    qids = ds["qid"]
    assert list(dict.fromkeys(qids)) == ["tiny_q0001", "tiny_q0002", "tiny_q0003", "tiny_q0004"]
    seen, firsts = set(), {}
    for i, q in enumerate(qids):
        if q not in seen:
            assert not (qids[i - 1:i] and qids[i - 1] in seen and qids[i - 1] != q and q in seen)
            seen.add(q)
            firsts[q] = ds[i]
    assert all(r["is_seed"] for r in firsts.values())
    runs = sum(1 for i, q in enumerate(qids) if i == 0 or qids[i - 1] != q)
    assert runs == 4
    # the pairs are exactly the input pairs
    q = truth["qrels"]
    assert sorted(zip(ds["qid"], ds["img_id"], ds["rel"])) == sorted(
        zip(q["query_id"], q["image_id"], q["relevance_label"]))
    # annotations joined by image: the unannotated image has null summary, others have theirs
    for r in ds.select_columns(["img_id", "summary", "color"]):
        if r["img_id"] == "yellow/stripes_1.png":
            assert r["summary"] is None
        elif r["summary"] is not None:
            assert r["color"] == r["img_id"].split("/")[0]
    # the folder itself loads through the card's `configs`, split "test"
    ds2 = datasets.load_dataset(str(out), split="test")
    assert ds2.num_rows == 17 and isinstance(ds2[0]["img"], Image.Image)


def _front_matter(card: str) -> dict:
    lines = card.splitlines()
    assert lines[0] == "---"
    end = lines.index("---", 1)  # the closing line is exactly '---'
    return yaml.safe_load("\n".join(lines[1:end]))


def test_card_matches_data(exported):
    import pyarrow.parquet as pq

    out, meta, truth, _ = exported
    card = (out / "README.md").read_text()
    fm = _front_matter(card)
    assert fm["license"] == "cc-by-4.0" and fm["size_categories"] == ["n<1K"]
    assert fm["configs"][0]["data_files"] == [{"split": "test", "path": "data/test-*"}]
    info = fm["dataset_info"]
    assert info["splits"] == [{"name": "test", "num_bytes": sum(f["bytes"] for f in meta["files"]),
                               "num_examples": 17}]
    schema = pq.read_schema(next((out / "data").glob("*.parquet")))
    assert [f["name"] for f in info["features"]] == schema.names
    feats = {f["name"]: f for f in info["features"]}
    assert feats["img"]["dtype"] == "image" and feats["qid"]["dtype"] == "string"
    assert feats["rel"]["dtype"] == "int64" and "struct" in feats["confidence"]
    # counts in the prose equal the data
    q = truth["qrels"]
    assert "| queries | 4 |" in card and f"| pairs (rows) | {q.height} |" in card
    assert f"| unique images | {q['image_id'].n_unique()} |" in card
    assert "| positive pairs | 7 |" in card and "| queries without a positive | 1 |" in card
    assert "| positives per query (mean / min / max) | 1.75 / 0 / 3 |" in card
    assert "| 0 | 10 |" in card and "| 1 | 7 |" in card
    assert "| queries whose seed was judged not relevant | 1 |" in card
    # losses per stage with reasons, quarantine, costs, models, load snippet, columns
    for s in ("| vision | image | refusal | 1 |", "| plan | query | no_candidates | 2 |",
              "| judge | pair | invalid_answer | 1 |", "3 files were quarantined", "| truncated | 1 |",
              "Total: USD 0.0070 over 3 requests", "`ViT-B-32`", "laion2b_s34b_b79k",
              "`openai` with model `gpt-5-mini`",
              'load_dataset("me/tiny-bench", split="test")', 'row["img"]', "| `img_id` |", "| `color` |",
              "Ada Lovelace (Analytical)", "nDCG@10"):
        assert s in card, s
    md = json.loads((out / "dataset_metadata.json").read_text())
    assert md["counts"]["rows"] == 17 and md["counts"]["queries"] == 4
    assert md["losses"]["vision"] == {"refusal": 1} and md["quarantine"]["truncated"] == 1
    assert md["columns"]["query_id"] == "qid" and md["image_column"] == "img"
    merged = pl.read_ndjson(out / "losses.jsonl")
    assert merged.height == 4 and sorted(merged["stage"].unique()) == ["judge", "plan", "vision"]


def test_no_secret_in_any_output(exported):
    out, _, _, _ = exported
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert "_hf_repo_id" not in cfg and "_base_dir" not in cfg
    assert cfg["export"]["hub_token"] == "<redacted>" and cfg["export"]["token_env"] == "HF_TOKEN"
    assert cfg["vision"]["openai"]["api_key_env"] == "OPENAI_API_KEY"
    assert "<redacted>" in cfg["vision"]["openai"]["prompts"]["system"]
    for p in out.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            for secret in (TOKEN, OPENAI, "me/secret-repo", "/private/dir", "abc-not-a-real-key-123"):
                assert secret.encode() not in data, (p, secret)
    cv = (out / "summary/config_values.csv").read_text()
    assert "vision.openai.model,gpt-5-mini,str" in cv


def test_env_secret_in_output_is_refused(tmp_path, tiny_corpus, monkeypatch):
    """A secret that slipped into a written file (here via the description) stops the export."""
    monkeypatch.setenv("HF_TOKEN", "plainsecretvalue42")
    from benchmaker.export import run as export_run

    with pytest.raises(RuntimeError, match="secret"):
        kw = build_inputs(tmp_path, tiny_corpus, with_costs=False)
        kw.pop("_truth")
        kw["benchmark_meta"] = {**kw["benchmark_meta"], "description": "token plainsecretvalue42"}
        export_run(dataset=str(tmp_path / "ds"), settings={"rows_per_file": 50}, public_config={}, **kw)
    assert not (tmp_path / "ds").exists()


def test_missing_image_drops_whole_query_and_reports(tmp_path, tiny_corpus):
    from benchmaker.export import run as export_run

    corpus = shutil.copytree(tiny_corpus, tmp_path / "images")
    kw = build_inputs(tmp_path, corpus, with_costs=False)
    kw.pop("_truth")
    (corpus / "blue/circle_0.jpg").unlink() if (corpus / "blue/circle_0.jpg").exists() else \
        (corpus / "blue/circle_0.png").unlink()
    meta = export_run(dataset=str(tmp_path / "ds"), settings={"rows_per_file": 50}, public_config={}, **kw)
    # blue/circle_0 is in tiny_q0001's pool only: the query (5 pairs) goes, the other 3 stay whole
    assert meta["counts"]["queries"] == 3 and meta["counts"]["rows"] == 12
    assert meta["checks"]["queries_dropped_missing_images"] == 1
    losses = pl.read_ndjson(tmp_path / "ds" / "losses.jsonl").filter(pl.col("stage") == "export")
    assert losses.filter(pl.col("item_type") == "query")["item_id"].to_list() == ["tiny_q0001"]
    assert losses.filter(pl.col("item_type") == "pair").height == 5
    assert set(losses.filter(pl.col("item_type") == "pair")["reason"]) == {
        "image_file_missing", "query_dropped_with_missing_image"}
    card = (tmp_path / "ds" / "README.md").read_text()
    assert "| export | query | image_missing | 1 |" in card and "left out of the export whole" in card


def test_query_text_must_be_unique_per_query(tmp_path, tiny_corpus):
    from benchmaker.export import run as export_run

    kw = build_inputs(tmp_path, tiny_corpus, with_costs=False)
    truth = kw.pop("_truth")
    q = truth["qrels"].with_columns(
        pl.when((pl.col("query_id") == "tiny_q0002") & pl.col("is_seed")).then(pl.lit("other text"))
        .otherwise(pl.col("query_text")).alias("query_text"))
    write_table(q, "qrels_with_score", kw["scored"])
    with pytest.raises(FormatError, match="query_text is not unique per query_id"):
        export_run(dataset=str(tmp_path / "ds"), settings={}, public_config={}, **kw)


def test_upload_round_trip_against_fake_hub(exported, tmp_path, monkeypatch, caplog):
    import huggingface_hub.constants as hc

    from benchmaker.export.upload import run as upload_run

    out, _, _, _ = exported
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    caplog.set_level(logging.DEBUG)
    receipt = tmp_path / "upload.json"
    with FakeHub() as hub:
        settings = {"repo_id": "me/tiny-bench", "private": True, "token_env": "HF_TOKEN", "endpoint": hub.url}
        res = upload_run(dataset=str(out), receipt=str(receipt), settings=settings)
    assert hub.repos["me/tiny-bench"]["type"] == "dataset"
    assert (hub.repos["me/tiny-bench"].get("private") is True
            or hub.repos["me/tiny-bench"].get("visibility") == "private")
    local = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert hub.files["me/tiny-bench"] == local
    auth = [{k.lower(): v for k, v in r["headers"].items()}.get("authorization") for r in hub.requests]
    assert len(auth) >= 3 and all(a == f"Bearer {TOKEN}" for a in auth)
    rec = json.loads(receipt.read_text())
    assert rec == res and rec["commit_oid"] == hub.commits[-1]["oid"] and rec["repo_id"] == "me/tiny-bench"
    assert rec["commit_url"].endswith(hub.commits[-1]["oid"]) and len(rec["files"]) == len(local)
    assert TOKEN not in receipt.read_text() and TOKEN not in caplog.text


def test_upload_errors_name_the_key(exported, tmp_path, monkeypatch):
    from benchmaker.export.upload import UploadError
    from benchmaker.export.upload import run as upload_run

    out, _, _, _ = exported
    with pytest.raises(UploadError, match="export.repo_id"):
        upload_run(dataset=str(out), receipt=str(tmp_path / "r.json"), settings={"repo_id": None})
    monkeypatch.delenv("MY_HF", raising=False)
    with pytest.raises(UploadError, match="MY_HF"):
        upload_run(dataset=str(out), receipt=str(tmp_path / "r.json"),
                   settings={"repo_id": "me/x", "token_env": "MY_HF"})
    assert not (tmp_path / "r.json").exists()


def test_rules_summary_and_export_through_snakemake(tmp_path, tiny_corpus):
    """The rules hand the right keyword arguments to run(): summary and export alone on prepared inputs."""
    import support

    cfg = support.tiny_config(tmp_path, tiny_corpus, tmp_path / "clip-not-loaded")
    support.write_config(tmp_path / "config.yaml", cfg)
    build_inputs(tmp_path / "prep", tiny_corpus)
    shutil.copytree(tmp_path / "prep" / "results", tmp_path / "results" / "tiny")
    # the offline adapters write empty cost files (and the rules writer lost no query); the rules take them as inputs
    for rel in ("costs/vision/00000.jsonl", "costs/vision/00001.jsonl", "costs/queries.jsonl", "costs/judge.jsonl",
                "losses/queries.jsonl"):
        p = tmp_path / "results" / "tiny" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    # the judge audit (summary and export take its report) reads the judge's qrels: qrels_with_score has them all
    shutil.copyfile(tmp_path / "results" / "tiny" / "qrels_with_score.jsonl",
                    tmp_path / "results" / "tiny" / "qrels.jsonl")
    r = support.snakemake(["-c1", "export", "--allowed-rules", "summary", "export", "audit_sample", "audit_report"],
                          tmp_path, tmp_path / "config.yaml", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / "results" / "tiny" / "hf_dataset"
    md = json.loads((out / "dataset_metadata.json").read_text())
    assert md["counts"]["rows"] == 17 and md["split"] == "test" and len(md["files"]) == 1
    assert md["losses"]["plan"] == {"no_candidates": 2}  # the plan losses file, not the query plan
    assert (tmp_path / "results" / "tiny" / "summary" / "summary.json").is_file()
    assert "rule export" in (tmp_path / "results" / "tiny" / "logs" / "export.log").read_text()
    assert "## Judge audit" in (out / "README.md").read_text() and (out / "audit" / "audit.json").is_file()


def test_card_sources_examples_and_readable_types(exported):
    """The card's license table and example queries are computed from the exported rows."""
    out, _, truth, _ = exported
    card = (out / "README.md").read_text()
    q = truth["qrels"]
    ids = q["image_id"].unique().to_list()
    red = sum(1 for i in ids if i.startswith("red/"))  # build_inputs: red/ is "reds", CC-BY-4.0; the rest CC0
    assert 0 < red < len(ids)
    sources = card.split("## Image sources and licenses", 1)[1].split("\n## ", 1)[0]
    assert f"| reds | CC-BY-4.0 | {red} |" in sources
    assert f"| tiny | CC0-1.0 | {len(ids) - red} |" in sources
    assert "no recorded license" not in sources
    # example queries: the first queries of the file, with their pool size and positives
    per_q = q.group_by("query_id", maintain_order=True).agg(
        pl.col("query_text").first(), pl.len().alias("n"), (pl.col("relevance_label") > 0).sum().alias("p"))
    for qid, text, n, p in per_q.iter_rows():
        assert f"| {qid} | {text} | {n} | {p} |" in card
    assert "| qid | query_text | pairs | positives |" in card  # configured column name
    # column types read as words, not Python class names
    assert "| `img` | image |" in card and "| `tags` | list of string |" in card
    assert "PIL.Image" not in card and "| List |" not in card
    # preprocess is described as it is: duplicates are reported, not quarantined
    assert "duplicate files were quarantined" not in card


def test_nothing_to_export_is_an_error_not_an_unloadable_dataset(tmp_path, tiny_corpus):
    """All pairs lost: the export fails with the counts instead of writing a dataset `datasets` cannot load."""
    from benchmaker.export import run as export_run

    kw = build_inputs(tmp_path, tiny_corpus)
    kw.pop("_truth")
    kw.pop("estimate", None)
    Path(kw["scored"]).write_text("")
    out = tmp_path / "hf_dataset"
    with pytest.raises(ValueError, match=r"no \(query, image\) pair to export.*0 pair\(s\).*'vision': 1"):
        export_run(dataset=str(out), settings={}, similarity={}, public_config={}, **kw)
    assert not out.exists()


def test_ir_views_beir_and_trec(exported):
    """Corpus-level views: each image once in the corpus, one qrels line per exported pair."""
    import pyarrow.parquet as pq

    out, meta, _, _ = exported
    table = pl.concat([pl.from_arrow(pq.read_table(p).drop([COLS["image"]]))
                       for p in sorted((out / "data").glob("*.parquet"))], how="vertical_relaxed")
    queries = pl.read_ndjson(out / "beir" / "queries.jsonl")
    corpus = pl.read_ndjson(out / "beir" / "corpus.jsonl")
    qrels = pl.read_csv(out / "beir" / "qrels" / "test.tsv", separator="\t")
    assert queries.height == table[COLS["query_id"]].n_unique() and queries["_id"].n_unique() == queries.height
    assert corpus["_id"].n_unique() == corpus.height == table[COLS["image_id"]].n_unique()
    assert qrels.columns == ["query-id", "corpus-id", "score"] and qrels.height == table.height
    trec = (out / "trec" / "qrels.txt").read_text().splitlines()
    assert len(trec) == table.height and all(len(line.split()) == 4 and line.split()[1] == "0" for line in trec)
    assert meta["checks"]["ir_views"] == {"queries": queries.height, "corpus": corpus.height, "qrels": qrels.height}


def test_corpus_image_storage_stores_each_image_once(tmp_path, tiny_corpus, monkeypatch):
    """export.image_storage: corpus: rows without bytes, every exported image once in corpus/;
    both configs load with `datasets` from the folder."""
    import datasets

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    out, meta, _, args = _export(tmp_path, tiny_corpus, settings={
        "split": "test", "rows_per_file": 6, "repo_id": "me/tiny-bench", "token_env": "HF_TOKEN",
        "image_storage": "corpus"})
    rows = datasets.load_dataset(str(out), split="test")
    assert rows.num_rows == 17 and "img" not in rows.column_names
    corpus = datasets.load_dataset(str(out), "images", split="test")
    assert isinstance(corpus.features["img"], datasets.Image)
    ids = corpus["img_id"]
    assert len(ids) == len(set(ids)) == len(set(rows["img_id"]))  # each image once, all of them
    raw = corpus.cast_column("img", datasets.Image(decode=False))
    for r in raw:
        assert r["img"]["bytes"] == (tiny_corpus / r["img_id"]).read_bytes()
    files = {f["path"]: f for f in meta["files"]}
    assert sum(f["images_read"] for p, f in files.items() if p.startswith("corpus/")) == len(ids)
    assert sum(f["rows"] for p, f in files.items() if p.startswith("data/")) == 17
    card = (out / "README.md").read_text()
    assert "config_name: images" in card

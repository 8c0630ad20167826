"""`benchmaker import-upstream`: a realistic imsearch_benchmaker config.toml and outputs become a valid
benchmaker config plus cached vision answers, so that the first run pays nothing upstream paid for."""

from __future__ import annotations

import json
from pathlib import Path

import fake_openai
import pytest
import support
import yaml

from benchmaker.cli import main
from benchmaker.config import load_config
from benchmaker.upstream import convert_config

FACETS = support.TINY_FACETS


def upstream_toml(root: Path, corpus: Path, outputs: Path) -> Path:
    tax = "\n".join(f"{k} = {json.dumps(v)}" for k, v in FACETS["taxonomy"].items())
    text = f'''
benchmark_name = "Tiny Upstream Bench"
benchmark_description = "A benchmark made with imsearch_benchmaker"
benchmark_author = "Ada Lovelace"
_email = "hub-login@example.org"
benchmark_author_email = "ada@example.org"
benchmark_author_affiliation = "Analytical Engines"
benchmark_author_orcid = "0000-0000-0000-0001"
_github = "ada"
log_level = "DEBUG"
column_image = "image"
column_query_id = "query_id"
column_relevance = "relevance_label"
columns_boolean = {json.dumps(FACETS["boolean"])}
image_root_dir = "{corpus}"
images_jsonl = "{outputs}/images.jsonl"
annotations_jsonl = "{outputs}/annotations.jsonl"
query_plan_jsonl = "{outputs}/query_plan.jsonl"
qrels_jsonl = "{outputs}/qrels.jsonl"
summary_output_dir = "{outputs}/summary"
hf_dataset_dir = "{outputs}/hf_dataset"
image_base_url = "http://127.0.0.1:9/images"
upload_use_local_image_paths = false
_hf_token = "hf_secret_token_value"
_hf_repo_id = "sage/tiny-upstream"
_hf_private = true
query_plan_num_seeds = 3
query_plan_core_facets = ["color"]
query_plan_off_facets = ["shape"]
query_plan_diversity_facets = []
query_plan_neg_total = 3
query_plan_neg_hard = 1
query_plan_neg_nearmiss = 1
query_plan_neg_easy = 1
query_plan_random_seed = 0
a_key_upstream_never_had = 1

[columns_taxonomy]
{tax}

[vision_config]
adapter = "openai"
model = "gpt-5-mini"
system_prompt = "You label shapes. Collection: {{metadata.category}}."
user_prompt = "Analyze the image; output JSON."
max_output_tokens = 4000
reasoning_effort = "low"
image_detail = "low"
max_images_per_batch = 900
controlled_tag_vocab = {json.dumps(FACETS["tags"]["vocabulary"])}
min_tags = 2
max_tags = 4
vision_metadata_columns = ["category"]
_openai_api_key = "sk-upstream-secret"
completion_window = "24h"
price_per_million_input_tokens = 0.125
price_per_million_cached_input_tokens = 0.0125
price_per_million_output_tokens = 1.0
price_per_million_image_input_tokens = 0.1
max_concurrent_batches = 2

[judge_config]
adapter = "openai"
model = "gpt-5-mini"
system_prompt = "You judge relevance."
user_prompt = "Write a query and label each candidate."
max_queries_per_batch = 500
max_candidates = 20
price_per_million_input_tokens = 0.125
price_per_million_output_tokens = 1.0

[similarity_config]
adapter = "local_clip"
model_name = "openai/clip-vit-base-patch32"
device = "cpu"
torch_dtype = "float32"
col_name = "clip_score"
'''
    p = root / "config.toml"
    p.write_text(text)
    return p


def upstream_outputs(outputs: Path, corpus: Path, skip: int = 2) -> list[str]:
    """images.jsonl, annotations.jsonl (all but `skip` images), query_plan.jsonl, qrels.jsonl."""
    outputs.mkdir(parents=True, exist_ok=True)
    ids = sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*") if p.is_file())
    images, ann = [], []
    for i in ids:
        color, shape = i.split("/")[0], i.split("/")[1].split("_")[0]
        images.append({"image_id": i, "image_url": f"http://127.0.0.1:9/images/{i}", "mime_type": "image/jpeg",
                       "license": "CC0-1.0", "doi": None, "original_dataset_name": "tiny", "category": color})
        ann.append({"image_id": i, "summary": f"A {color} {shape}.", "color": color, "shape": shape,
                    "is_bright": color in ("yellow", "red"), "tags": [color, shape, "pattern"],
                    "confidence": {"color": 0.9, "shape": 0.8, "is_bright": 0.7},
                    "license": "CC0-1.0", "doi": None})
    (outputs / "images.jsonl").write_text("".join(json.dumps(r) + "\n" for r in images))
    (outputs / "annotations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ann[skip:]))
    # query_001: seed + neg_hard/nearmiss/easy (1/1/1) -> pools by position; query_002: the same, with an
    # easy candidate that is not in the corpus (dropped with a loss); query_003: two negatives -> 'imported'
    plan = [{"query_id": "query_001", "seed_image_ids": [ids[5]], "candidate_image_ids": ids[5:9]},
            {"query_id": "query_002", "seed_image_ids": [ids[10]],
             "candidate_image_ids": [*ids[10:13], "gone/never_there.jpg"]},
            {"query_id": "query_003", "seed_image_ids": [ids[15]], "candidate_image_ids": ids[15:18]}]
    (outputs / "query_plan.jsonl").write_text("".join(json.dumps(r) + "\n" for r in plan))
    qrels = [{"query_id": q["query_id"], "query_text": f"upstream text of {q['query_id']}", "image_id": c,
              "relevance_label": int(c == q["seed_image_ids"][0] or c == ids[7])}
             for q in plan for c in q["candidate_image_ids"]]
    # upstream's judge never labelled query_003's last candidate: that query is judged again
    (outputs / "qrels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in qrels[:-1]))
    return ids


@pytest.fixture()
def upstream(tmp_path):
    corpus = support.make_corpus(tmp_path / "images", with_bad=False)
    outputs = tmp_path / "upstream_outputs"
    ids = upstream_outputs(outputs, corpus)
    return upstream_toml(tmp_path, corpus, outputs), outputs, ids


def test_config_conversion(upstream, tmp_path, capsys):
    toml, outputs, ids = upstream
    out = tmp_path / "imported.yaml"
    assert main(["import-upstream", str(toml), "--outputs", str(outputs), "--out", str(out),
                 "--results", str(tmp_path / "results")]) == 0
    text = capsys.readouterr().out
    # secrets dropped with a warning, never written
    for s in ("_openai_api_key", "_hf_token", "_email"):
        assert f"warning: secret {s} dropped" in text or f"secret vision_config.{s}" in text
    written = out.read_text()
    for secret in ("sk-upstream-secret", "hf_secret_token_value", "hub-login@example.org"):
        assert secret not in written and secret not in text
    # unknown keys listed, never silently dropped
    assert "unknown upstream key a_key_upstream_never_had" in text
    assert "unknown upstream key vision_config.max_concurrent_batches" in text
    assert "not imported (no equivalent): log_level" in text
    assert "vision_config.price_per_million_image_input_tokens" in text
    cfg = load_config(out)
    assert cfg["benchmark"]["name"] == "tiny-upstream-bench" and cfg["benchmark"]["title"] == "Tiny Upstream Bench"
    author = cfg["benchmark"]["authors"][0]
    assert (author["name"], author["affiliation"], author["orcid"]) == ("Ada Lovelace", "Analytical Engines",
                                                                         "0000-0000-0000-0001")
    # upstream's benchmark_author_<field> keys (FireBench's config.toml), and the older _<field> form
    assert (author["email"], author["github"]) == ("ada@example.org", "ada")
    assert cfg["facets"]["taxonomy"] == FACETS["taxonomy"] and cfg["facets"]["boolean"] == ["is_bright"]
    assert cfg["facets"]["tags"]["vocabulary"] == FACETS["tags"]["vocabulary"]
    assert (cfg["facets"]["tags"]["min"], cfg["facets"]["tags"]["max"]) == (2, 4)
    v = cfg["vision"]["openai"]
    assert cfg["vision"]["adapter"] == "openai" and v["model"] == "gpt-5-mini" and v["mode"] == "batch"
    assert v["prompts"]["system"].startswith("You label shapes") and v["metadata_columns"] == ["category"]
    assert v["image_transport"] == "url" and cfg["preprocess"]["image_base_url"] == "http://127.0.0.1:9/images"
    assert v["max_requests_per_batch"] == 900 and v["image_detail"] == "low"
    # prices keep their meaning: upstream's batch prices, no second discount
    assert v["prices"] == {"input": 0.125, "cached_input": 0.0125, "output": 1.0} and v["batch_discount"] == 0.0
    j = cfg["judge"]["openai"]
    assert cfg["judge"]["adapter"] == "openai" and j["prices"]["input"] == 0.125 and j["batch_discount"] == 0.0
    assert j["max_requests_per_batch"] == 500
    # upstream's judge wrote the query and labelled: its system prompt instructs both stages here, its user
    # prompt (write a query, then label) the query writer; the labelling keeps the built-in user prompt
    assert j["prompts"] == {"system": "You judge relevance.", "user": None}
    assert cfg["queries"]["prompts"] == {"system": "You judge relevance.",
                                         "user": "Write a query and label each candidate."}
    assert cfg["similarity"]["model"] == "ViT-B-32" and cfg["similarity"]["pretrained"] == "openai"
    assert cfg["similarity"]["precision"] == "fp32" and cfg["similarity"]["logit_column"] == "clip_logit"
    p = cfg["plan"]
    assert (p["num_seeds"], p["core_facets"], p["off_facets"], p["random_seed"]) == (3, ["color"], ["shape"], 42)
    assert (p["neg_total"], p["neg_hard"], p["pos_total"], p["neutral_total"]) == (3, 1, 0, 0)
    assert cfg["export"]["repo_id"] == "sage/tiny-upstream" and cfg["export"]["private"] is True
    # upstream's plan and judge labels are reused: fixed pools, labels answered from the file
    assert cfg["paths"]["seeds_file"] is None
    pools = [json.loads(x) for x in Path(cfg["paths"]["pools_file"]).read_text().splitlines()]
    assert [p["query_id"] for p in pools] == ["query_001", "query_002", "query_003"]
    assert pools[0] == {"query_id": "query_001", "seed_image_ids": [ids[5]], "candidate_image_ids": ids[5:9]}
    reuse = [json.loads(x) for x in Path(cfg["paths"]["judge_reuse_file"]).read_text().splitlines()]
    assert len(reuse) == 10 and reuse[0]["judge"] == "imsearch_benchmaker"
    assert "paths.pools_file" in text and "paths.judge_reuse_file" in text
    assert "2 of 3 upstream pools have neg_hard + neg_nearmiss + neg_easy = 3 candidates" in text
    meta = [json.loads(x) for x in Path(cfg["paths"]["metadata_jsonl"]).read_text().splitlines()]
    assert len(meta) == len(ids) and meta[0]["category"] and "image_url" not in meta[0]
    rights = json.loads(Path(cfg["paths"]["rights_map"]).read_text())
    assert rights["files"][ids[0]] == {"license": "CC0-1.0", "doi": None, "dataset_name": "tiny"}
    assert f"vision: {len(ids) - 2} upstream annotation(s) stored as cached answers" in text
    # the written config is also valid for the workflow's own checks
    assert main(["validate-config", "--no-env", str(out)]) == 0
    # refusing to overwrite without --force
    assert main(["import-upstream", str(toml), "--out", str(out)]) == 1


def test_batch_prices_are_not_discounted_twice():
    from benchmaker.providers.cost import Usage, cost_usd, price_for

    cfg, _ = convert_config({"benchmark_name": "x", "image_root_dir": "/tmp", "columns_taxonomy": {"a": ["b", "c"]},
                             "vision_config": {"adapter": "openai", "model": "gpt-5-mini",
                                               "price_per_million_input_tokens": 0.125,
                                               "price_per_million_output_tokens": 1.0}})
    s = cfg["vision"]["openai"]
    usd = cost_usd(Usage(1_000_000, 0, 1_000_000, 0), price_for(s["model"], s["prices"]),
                   batch=s["mode"] == "batch", batch_discount=s["batch_discount"])
    assert usd == pytest.approx(1.125)          # what upstream's own cost formula gives for its batch run


@pytest.mark.slow
def test_rerun_after_import_pays_nothing_upstream_paid(upstream, tmp_path, capsys):
    """One workflow run up to qrels.jsonl on the imported config, against the fake OpenAI server: vision
    requests only for the images upstream never annotated, judge requests only for the query upstream's
    labels do not fully cover (upstream's pools are the plan); `estimate` says so before the run."""
    toml, outputs, ids = upstream
    out = tmp_path / "imported.yaml"
    assert main(["import-upstream", str(toml), "--outputs", str(outputs), "--out", str(out),
                 "--results", str(tmp_path / "results")]) == 0
    cfg = yaml.safe_load(out.read_text())
    cfg["vision"]["openai"]["poll_seconds"] = 0.05      # not part of the request key
    cfg["judge"]["openai"]["poll_seconds"] = 0.05
    support.write_config(out, cfg)
    capsys.readouterr()
    # before anything runs: upstream's pools and labels make two of the three queries free
    assert main(["estimate", "--json", str(out)]) == 0
    est = {ln["stage"]: ln for ln in json.loads(capsys.readouterr().out)}
    assert est["judge"]["source"].startswith("paths.pools_file")
    assert (est["judge"]["reused"], est["judge"]["requests"]) == (2, 1)
    assert (est["queries"]["reused"], est["queries"]["requests"]) == (2, 1)      # their texts are upstream's
    modes = est["judge"]["labelling_modes"]        # labelling with images priced beside text-only
    assert modes["with_images"]["input_tokens"] > modes["text_only"]["input_tokens"]
    assert est["vision"]["cached"] == len(ids) - 2 and est["vision"]["requests"] == 2
    fake = fake_openai.start(steps=1)
    try:
        res_dir = f"{tmp_path}/results/tiny-upstream-bench"
        targets = [f"{res_dir}/annotations.jsonl", f"{res_dir}/images.jsonl", f"{res_dir}/qrels.jsonl",
                   f"{res_dir}/queries.jsonl"]
        r = support.snakemake(["--cores", "2", *targets], tmp_path, out,
                              env={"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": fake.base_url})
        assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
        res = tmp_path / "results" / "tiny-upstream-bench"
        costs = [json.loads(x) for f in sorted((res / "costs" / "vision").glob("*.jsonl"))
                 for x in f.read_text().splitlines()]
        cached = [c for c in costs if c["cached"]]
        paid = [c for c in costs if not c["cached"]]
        assert len(cached) == len(ids) - 2 and all(c["cost_usd"] == 0 for c in cached)
        assert len(paid) == 2                               # only the two images upstream never annotated
        ann = [json.loads(x) for x in (res / "annotations.jsonl").read_text().splitlines()]
        assert len(ann) == len(ids)
        by_id = {a["image_id"]: a for a in ann}
        some = ids[5]
        assert by_id[some]["summary"] == f"A {some.split('/')[0]} {some.split('/')[1].split('_')[0]}."
        images = [json.loads(x) for x in (res / "images.jsonl").read_text().splitlines()]
        assert {i["license"] for i in images} == {"CC0-1.0"}
        assert {i["original_dataset_name"] for i in images} == {"tiny"}
        assert "reserved" not in r.stderr
        # the plan is upstream's pools: names by position where the quotas add up, else 'imported'
        plan = {p["query_id"]: p for p in map(json.loads, (res / "query_plan.jsonl").read_text().splitlines())}
        assert list(plan) == ["query_001", "query_002", "query_003"]
        assert [(c["image_id"], c["pool"]) for c in plan["query_001"]["candidates"]] == [
            (ids[5], "seed"), (ids[6], "hard"), (ids[7], "nearmiss"), (ids[8], "easy")]
        assert plan["query_002"]["candidate_image_ids"] == ids[10:13]      # the missing image dropped ...
        assert [c["pool"] for c in plan["query_003"]["candidates"]] == ["seed", "imported", "imported"]
        lost = [json.loads(x) for x in (res / "losses" / "plan.jsonl").read_text().splitlines()]
        assert [(x["item_id"], x["reason"]) for x in lost] == [("gone/never_there.jpg", "candidate_not_annotated")]
        # the query writer and the judge: exactly one request each (query_003), none for the queries
        # upstream labelled, which keep upstream's query text (no narrative)
        judge_bills = [b for b in fake.bill if b["custom_id"].startswith("judge")]
        assert len(judge_bills) == 1, fake.bill
        assert len([b for b in fake.bill if b["custom_id"].startswith("queries")]) == 1, fake.bill
        written = {q["query_id"]: q for q in map(json.loads, (res / "queries.jsonl").read_text().splitlines())}
        assert written["query_001"]["writer"] == "imported:imsearch_benchmaker"
        assert written["query_001"]["narrative"] is None and written["query_003"]["narrative"]
        qrels = [json.loads(x) for x in (res / "qrels.jsonl").read_text().splitlines()]
        up = {(q["query_id"], q["image_id"]): q for q in map(json.loads, (outputs / "qrels.jsonl").read_text()
                                                             .splitlines())}
        for q in qrels:
            if q["query_id"] == "query_003":
                assert q["judge"] == "openai:gpt-5-mini"
                continue
            u = up[(q["query_id"], q["image_id"])]
            assert (q["query_text"], q["relevance_label"], q["judge"]) == (
                u["query_text"], u["relevance_label"], "imported:imsearch_benchmaker")
        assert len([q for q in qrels if q["query_id"] != "query_003"]) == 4 + 3
        jc = [json.loads(x) for x in (res / "costs" / "judge.jsonl").read_text().splitlines()]
        reused = [c for c in jc if c["mode"] == "imported"]
        assert sorted(c["item_id"] for c in reused) == ["query_001", "query_002"]
        assert all(c["cost_usd"] == 0 and c["cached"] for c in reused)
        assert [c["item_id"] for c in jc if c["mode"] != "imported"] == ["query_003"]
    finally:
        fake_openai.stop(fake)
    # after the run: nothing left to pay (query_003's answer is cached), the two reused queries still free
    capsys.readouterr()
    assert main(["estimate", "--json", str(out)]) == 0
    est = {ln["stage"]: ln for ln in json.loads(capsys.readouterr().out)}
    assert (est["judge"]["reused"], est["judge"]["requests"], est["judge"]["cached"]) == (2, 0, 1)
    assert est["judge"]["usd"] == 0


def test_card_says_pools_and_labels_were_reused():
    """The dataset card's "How it was built": a pools-file plan, and how many queries / pairs kept labels
    reused from paths.judge_reuse_file (summary.json `judges`, judge `imported:<source>`)."""
    import polars as pl

    from benchmaker.export.card import render_card
    from benchmaker.formats import FacetModel

    fm = FacetModel.from_config({"taxonomy": {"color": ["red", "blue"]}, "boolean": [],
                                 "tags": {"min": 0, "max": 3, "vocabulary": []}})
    counts = {"rows": 5, "queries": 2, "images": 5, "positive_pairs": 2,
              "positives_per_query": {"mean": 1.0, "min": 1, "max": 1}, "queries_without_positives": 0,
              "relevance_distribution": {"0": 3, "1": 2}, "seed_not_relevant_queries": 0, "pairs_without_clip_score": 0}

    def card(paths, judges):
        md = render_card(meta={"name": "x", "title": "X"}, features={}, files=[], split="test", counts=counts,
                         checks={}, losses=pl.DataFrame(schema={"stage": pl.String, "item_type": pl.String,
                                                                "reason": pl.String}),
                         quarantine=pl.DataFrame(schema={"reason": pl.String}), costs=None,
                         config={"paths": paths, "judge": {"adapter": "openai"}}, similarity={},
                         summary={"judges": judges}, columns={}, image_col="image", facets=fm, repo_id=None,
                         config_digest="0" * 64, version="v")
        return md[md.index("## How it was built"):md.index("## Losses")]

    built = card({"pools_file": "imported/pools.jsonl"}, {"imported:imsearch_benchmaker": {"queries": 1, "pairs": 3},
                                                          "openai:gpt-5-mini": {"queries": 1, "pairs": 2}})
    assert "3. **Query plan**: fixed pools read from a pools file (`paths.pools_file`" in built
    assert "except for 1 queries (3 pairs) whose query text and labels were reused" in built
    assert "`imsearch_benchmaker`" in built
    built = card({}, {"openai:gpt-5-mini": {"queries": 2, "pairs": 5}})
    assert "seeds sampled" in built and "reused" not in built

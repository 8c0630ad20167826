"""The evaluate target's library: runs, systems, ranx metrics, drill-downs, significance."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import fake_openai
import numpy as np
import polars as pl
import pytest
from openai_helpers import images_frame
from support import TINY_FACETS

from benchmaker.config import ConfigError
from benchmaker.evaluate import stage, systems
from benchmaker.evaluate.runs import corpus_view, rank_dense, read_run, write_run
from benchmaker.formats import write_table
from benchmaker.ids import trec_id

ODD = "red/my café circle #1.jpg"


@pytest.fixture()
def bench(tmp_path, tiny_corpus):
    root = tmp_path / "images"
    shutil.copytree(tiny_corpus, root)
    first = min((root / "red").glob("*.jpg"))
    first.rename(root / ODD)
    imgs = images_frame(root).drop("caption")
    write_table(imgs, "images", tmp_path / "images.jsonl")
    rows = []
    for iid in imgs["image_id"].to_list():
        color = iid.split("/")[0] if iid.split("/")[0] in TINY_FACETS["taxonomy"]["color"] else "unknown"
        shape = next((s for s in ("circle", "square", "stripes") if s in iid), "unknown")
        rows.append({"image_id": iid, "summary": f"a {color} {shape} picture", "tags": [color, shape],
                     "confidence": {"color": 0.9}, "annotator": "test", "color": color, "shape": shape,
                     "is_bright": color in ("yellow", "red")})
    ann = pl.DataFrame(rows)
    write_table(ann, "annotations", tmp_path / "annotations.jsonl")
    q = []
    ids = imgs["image_id"].to_list()
    for n, color in enumerate(("red", "blue", "green")):
        mine = [i for i in ids if i.startswith(color + "/")]
        other = [i for i in ids if not i.startswith(color + "/")][n * 3:n * 3 + 4]
        for j, iid in enumerate(mine + other):
            q.append({"query_id": f"q {n}", "query_text": f"a {color} thing", "image_id": iid,
                      "relevance_label": int(iid in mine), "pool": "seed" if j == 0 else ("positive" if iid in mine
                                                                                           else "hard"),
                      "is_seed": j == 0, "seed_not_relevant": False, "judge": "test"})
    # a query whose pool has no relevant image: left out of the metrics, counted
    q += [{"query_id": "q none", "query_text": "nothing", "image_id": ids[0], "relevance_label": 0, "pool": "seed",
           "is_seed": True, "seed_not_relevant": True, "judge": "test"}]
    write_table(pl.DataFrame(q), "qrels", tmp_path / "qrels.jsonl")
    return tmp_path


def _run_system(bench: Path, system: dict, all_systems: list[dict], **kw) -> dict:
    out = bench / "evaluate" / "runs"
    out.mkdir(parents=True, exist_ok=True)
    return systems.run(system=system, systems=all_systems, qrels=str(bench / "qrels.jsonl"),
                       images=str(bench / "images.jsonl"), annotations=str(bench / "annotations.jsonl"),
                       run_file=str(out / f"{system['name']}.trec"), meta=str(out / f"{system['name']}.json"),
                       losses=str(bench / "losses" / f"{system['name']}.jsonl"),
                       costs=str(bench / "costs" / f"{system['name']}.jsonl"), image_root=str(bench / "images"),
                       facets=TINY_FACETS, **kw)


def _aggregate(bench: Path, names: list[str], **settings) -> dict:
    d = bench / "evaluate"
    return stage.run(qrels=str(bench / "qrels.jsonl"), images=str(bench / "images.jsonl"),
                       annotations=str(bench / "annotations.jsonl"),
                       runs=[str(d / "runs" / f"{n}.trec") for n in names],
                       metas=[str(d / "runs" / f"{n}.json") for n in names],
                       leaderboard_csv=str(d / "leaderboard.csv"), leaderboard_json=str(d / "leaderboard.json"),
                       drilldown=str(d / "drilldown.csv"), significance_csv=str(d / "significance.csv"),
                       per_query=str(d / "per_query.csv"), settings={"k": [5], **settings}, facets=TINY_FACETS,
                       sage_leaderboard=str(d / "sage_leaderboard.csv"))


def test_run_file_round_trip_odd_ids_and_ranx_reads_it(tmp_path):
    from ranx import Run

    run = pl.DataFrame({"query_id": ["q 1", "q 1", "q 2"], "image_id": [ODD, "a/b.jpg", "été/x y.png"],
                        "score": [0.5, 0.9, 0.1]})
    path = tmp_path / "r.trec"
    assert write_run(run, path, "sys") == 3
    lines = path.read_text().splitlines()
    assert lines[0] == f"{trec_id('q 1')} Q0 a/b.jpg 1 0.9 sys" and all(len(x.split()) == 6 for x in lines)
    back = read_run(path)
    assert back.sort("image_id").equals(run.sort("image_id"))
    r = Run.from_file(str(path), kind="trec")
    assert r.to_dict()[trec_id("q 1")][trec_id(ODD)] == 0.5
    # tabs and repeated spaces (other tools' files) read the same through the careful reader
    (tmp_path / "tabs.trec").write_text(path.read_text().replace(" Q0 ", "\tQ0  "))
    assert read_run(tmp_path / "tabs.trec").sort("image_id").equals(back.sort("image_id"))
    with pytest.raises(Exception, match="appears twice"):
        (tmp_path / "dup.trec").write_text("q1 Q0 a 1 0.5 x\nq1 Q0 a 2 0.4 x\n")
        read_run(tmp_path / "dup.trec")
    with pytest.raises(Exception, match="6 fields"):
        (tmp_path / "bad.trec").write_text("q1 Q0 a b 1 0.5 x\n")
        read_run(tmp_path / "bad.trec")


def test_rank_dense_keeps_top_depth_and_every_pool_image():
    rng = np.random.default_rng(0)
    docs = rng.normal(size=(50, 8)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    qs = docs[:3] + 0.01
    pools = [np.array([40, 41]), np.array([], dtype=np.int64), np.array([0, 49])]
    ids = [f"d{i}" for i in range(50)]
    run = rank_dense(qs, docs, ["a", "b", "c"], ids, pools, depth=5, chunk=2)
    per = run.group_by("query_id").agg("image_id")
    got = dict(per.iter_rows())
    assert {"d40", "d41"} <= set(got["a"]) and len(got["b"]) == 5 and {"d0", "d49"} <= set(got["c"])
    exact = np.argsort(-(qs[0] @ docs.T))[:5]
    assert corpus_view(run, 5).filter(pl.col("query_id") == "a")["image_id"].to_list() == [ids[i] for i in exact]


def test_check_systems_names_the_key():
    with pytest.raises(ConfigError, match=r"evaluate.systems\[1\].name"):
        systems.check_systems({"systems": [{"name": "a", "kind": "bm25"}, {"name": "a", "kind": "bm25"}]})
    with pytest.raises(ConfigError, match=r"evaluate.systems\[0\].systems"):
        systems.check_systems({"systems": [{"name": "h", "kind": "hybrid", "systems": ["a", "zz"]},
                                           {"name": "a", "kind": "bm25"}]})
    with pytest.raises(ConfigError, match="do not apply"):
        systems.check_systems({"systems": [{"name": "a", "kind": "bm25", "model": "x"}]})
    with pytest.raises(ConfigError, match="name"):
        systems.check_systems({"systems": [{"name": "a b", "kind": "bm25"}]})
    assert systems.check_systems({}) == []
    # the same checks run when a config is loaded (benchmaker validate-config)
    import yaml

    from benchmaker.config import validate_config

    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())
    cfg["evaluate"] = {"systems": [{"name": "r", "kind": "rerank", "base": "nope"}], "facets": ["zz"]}
    with pytest.raises(ConfigError, match=r"evaluate.systems\[0\].base(.|\n)*evaluate.facets: 'zz'"):
        validate_config(cfg)


@pytest.mark.slow
def test_systems_metrics_equal_ranx_and_drilldowns(bench, tiny_clip, monkeypatch):
    from ranx import Qrels, Run, evaluate

    fake = fake_openai.start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    try:
        ids = pl.read_ndjson(bench / "images.jsonl")["image_id"].to_list()
        reds = [i for i in ids if i.startswith("red/") and i != ODD]
        blues = [i for i in ids if i.startswith("blue/")]
        ext = bench / "external.trec"
        ext.write_text("".join(f"{trec_id('q 0')} Q0 {trec_id(i)} {n + 1} {1.0 - n / 10} ext\n" for n, i in
                               enumerate([reds[-1], ODD, blues[0], "nope.jpg"])))
        sys_list = systems.check_systems({"systems": [
            {"name": "bm25", "kind": "bm25"},
            {"name": "clip", "kind": "clip", "model": f"local-dir:{tiny_clip}", "device": "cpu", "num_workers": 0},
            {"name": "fused", "kind": "hybrid", "systems": ["bm25", "clip"]},
            {"name": "vlm", "kind": "rerank", "base": "bm25", "k": 3,
             "llm": {"model": "gpt-5-mini", "base_url": fake.base_url, "image_max_side": 64, "max_attempts": 1}},
            {"name": "ext", "kind": "trec_run", "path": str(ext)},
        ], "depth": 10})

        def answer(body, schema):  # reverse the candidate order: a valid permutation
            keys = schema["properties"]["ranking"]["items"]["enum"]
            return {"ranking": list(reversed(keys))}

        fake.answer = answer
        d = bench / "evaluate" / "runs"
        _run_system(bench, sys_list[0], sys_list)
        _run_system(bench, sys_list[1], sys_list, cache_dir=str(bench / "cache"), threads=1)
        _run_system(bench, sys_list[2], sys_list, component_runs=[str(d / "bm25.trec"), str(d / "clip.trec")])
        meta = _run_system(bench, sys_list[3], sys_list, component_runs=[str(d / "bm25.trec")],
                           llm_cache_dir=str(bench / "llm"))
        assert meta["timing"]["reranked_queries"] == 4 and meta["cost_usd"] > 0 and meta["sees_judge_text"]
        ext_meta = _run_system(bench, sys_list[4], sys_list, external=str(ext))
        assert ext_meta["losses"] == 1  # nope.jpg is not in the corpus
        # the reranker put bm25's third image first
        bm = read_run(d / "bm25.trec").sort(["query_id", "score"], descending=[False, True])
        vl = read_run(d / "vlm.trec").sort(["query_id", "score"], descending=[False, True])
        q0 = lambda r: r.filter(pl.col("query_id") == "q 0")["image_id"].to_list()
        assert q0(vl)[:3] == list(reversed(q0(bm)[:3]))
        # a second rerank run is served from the cache: nothing sent, nothing paid
        sent = fake.count("POST", "/v1/responses")
        _run_system(bench, sys_list[3], sys_list, component_runs=[str(d / "bm25.trec")],
                    llm_cache_dir=str(bench / "llm"))
        assert fake.count("POST", "/v1/responses") == sent
    finally:
        fake_openai.stop(fake)
    names = [s["name"] for s in sys_list]
    doc = _aggregate(bench, names, sage={"limit": 5})
    board = pl.read_csv(bench / "evaluate" / "leaderboard.csv")
    assert doc["queries_evaluated"] == 3 and doc["queries_without_positive"] == 1
    assert set(board.filter(pl.col("scope") == "corpus")["system"]) == set(names)
    bm25_row = board.filter((pl.col("system") == "bm25") & (pl.col("scope") == "pool")).row(0, named=True)
    assert bm25_row["sees_judge_text"] is True
    assert board.filter(pl.col("system") == "clip")["sees_judge_text"].to_list() == [False] * 4
    assert set(board.filter(pl.col("scope") == "exported")["system"]) == {"clip", "bm25"}  # collection kinds
    # values equal ranx's own on the TREC files: corpus scope of the external run (depth >= its length)
    qrels = pl.read_ndjson(bench / "qrels.jsonl")
    qfile = bench / "qrels.txt"
    qfile.write_text("".join(f"{trec_id(a)} 0 {trec_id(b)} {c}\n" for a, b, c in
                             qrels.select("query_id", "image_id", "relevance_label").iter_rows()))
    q = Qrels.from_file(str(qfile), kind="trec")
    q = Qrels({k: v for k, v in q.to_dict().items() if any(x > 0 for x in v.values())})
    want = evaluate(q, Run.from_file(str(d / "ext.trec"), kind="trec"),
                    ["ndcg@5", "map", "mrr", "precision@5", "recall@5", "hit_rate@5"], make_comparable=True)
    row = board.filter((pl.col("system") == "ext") & (pl.col("scope") == "corpus")).row(0, named=True)
    for m, v in want.items():
        assert row[m] == pytest.approx(v, abs=1e-6), m
    # the exported scope: clip's ranking of the exported images only (each judged image once), scored over
    # every query of the export, the one without a positive included (as mteb and trec_eval score it)
    exported = set(qrels["image_id"].map_elements(trec_id, return_dtype=pl.String))
    depth = json.loads((d / "clip.json").read_text())["collection_depth"]
    kept: dict[str, list[str]] = {}
    for line in (d / "clip.trec").read_text().splitlines():  # file order = score order (no ties)
        if line.split()[2] in exported and len(kept.setdefault(line.split()[0], [])) < depth:
            kept[line.split()[0]].append(line)
    (bench / "exported.trec").write_text("".join(x + "\n" for v in kept.values() for x in v))
    want = evaluate(Qrels.from_file(str(qfile), kind="trec"), Run.from_file(str(bench / "exported.trec"), kind="trec"),
                    ["ndcg@5", "map", "mrr"], make_comparable=True)
    row = board.filter((pl.col("system") == "clip") & (pl.col("scope") == "exported")).row(0, named=True)
    assert row["queries"] == 4
    for m, v in want.items():
        assert row[m] == pytest.approx(v, abs=1e-6), m
    # drill-downs and significance
    drill = pl.read_csv(bench / "evaluate" / "drilldown.csv")
    assert {"difficulty", "facet:color", "candidate_pool"} <= set(drill["dimension"])
    assert drill.filter(pl.col("dimension") == "facet:color")["value"].to_list()[:1]
    sig = pl.read_csv(bench / "evaluate" / "significance.csv")
    assert sig.height and (sig["p_adjusted"] >= sig["p_value"] - 1e-12).all()
    assert json.loads((bench / "evaluate" / "leaderboard.json").read_text())["systems"][0]["results"]
    # the sage view of every corpus-ranked run; clip and bm25 runs hold the judged collection's top depth
    # (10), so their lists (limit 5) are complete
    from benchmaker.evaluate.sage import sage_columns

    sage = pl.read_csv(bench / "evaluate" / "sage_leaderboard.csv")
    assert set(sage["system"]) == set(names) and (sage["queries"] == 4).all()  # every distinct text
    for name in ("bm25", "clip"):
        per = pl.read_csv(bench / "evaluate" / "sage" / f"{name}.csv")
        assert per.columns[:14] == sage_columns() and per["complete"].all() and (per["total_images"] == 5).all()
        assert json.loads((d / f"{name}.json").read_text())["collection_depth"] == 10


def test_no_systems_gives_an_empty_leaderboard(bench):
    doc = _aggregate(bench, [])
    assert doc["systems"] == [] and (bench / "evaluate" / "leaderboard.csv").is_file()


def test_gemini_reranker_through_the_provider_layer(bench, monkeypatch):
    import fake_gemini

    fake = fake_gemini.start()
    monkeypatch.setenv("GEMINI_API_KEY", fake_gemini.KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    try:
        ids = pl.read_ndjson(bench / "images.jsonl")["image_id"].to_list()
        base = bench / "base.trec"
        base.write_text("".join(f"{trec_id('q 0')} Q0 {trec_id(i)} {n + 1} {1 - n / 100} b\n"
                                for n, i in enumerate(ids[:5])))
        sys_list = systems.check_systems({"systems": [
            {"name": "b", "kind": "trec_run", "path": str(base)},
            {"name": "gem", "kind": "rerank", "base": "b", "k": 4, "provider": "gemini",
             "llm": {"model": "gemini-2.5-flash", "base_url": fake.base_url, "image_max_side": 64}}]})
        fake.answer = lambda req, schema: {"ranking": list(reversed(schema["properties"]["ranking"]["items"]["enum"]))}
        meta = _run_system(bench, sys_list[1], sys_list, component_runs=[str(base)], llm_cache_dir=str(bench / "llm"))
    finally:
        fake_gemini.stop(fake)
    assert meta["timing"]["reranked_queries"] == 1 and meta["cost_usd"] > 0
    got = read_run(bench / "evaluate" / "runs" / "gem.trec").sort("score", descending=True)["image_id"].to_list()
    assert got == list(reversed(ids[:4])) + [ids[4]]
    costs = pl.read_ndjson(bench / "costs" / "gem.jsonl")
    assert costs.height == 1 and costs["stage"][0] == "evaluate"


def test_leaderboard_in_report_and_card(bench, tmp_path):
    from benchmaker.evaluate.report import card_markdown, summary_section

    ids = pl.read_ndjson(bench / "images.jsonl")["image_id"].to_list()
    runs = {}
    for name, order in (("fwd", ids), ("rev", ids[::-1])):
        p = bench / f"{name}.trec"
        p.write_text("".join(f"{trec_id(q)} Q0 {trec_id(i)} {n + 1} {100 - n} {name}\n"
                             for q in ("q 0", "q 1", "q 2") for n, i in enumerate(order)))
        runs[name] = p
    sys_list = systems.check_systems({"systems": [
        {"name": "fwd", "kind": "trec_run", "path": str(runs["fwd"]), "sees_judge_text": True},
        {"name": "rev", "kind": "trec_run", "path": str(runs["rev"])}]})
    for s in sys_list:
        _run_system(bench, s, sys_list, external=str(runs[s["name"]]))
    _aggregate(bench, ["fwd", "rev"])
    board = bench / "evaluate" / "leaderboard.csv"
    out = tmp_path / "summary"
    out.mkdir()
    sec = summary_section(board, out, 0.5)
    assert sec.title == "Retrieval leaderboard" and "sees what the judge saw" in sec.text
    assert (out / "evaluate" / "leaderboard.png").is_file() and (out / "evaluate" / "significance.csv").is_file()
    assert sec.table.filter(pl.col("system") == "fwd")["sees what the judge saw"].to_list() == ["yes"] * 3
    md = card_markdown(board)
    assert md.startswith("## Leaderboard") and "| fwd | trec_run | pool |" in md
    # the sage view: its own section and card table, its files copied
    from benchmaker.evaluate.report import copy_results, summary_sections

    secs = summary_sections(board, out, 0.5)
    assert [s.title for s in secs] == ["Retrieval leaderboard", "Which system is better",
                                       "Retrieval leaderboard as the Sage evaluator reports it"]
    assert set(secs[2].table["system"]) == {"fwd", "rev"} and "score_reciprocal_rank" in secs[2].table.columns
    assert "### As the Sage evaluator reports it" in md and "| fwd | trec_run | 4 |" in md
    assert (out / "evaluate" / "sage" / "fwd.csv").is_file()
    assert "sage/rev.csv" in copy_results(board, tmp_path / "card")


def test_rerank_batch_mode_through_the_shared_batch_machinery(bench, monkeypatch):
    """llm.mode: batch goes through providers.batch.run_batch (build -> submit -> poll -> collect with
    the journal), every paid row lands in the cost ledger and the cost file, the leaderboard shows the
    spend; a rerun (same batch state, or a fresh one) is answered without sending anything."""
    fake = fake_openai.start(steps=2)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    try:
        ids = pl.read_ndjson(bench / "images.jsonl")["image_id"].to_list()
        base = bench / "base.trec"
        base.write_text("".join(f"{trec_id(q)} Q0 {trec_id(i)} {n + 1} {100 - n} b\n"
                                for q in ("q 0", "q 1", "q 2") for n, i in enumerate(ids)))
        sys_list = systems.check_systems({"systems": [
            {"name": "b", "kind": "trec_run", "path": str(base)},
            {"name": "vlm", "kind": "rerank", "base": "b", "k": 4,
             "llm": {"model": "gpt-5-mini", "base_url": fake.base_url, "image_max_side": 64, "mode": "batch",
                     "poll_seconds": 0}}]})
        fake.answer = lambda body, schema: {"ranking": list(reversed(schema["properties"]["ranking"]["items"]["enum"]))}
        _run_system(bench, sys_list[0], sys_list, external=str(base))
        kw = {"component_runs": [str(base)], "llm_cache_dir": str(bench / "llm"), "benchmark": "tiny",
              "batch_dir": str(bench / ".batches" / "vlm"), "ledger": str(bench / ".ledger" / "vlm.jsonl")}
        meta = _run_system(bench, sys_list[1], sys_list, **kw)
        # one batch of three requests (one per query), no sync request
        assert fake.count("POST", "/v1/batches") == 1 and fake.count("POST", "/v1/files") == 1
        assert fake.count("POST", "/v1/responses") == 0
        b = next(iter(fake.batches.values()))
        assert b["metadata"]["bm_stage"] == "evaluate" and b["metadata"]["benchmaker"] == "tiny"
        assert len(fake.bill) == 3 and {x["mode"] for x in fake.bill} == {"batch"}
        assert meta["timing"]["mode"] == "batch" and meta["timing"]["reranked_queries"] == 3
        assert meta["timing"]["paid_requests"] == 3
        # what was paid is what the provider billed: cost file, ledger, run metadata
        costs = pl.read_ndjson(bench / "costs" / "vlm.jsonl")
        assert costs.height == 3 and set(costs["mode"]) == {"batch"} and costs["last_run"].all()
        assert costs["cost_usd"].sum() == pytest.approx(fake.billed_usd(), rel=1e-6)
        assert fake.billed_usd() > 0 and meta["cost_usd"] == pytest.approx(fake.billed_usd(), abs=1e-6)
        assert meta["cost_usd_last_run"] == meta["cost_usd"]
        assert len([x for x in (bench / ".ledger" / "vlm.jsonl").read_text().splitlines() if '"rid"' in x]) == 3
        got = read_run(bench / "evaluate" / "runs" / "vlm.trec").filter(pl.col("query_id") == "q 0").sort(
            "score", descending=True)["image_id"].to_list()
        assert got[:5] == list(reversed(ids[:4])) + [ids[4]]
        first = (bench / "evaluate" / "runs" / "vlm.trec").read_bytes()
        # a rerun with the same batch state re-reads the downloaded results; with a fresh state folder
        # the response cache answers every query: either way nothing is sent or paid again
        log_len = len(fake.log)
        again = _run_system(bench, sys_list[1], sys_list, **kw)
        fresh = _run_system(bench, sys_list[1], sys_list, **{**kw, "batch_dir": str(bench / ".batches" / "new")})
        sent = [(m, p) for m, p, _ in fake.log[log_len:] if m == "POST"]
        assert sent == [] and len(fake.bill) == 3
        for m in (again, fresh):
            assert m["cost_usd"] == meta["cost_usd"] and m["cost_usd_last_run"] == 0
            assert m["timing"]["paid_requests"] == 0 and m["timing"]["reranked_queries"] == 3
        costs = pl.read_ndjson(bench / "costs" / "vlm.jsonl")
        assert costs.filter(~pl.col("cached")).height == 3 and not costs.filter(~pl.col("cached"))["last_run"].any()
        assert costs.filter(pl.col("cached"))["cost_usd"].sum() == 0
        assert (bench / "evaluate" / "runs" / "vlm.trec").read_bytes() == first
    finally:
        fake_openai.stop(fake)
    _aggregate(bench, ["b", "vlm"])
    board = pl.read_csv(bench / "evaluate" / "leaderboard.csv")
    assert board.filter(pl.col("system") == "vlm")["cost_usd"].to_list()[0] == pytest.approx(meta["cost_usd"])
    assert board.filter(pl.col("system") == "b")["cost_usd"].to_list()[0] == 0


def test_rank_dense_also_keeps_the_collections_top_depth():
    """With ``collection`` (every pool's images), the run holds their top depth too; the corpus view is
    unchanged (those images score below the corpus cut)."""
    rng = np.random.default_rng(1)
    docs = rng.normal(size=(60, 8)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    qs = docs[:4] + 0.01
    ids = [f"d{i}" for i in range(60)]
    pools = [np.array([50]), np.array([51]), np.array([], dtype=np.int64), np.array([59])]
    coll = np.arange(30, 60)
    plain = rank_dense(qs, docs, ["a", "b", "c", "d"], ids, pools, depth=4, chunk=3)
    run = rank_dense(qs, docs, ["a", "b", "c", "d"], ids, pools, depth=4, chunk=3, collection=coll)
    for n, q in enumerate("abcd"):
        got = set(run.filter(pl.col("query_id") == q)["image_id"])
        assert {ids[30 + i] for i in np.argsort(-(qs[n] @ docs[30:].T))[:4]} <= got
    assert corpus_view(run, 4).equals(corpus_view(plain, 4))
    assert run.height > plain.height


def test_ranx_codes_change_no_number_ties_included():
    """ranx gets fixed-width codes (RanxIds: one JIT cache for every benchmark); every metric equals
    ranx's on the raw ids, on runs full of score ties and ids of all lengths, whatever order the codes
    are in."""
    import random

    from ranx import Qrels, Run, evaluate

    from benchmaker.evaluate.metrics import evaluate_scope, ranx_metrics
    from benchmaker.evaluate.runs import RanxIds

    rnd = random.Random(7)
    imgs = [f"{'x' * rnd.randint(1, 40)}/ü {k}.jpg" for k in range(60)]
    qids = [f"q{'z' * rnd.randint(0, 30)}{k}" for k in range(25)]
    qrows, rrows = [], []
    for q in qids:
        pool = rnd.sample(imgs, 12)
        qrows += [(q, i, rnd.choice([0, 0, 1, 2])) for i in pool]
        qrows[-1] = (q, pool[-1], 1)  # at least one positive
        rrows += [(q, i, float(rnd.randint(0, 3))) for i in rnd.sample(imgs, 20)]  # many ties
    qrels = pl.DataFrame(qrows, schema=["query_id", "image_id", "relevance_label"], orient="row")
    run = pl.DataFrame(rrows, schema=["query_id", "image_id", "score"], orient="row")
    metrics = ranx_metrics([1, 3, 10]) + ["r-precision"]
    ours = evaluate_scope(qrels, run, metrics, "s", sorted(qids), ids=RanxIds(qids, imgs))
    raw_q = {q: {i: int(r) for _, i, r in g.iter_rows()} for (q,), g in qrels.group_by("query_id")}
    raw_r = {q: {i: s for _, i, s in g.iter_rows()} for (q,), g in run.group_by("query_id")}
    r = Run(raw_r)
    evaluate(Qrels(raw_q), r, metrics, return_mean=False, save_results_in_run=True)
    for m in metrics:
        assert ours[m].to_list() == [float(r.scores[m][q]) for q in sorted(qids)], m
    # ties break by the order documents are given, never by id: codes in reverse id order, or
    # assigned as first seen (no universe), give the same numbers
    backwards = RanxIds()  # codes in reverse id order
    backwards._q = {x: f"q{i:010d}" for i, x in enumerate(sorted(qids, reverse=True))}
    backwards._d = {x: f"d{i:010d}" for i, x in enumerate(sorted(imgs, reverse=True))}
    for codes in (backwards, RanxIds()):
        assert evaluate_scope(qrels, run, metrics, "s", sorted(qids), ids=codes).equals(ours)


def test_clip_system_with_the_similarity_model_ranks_its_embeddings_without_a_model(bench, tiny_clip):
    """A clip system whose model is the similarity stage's reads embed_images' and embed_queries' files:
    the same run file, byte for byte, as loading the model and encoding; no torch in the process."""
    import subprocess
    import sys

    from benchmaker.evaluate_settings import reuses_similarity_embeddings, runs_model
    from benchmaker.similarity import embed

    model = {"model": f"local-dir:{tiny_clip}", "pretrained": None, "precision": "auto"}
    similarity = {**model, "device": "cpu", "batch_size": 8, "num_workers": 0}
    system = {"name": "clip", "kind": "clip", "model": model["model"], "device": "cpu", "num_workers": 0,
              "batch_size": 4}
    # the decision: the embeddings' settings as written (defaults filled), never the speed knobs
    assert reuses_similarity_embeddings(system, similarity) and not runs_model(system, similarity)
    assert not reuses_similarity_embeddings({**system, "precision": "fp32"}, similarity)
    assert not reuses_similarity_embeddings({**system, "device": "auto"}, similarity)
    assert runs_model({**system, "model": "ViT-B-32"}, similarity)
    assert reuses_similarity_embeddings({"kind": "clip", "model": "ViT-B-32", "pretrained": "laion2b_s34b_b79k"}, {})
    assert not reuses_similarity_embeddings({"kind": "bm25"}, similarity)
    # an image that cannot be decoded: lost in embed_images, and so in both runs, with the same reason
    broken = min((bench / "images" / "blue").glob("*.jpg"))
    broken.write_bytes(b"not an image")
    imgs = pl.read_ndjson(bench / "images.jsonl")
    shards, emb, lost = [], [], []
    for n, part in enumerate((imgs.head(7), imgs.slice(7))):
        shards.append(bench / "shards" / f"{n}.jsonl")
        shards[-1].parent.mkdir(exist_ok=True)
        write_table(part, "images", shards[-1])
        emb.append(str(bench / "embeddings" / f"{n}.parquet"))
        lost.append(str(bench / "losses" / "embed" / f"{n}.jsonl"))
        embed.run_images(images=str(shards[-1]), embeddings=emb[-1], losses=lost[-1], model=model, device="cpu",
                         runtime=similarity, image_root=str(bench / "images"))
    queries = str(bench / "embeddings" / "queries.parquet")
    # embed_queries reads the written queries, here with one the judge lost (not in qrels.jsonl):
    # embedded, never ranked (the runs below are the same bytes as the model's, which reads qrels only)
    written = (pl.read_ndjson(bench / "qrels.jsonl").select("query_id", "query_text").unique(maintain_order=True)
               .vstack(pl.DataFrame({"query_id": ["q lost"], "query_text": ["a yellow thing"]}))
               .with_columns(pl.lit(None, pl.String).alias("narrative"), pl.lit("rules").alias("writer")))
    write_table(written, "queries", bench / "queries.jsonl")
    embed.run_queries(queries=str(bench / "queries.jsonl"), embeddings=queries, model=model, device="cpu")
    assert "q lost" in pl.read_parquet(queries)["query_id"].to_list()

    def paths(tag: str) -> dict:
        d = bench / tag
        d.mkdir(exist_ok=True)
        return {"qrels": str(bench / "qrels.jsonl"), "images": str(bench / "images.jsonl"),
                "run_file": str(d / "clip.trec"), "meta": str(d / "clip.json"), "losses": str(d / "losses.jsonl"),
                "costs": str(d / "costs.jsonl"), "image_root": str(bench / "images")}

    loaded = paths("loaded")
    systems.run(system=system, **loaded)
    reused = paths("reused")
    probe = ("import json, sys\nfrom benchmaker.evaluate import systems\n"
             "a = json.loads(sys.argv[1])\nsystems.run(**a)\n"
             "print(json.dumps({'torch': 'torch' in sys.modules, 'open_clip': 'open_clip' in sys.modules}))\n")
    args = {"system": system, **reused, "image_embeddings": emb, "query_embeddings": queries, "embed_losses": lost}
    r = subprocess.run([sys.executable, "-c", probe, json.dumps(args)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"torch": False, "open_clip": False}
    run_a, run_b = Path(loaded["run_file"]).read_bytes(), Path(reused["run_file"]).read_bytes()
    assert run_a and run_a == run_b
    assert Path(loaded["losses"]).read_bytes() == Path(reused["losses"]).read_bytes()
    assert pl.read_ndjson(reused["losses"])["item_id"].to_list() == [str(broken.relative_to(bench / "images"))]
    a, b = (json.loads(Path(p["meta"]).read_text()) for p in (loaded, reused))
    assert a["timing"]["images_encoded"] == a["timing"]["images_indexed"] == imgs.height - 1
    assert a["timing"]["images_per_s"] and "embeddings" not in a["timing"]
    assert b["timing"]["embeddings"] == "similarity stage" and b["timing"]["images_encoded"] == 0
    assert b["timing"]["images_per_s"] is None and b["timing"]["images_indexed"] == imgs.height - 1
    assert b["timing"]["model_id"] == a["timing"]["model_id"] and b["timing"]["numerics"]["images"]
    # (a null images_per_s in the leaderboard: as a hybrid's, test_systems_metrics_equal_ranx_and_drilldowns)
    # stale files are refused, naming the file and the rule that rewrites it
    import pyarrow.parquet as pq

    stale = pl.read_parquet(queries).with_columns(pl.col("query_text") + "!").to_arrow()
    pq.write_table(stale.replace_schema_metadata(pq.read_metadata(queries).metadata), bench / "stale.parquet")
    with pytest.raises(Exception, match="another text(.|\n)*rerun embed_queries"):
        systems.run(system=system, **reused, image_embeddings=emb, query_embeddings=str(bench / "stale.parquet"),
                    embed_losses=lost)

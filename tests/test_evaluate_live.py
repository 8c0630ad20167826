"""Live systems: an http search service (a strict server on 127.0.0.1) and a Milvus Lite collection
holding the benchmark's CLIP embeddings, scored like every other system (docs/evaluate.md)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from support import serve, shutdown
from test_evaluate import _aggregate, _run_system, bench  # noqa: F401 - the shared fixture

from benchmaker.config import ConfigError
from benchmaker.errors import UserError
from benchmaker.evaluate import systems
from benchmaker.evaluate.live import render
from benchmaker.evaluate.runs import read_run

TOKEN = "s3cret-token"


def _ranking(text: str, images: list[str]) -> list[str]:
    """The fake service's ranking: images of the query's colour first, then the rest, by id."""
    words = text.split()
    color = words[1] if len(words) > 1 else "-"
    return sorted(images, key=lambda i: (not i.startswith(color + "/"), i))


SLOW = {"a green thing": 0.15}  # known queries the services delay (seconds)


class Service:
    """A strict search service: POST /v1/search, bearer token, exact JSON body; fails once with 503; counts
    every request it receives (``received``) and answers the queries of ``slow`` that much later."""

    def __init__(self, images: list[str], depth: int, slow: dict[str, float] | None = None):
        self.images, self.depth, self.slow = images, depth, dict(slow or {})
        self.requests: list[dict] = []
        self.received = 0
        self.failed_once: set[str] = set()
        self.lock = threading.Lock()
        svc = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, obj, headers=None):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):  # noqa: N802
                with svc.lock:
                    svc.received += 1
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/search?collection=bench":
                    return self._send(404, {"error": f"unknown path {self.path}"})
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._send(401, {"error": "bad token"})
                if self.headers.get("X-Client") != "benchmaker-test":
                    return self._send(400, {"error": "missing X-Client"})
                try:
                    req = json.loads(body)
                except ValueError:
                    return self._send(400, {"error": "not json"})
                if set(req) != {"query", "limit", "options"} or not isinstance(req["limit"], int) \
                        or req["limit"] != svc.depth or req["options"] != {"hybrid": True, "alpha": 0.4} \
                        or not isinstance(req["query"], str):
                    return self._send(400, {"error": f"bad body {req}"})
                with svc.lock:
                    svc.requests.append(req)
                    first = req["query"] not in svc.failed_once
                    svc.failed_once.add(req["query"])
                if first and "blue" in req["query"]:
                    return self._send(503, {"error": "busy"}, {"Retry-After": "0"})
                time.sleep(svc.slow.get(req["query"], 0.005))
                ranked = _ranking(req["query"], svc.images)[:req["limit"] - 1]
                hits = [{"object": {"url": f"https://img.example/{i}"}, "score": f"{1.0 - n / 100:.2f}"}
                        for n, i in enumerate(ranked)]
                hits.insert(1, {"object": {"url": "https://img.example/not/there.jpg"}, "score": "0.995"})
                # one image twice (the Sage loader stores one object per pool row): its first place counts
                hits.append({"object": {"url": hits[0]["object"]["url"]}, "score": "0.01"})
                return self._send(200, {"data": {"hits": hits}})

        self.srv = serve(H)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"


def _http_system(url: str, **kw) -> dict:
    return {"name": "live", "kind": "http", "version": "v1", "url": url + "/v1/search", "method": "POST",
            "params": {"collection": "bench"}, "headers": {"X-Client": "benchmaker-test"},
            "body": {"query": "$query", "limit": "$depth", "options": {"hybrid": True, "alpha": 0.4}},
            "results": "data.hits", "id": "object.url", "score": "score",
            "id_regex": r"^https://img\.example/(?P<image_id>.+)$", "auth_env": "SEARCH_TOKEN", "depth": 8,
            "concurrency": 2, "max_attempts": 3, **kw}


def test_render_placeholders():
    t = {"q": "$query", "n": "$depth", "g": "{ Get { I(hybrid: {query: $query_json}, limit: $depth) } }",
         "u": "x?q=$query_url", "lit": "$$5"}
    got = render(t, "q1", 'a "red" café', 7)
    assert got == {"q": 'a "red" café', "n": 7, "g": '{ Get { I(hybrid: {query: "a \\"red\\" café"}, limit: 7) } }',
                   "u": "x?q=a%20%22red%22%20caf%C3%A9", "lit": "$5"}


def test_answers_in_the_wrong_shape_are_losses_not_empty_rankings():
    from benchmaker.evaluate.live import _BadAnswer, parse_hits

    s = {"results": "data.Get.Images", "id": "image_id", "score": "_additional.score"}
    ok = {"data": {"Get": {"Images": [{"image_id": "a.jpg", "_additional": {"score": "0.5"}}]}}}
    assert parse_hits(s, ok, 10) == [("a.jpg", 0.5)]
    assert parse_hits(s, {"data": {"Get": {"Images": []}}}, 10) == []          # a real empty answer
    graphql_error = {"errors": [{"message": "no class Images"}], "data": {"Get": {"Images": None}}}
    with pytest.raises(_BadAnswer, match="no class Images"):
        parse_hits(s, graphql_error, 10)
    with pytest.raises(_BadAnswer, match="not a number"):
        parse_hits(s, {"data": {"Get": {"Images": [{"image_id": "a", "_additional": {"score": "x"}}]}}}, 10)


def test_http_config_errors_name_the_key():
    base = {"name": "live", "kind": "http", "url": "http://127.0.0.1:1/s"}
    with pytest.raises(ConfigError, match=r"systems\[0\]\.body: bad placeholder"):
        systems.check_systems({"systems": [{**base, "body": {"q": "$qurey"}}]})
    with pytest.raises(ConfigError, match=r"systems\[0\]\.auth_env"):
        systems.check_systems({"systems": [{**base, "auth_env": "Bearer abc.def"}]})
    with pytest.raises(ConfigError, match=r"systems\[0\]\.id_regex: needs a group"):
        systems.check_systems({"systems": [{**base, "id_regex": "^x"}]})
    with pytest.raises(ConfigError, match=r"do not apply to kind 'http'"):
        systems.check_systems({"systems": [{**base, "collection": "c"}]})
    with pytest.raises(ConfigError, match=r"exactly one of uri"):
        systems.check_systems({"systems": [{"name": "m", "kind": "milvus", "collection": "c", "model": "x"}]})


def test_http_system_end_to_end(bench, monkeypatch):  # noqa: F811
    images = pl.read_ndjson(bench / "images.jsonl")["image_id"].to_list()
    svc = Service(images, depth=8, slow=SLOW)
    try:
        monkeypatch.delenv("SEARCH_TOKEN", raising=False)
        s = _http_system(svc.url)
        with pytest.raises(ConfigError, match="SEARCH_TOKEN"):
            _run_system(bench, s, [s], llm_cache_dir=str(bench / "cache"))
        monkeypatch.setenv("SEARCH_TOKEN", TOKEN)
        meta = _run_system(bench, s, [s], llm_cache_dir=str(bench / "cache"))
        # 4 queries, one retried after a 503: 5 requests reached the server, 5 are reported, 1 of them a retry
        t = meta["timing"]
        assert svc.received == len(svc.requests) == 5 and t["requests_sent"] == 5 and t["retries"] == 1
        assert meta["system_version"] == "v1" and meta["scopes"] == ["pool", "corpus"]
        assert t["latency_ms_mean"] >= 5 and t["query_latency_ms"] == t["latency_ms_mean"]
        # per-query timings: the one slow query (150 ms) is the maximum and pulls p95, not the median
        assert t["latency_queries"] == 4 and t["latency_ms_max"] >= 150 and t["latency_ms_p95"] >= 120
        assert t["latency_ms_p50"] < 100 and t["latency_ms_p50"] < t["latency_ms_mean"] < t["latency_ms_max"]
        assert "concurrency" not in meta["settings"]
        run = read_run(bench / "evaluate" / "runs" / "live.trec")
        for qid, text in (("q 0", "a red thing"), ("q 1", "a blue thing")):
            got = run.filter(pl.col("query_id") == qid).sort("score", descending=True)["image_id"].to_list()
            assert got == _ranking(text, images)[:7]  # unknown hit dropped, duplicate object counted once
        losses = pl.read_ndjson(bench / "losses" / "live.jsonl")
        assert set(losses["reason"]) == {"unknown_image"} and set(losses["item_id"]) == {"not/there.jpg"}
        # nothing secret in what is written
        for p in [*bench.joinpath("evaluate").rglob("*"), *bench.joinpath("cache").rglob("*")]:
            assert p.is_dir() or TOKEN not in p.read_text(encoding="utf-8")
        # the same deployment again: answered by the cache, nothing sent
        meta2 = _run_system(bench, s, [s], llm_cache_dir=str(bench / "cache"))
        assert len(svc.requests) == 5 and meta2["timing"]["cached_answers"] == 4
        assert meta2["timing"]["requests_sent"] == meta2["timing"]["retries"] == 0
        assert meta2["timing"]["latency_from_cache"] is True
        # a new version queries the service again
        s2 = {**s, "version": "v2"}
        _run_system(bench, s2, [s2], llm_cache_dir=str(bench / "cache"))
        assert len(svc.requests) == 9
        # it goes through the same metrics as every system
        doc = _aggregate(bench, ["live"])
        board = pl.read_csv(bench / "evaluate" / "leaderboard.csv")
        row = board.filter((pl.col("system") == "live") & (pl.col("scope") == "corpus"))
        assert row["ndcg@5"][0] == pytest.approx(1.0) and row["query_latency_ms"][0] >= 5
        assert doc["systems"][0]["system_version"] == "v2"
        # a wrong token is a permanent error that says what to check
        monkeypatch.setenv("SEARCH_TOKEN", "wrong")
        s3 = {**s, "version": "v3"}
        with pytest.raises(UserError, match="HTTP 401.*bad token.*auth_env"):
            _run_system(bench, s3, [s3], llm_cache_dir=str(bench / "cache"))
    finally:
        shutdown(svc.srv)


# ------------------------------------------------------------------------------------------------ milvus
def test_milvus_lite_system_equals_exact_clip_ranking(bench, tiny_clip, tmp_path):  # noqa: F811
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    from pymilvus import MilvusClient

    from benchmaker.evaluate.milvus import index_embeddings
    from benchmaker.similarity.cache import EmbeddingCache
    from benchmaker.similarity.embed import embed_image_table
    from benchmaker.similarity.model import load_clip

    model = f"local-dir:{tiny_clip}"
    clip_sys = {"name": "clip", "kind": "clip", "model": model, "device": "cpu", "num_workers": 0, "depth": 6}
    _run_system(bench, clip_sys, [clip_sys])
    # the benchmark's CLIP embeddings, into a real embedded Milvus (Milvus Lite)
    clip = load_clip(model, None, device="cpu")
    from benchmaker.losses import Losses

    table = embed_image_table(pl.read_ndjson(bench / "images.jsonl"), clip, image_root=str(bench / "images"),
                              cache=EmbeddingCache.for_model(str(tmp_path / "ec"), clip), losses=Losses("t"),
                              batch_size=16, num_workers=0)
    db = str(tmp_path / "bench.db")
    client = MilvusClient(db)
    # two objects of one image (as Sage's loaders store one per pool row)
    dup = pl.concat([table.select("image_id", "embedding"), table.select("image_id", "embedding").head(3)])
    assert index_embeddings(client, "bench_images", dup) == table.height + 3
    client.close()
    m = {"name": "vdb", "kind": "milvus", "db_file": db, "collection": "bench_images", "model": model,
         "device": "cpu", "depth": 6, "version": "lite-1"}
    systems.check_systems({"systems": [m]})
    slow = {tuple(np.round(v, 5)) for v in clip.encode_texts(list(SLOW))[0]}
    calls = []

    class Counting:  # the real client, counting every search and answering the known queries later
        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            return getattr(self.real, name)

        def search(self, *a, **kw):
            calls.append(kw.get("filter") or "")
            if any(tuple(np.round(np.asarray(v, dtype=np.float32), 5)) in slow for v in kw["data"]):
                time.sleep(0.15)
            return self.real.search(*a, **kw)

    from benchmaker.evaluate import milvus

    real_connect = milvus.connect
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(milvus, "connect", lambda s: Counting(real_connect(s)))
        meta = _run_system(bench, m, [m])
    t = meta["timing"]
    assert meta["system_version"] == "lite-1" and t["search_calls"] == 4  # batch_size 1: one call per query
    assert t["requests_sent"] == len(calls) == 4 + sum(1 for c in calls if c)  # + the pool searches
    assert t["latency_queries"] == 4 and t["latency_ms_max"] >= 150 and t["latency_ms_p95"] >= 120
    assert t["latency_ms_p50"] < 100
    ev = bench / "evaluate" / "runs"
    a, b = read_run(ev / "clip.trec"), read_run(ev / "vdb.trec")
    # every query: the same images, the same order, the same scores (float32 search vs exact cosine)
    j = a.join(b, on=["query_id", "image_id"], how="full", coalesce=True)
    assert j["score"].null_count() == 0 and j["score_right"].null_count() == 0
    assert np.allclose(j["score"].to_numpy(), j["score_right"].to_numpy(), atol=1e-5)
    doc = _aggregate(bench, ["clip", "vdb"])
    res = {s["name"]: s["results"] for s in doc["systems"]}
    for scope in ("pool", "corpus"):
        assert res["vdb"][scope]["ndcg@5"] == pytest.approx(res["clip"][scope]["ndcg@5"], abs=1e-9)


# ------------------------------------------------------------------------------------------------ workflow
DAG_PROBE = r"""
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import (ConfigSettings, DAGSettings, OutputSettings, ResourceSettings,
                                      StorageSettings)

root, workdir, cfg = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
out = {}
with SnakemakeApi(OutputSettings(quiet=None)) as api:
    wf = api.workflow(resource_settings=ResourceSettings(cores=1), config_settings=ConfigSettings(configfiles=[cfg]),
                      storage_settings=StorageSettings(), snakefile=root, workdir=workdir)
    wf.dag(DAGSettings(targets={"evaluate"})).execute_workflow(executor="local", pseudo_executor="dryrun")
    local = wf._workflow._localrules
    from benchmaker.evaluate import systems, trust
    from benchmaker.runner import check_kwargs
    for job in wf._workflow.dag.jobs:
        if job.rule.name.startswith("evaluate"):  # every name the job hands its stage function is accepted
            names = {n: None for part in (job.input, job.output, job.params) for n in part._names}
            check_kwargs(job.rule.name, trust.run if job.rule.name == "evaluate" else systems.run,
                         {**names, "threads": 1})
        if job.rule.name.startswith("evaluate_"):
            nd = job.non_derived_params
            out[job.wildcards_dict["system"]] = {
                "rule": job.rule.name, "local": job.rule.name in local, "gpu": "gpu" in job.resources.keys(),
                "compared": json.loads(json.dumps(list(nd), default=str, sort_keys=True)),
                "runtime": json.loads(json.dumps(dict(job.params.system), default=str))}
print(json.dumps(out))
"""


def _dag(tmp_path, cfg_dict, name) -> dict:
    import os
    import subprocess
    import sys

    import support

    cfg = support.write_config(tmp_path / f"{name}.yaml", cfg_dict)
    r = subprocess.run([sys.executable, "-c", DAG_PROBE, str(support.ROOT / "Snakefile"), str(tmp_path), str(cfg)],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(support.ROOT / "src"), "PATH": support.no_slurm_path()})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_live_systems_in_the_workflow_rerun_on_version_not_on_speed(tmp_path, tiny_cfg):
    live = _http_system("http://127.0.0.1:9", depth=50)
    vdb = {"name": "vdb", "kind": "milvus", "db_file": str(tmp_path / "m.db"), "collection": "c", "model": "ViT-B-32",
           "batch_size": 8}
    tiny_cfg["evaluate"] = {"systems": [{"name": "bm25", "kind": "bm25"}, live, vdb]}
    base = tmp_path / "kept"
    base.mkdir()
    (base / "leaderboard.json").write_text('{"systems": []}')
    (base / "per_query.csv").write_text("")
    tiny_cfg["evaluate"]["compare"] = {"baseline": str(base)}
    a = _dag(tmp_path, tiny_cfg, "a")
    # queried from the controller like rerankers (local rule evaluate_api), without a GPU
    assert a["live"]["rule"] == a["vdb"]["rule"] == "evaluate_api" and a["live"]["local"] and not a["live"]["gpu"]
    assert a["bm25"]["rule"] == "evaluate_system"
    sys_a = next(x for x in a["live"]["compared"] if isinstance(x, dict) and x.get("name") == "live")
    assert sys_a["url"] == "http://127.0.0.1:9/v1/search" and sys_a["version"] == "v1"
    for key in ("concurrency", "timeout_s", "max_attempts", '"cache"'):  # neither in the system nor elsewhere
        assert key not in json.dumps(a["live"]["compared"])
    assert a["live"]["runtime"]["concurrency"] == 2
    assert "batch_size" not in json.dumps(a["vdb"]["compared"]) and a["vdb"]["runtime"]["batch_size"] == 8
    # speed knobs change nothing Snakemake compares; a new deployment version does
    tiny_cfg["evaluate"]["systems"][1] = {**live, "concurrency": 16, "timeout_s": 5, "max_attempts": 9, "cache": False}
    b = _dag(tmp_path, tiny_cfg, "b")
    assert b["live"]["compared"] == a["live"]["compared"] and b["live"]["runtime"]["concurrency"] == 16
    tiny_cfg["evaluate"]["systems"][1] = {**live, "version": "v2"}
    c = _dag(tmp_path, tiny_cfg, "c")
    assert c["live"]["compared"] != a["live"]["compared"] and c["bm25"]["compared"] == a["bm25"]["compared"]


def _weaviate_recipe() -> dict:
    """The Weaviate recipe's system, as docs/evaluate.md shows it."""
    import re

    import yaml
    from support import ROOT

    doc = (ROOT / "docs" / "evaluate.md").read_text()
    part = doc.split("### Recipe: a Weaviate hybrid query", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", part, re.S).group(1)
    return yaml.safe_load(block)[0]


def test_weaviate_hybrid_recipe_of_the_docs(bench, monkeypatch):  # noqa: F811
    graphql = pytest.importorskip("graphql")
    images = pl.read_ndjson(bench / "images.jsonl")["image_id"].to_list()
    seen = []

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert self.path == "/v1/graphql" and self.headers["Authorization"] == "Bearer wv-key"
            ast = graphql.parse(body["query"])            # valid GraphQL, whatever the query text holds
            field = ast.definitions[0].selection_set.selections[0].selection_set.selections[0]
            args = {a.name.value: a.value for a in field.arguments}
            hybrid = {f.name.value: f.value for f in args["hybrid"].fields}
            text, limit = hybrid["query"].value, int(args["limit"].value)
            seen.append((text, limit, float(hybrid["alpha"].value), hybrid["fusionType"].value))
            ranked = _ranking(text, images)[:limit]
            objs = [{"image_id": i, "_additional": {"score": f"{0.9 - n / 50:.4f}"}} for n, i in enumerate(ranked)]
            data = json.dumps({"data": {"Get": {field.name.value: objs}}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = serve(H)
    try:
        s = _weaviate_recipe()
        s["url"] = s["url"].replace("http://weaviate.example.org:8080", f"http://127.0.0.1:{srv.server_address[1]}")
        s["depth"] = 6
        systems.check_systems({"systems": [s]})
        monkeypatch.setenv("WEAVIATE_API_KEY", "wv-key")
        # a query text with quotes and a backslash still makes valid GraphQL
        qrels = pl.read_ndjson(bench / "qrels.jsonl")
        qrels = qrels.with_columns(pl.when(pl.col("query_id") == "q none").then(pl.lit('a "quoted" \\ thing'))
                                   .otherwise(pl.col("query_text")).alias("query_text"))
        qrels.write_ndjson(bench / "qrels.jsonl")
        _run_system(bench, s, [s], llm_cache_dir=str(bench / "cache"))
        assert sorted(seen) == sorted([("a blue thing", 6, 0.4, "relativeScoreFusion"),
                                       ("a green thing", 6, 0.4, "relativeScoreFusion"),
                                       ('a "quoted" \\ thing', 6, 0.4, "relativeScoreFusion"),
                                       ("a red thing", 6, 0.4, "relativeScoreFusion")])
        run = read_run(bench / "evaluate" / "runs" / f"{s['name']}.trec")
        got = run.filter(pl.col("query_id") == "q 2").sort("score", descending=True)["image_id"].to_list()
        assert got == _ranking("a green thing", images)[:6]
    finally:
        shutdown(srv)


def test_snakemake_runs_the_http_system_and_reruns_it_on_a_new_version_only(bench, tmp_path, tiny_cfg):  # noqa: F811
    """The real rule (evaluate_api) on a results folder that already holds qrels and images."""
    import shutil

    import support

    images = pl.read_ndjson(bench / "images.jsonl")["image_id"].to_list()
    svc = Service(images, depth=8)
    try:
        res = Path(tiny_cfg["paths"]["results"]) / tiny_cfg["benchmark"]["name"]
        res.mkdir(parents=True)
        for f in ("qrels.jsonl", "images.jsonl"):
            shutil.copyfile(bench / f, res / f)
        tiny_cfg["evaluate"] = {"systems": [_http_system(svc.url)]}
        target = str(res / "evaluate" / "runs" / "live.trec")
        args = ["-c1", target, "--allowed-rules", "evaluate_api"]
        env = {"SEARCH_TOKEN": TOKEN}
        r = support.snakemake(args, tmp_path, support.write_config(tmp_path / "a.yaml", tiny_cfg), env=env)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        assert len(svc.requests) == 5 and TOKEN not in r.stdout + r.stderr
        meta = json.loads((res / "evaluate" / "runs" / "live.json").read_text())
        # every request sent counts, the 503 retried too
        assert meta["system_version"] == "v1" and meta["timing"]["requests_sent"] == 5
        assert meta["timing"]["retries"] == 1
        # speed knobs: nothing to do; a new deployment version: the job again (answered by the service)
        tiny_cfg["evaluate"]["systems"][0].update(concurrency=1, timeout_s=3, max_attempts=2, cache=False)
        r = support.snakemake(["-n", *args], tmp_path, support.write_config(tmp_path / "b.yaml", tiny_cfg), env=env)
        assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
        tiny_cfg["evaluate"]["systems"][0].update(version="v2", concurrency=2, cache=True)
        r = support.snakemake(args, tmp_path, support.write_config(tmp_path / "c.yaml", tiny_cfg), env=env)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        assert len(svc.requests) == 9
        assert json.loads((res / "evaluate" / "runs" / "live.json").read_text())["system_version"] == "v2"
    finally:
        shutdown(svc.srv)


def test_milvus_lite_hybrid_legs(bench, tiny_clip, tmp_path):  # noqa: F811
    """The adapter's hybrid (dense leg + BM25 leg, WeightedRanker) against a real Milvus Lite: the weights
    reach Milvus (all weight on the dense leg = the exact CLIP order; all on BM25 = Milvus's own BM25 order)."""
    pytest.importorskip("milvus_lite")
    from pymilvus import DataType, Function, FunctionType, MilvusClient

    from benchmaker.losses import Losses
    from benchmaker.similarity.embed import embed_image_table
    from benchmaker.similarity.model import load_clip

    model = f"local-dir:{tiny_clip}"
    clip = load_clip(model, None, device="cpu")
    table = embed_image_table(pl.read_ndjson(bench / "images.jsonl"), clip, image_root=str(bench / "images"),
                              cache=None, losses=Losses("t"), batch_size=16, num_workers=0)
    ann = dict(pl.read_ndjson(bench / "annotations.jsonl").select("image_id", "summary").iter_rows())
    db = str(tmp_path / "h.db")
    c = MilvusClient(db)
    sch = c.create_schema(auto_id=True)
    sch.add_field("pk", DataType.INT64, is_primary=True)
    sch.add_field("image_id", DataType.VARCHAR, max_length=1024)
    sch.add_field("caption", DataType.VARCHAR, max_length=4096, enable_analyzer=True)
    sch.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    sch.add_field("image_vector", DataType.FLOAT_VECTOR, dim=len(table["embedding"][0]))
    sch.add_function(Function(name="bm25", function_type=FunctionType.BM25, input_field_names=["caption"],
                              output_field_names=["sparse"]))
    idx = c.prepare_index_params()
    idx.add_index("image_vector", index_type="FLAT", metric_type="COSINE")
    idx.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    c.create_collection("hyb", schema=sch, index_params=idx)
    c.insert("hyb", [{"image_id": i, "caption": ann[i], "image_vector": np.asarray(v, np.float32).tolist()}
                     for i, v in zip(table["image_id"].to_list(), table["embedding"].to_list())])
    c.flush("hyb")
    c.close()
    clip_sys = {"name": "clip", "kind": "clip", "model": model, "device": "cpu", "num_workers": 0, "depth": 6}
    _run_system(bench, clip_sys, [clip_sys])
    base = {"kind": "milvus", "db_file": db, "collection": "hyb", "model": model, "device": "cpu", "depth": 6,
            "score_pools": False}
    dense = {**base, "name": "dense", "legs": [{"field": "image_vector", "weight": 1.0},
                                                {"field": "sparse", "weight": 0.0, "text": True}]}
    sparse = {**base, "name": "sparse", "legs": [{"field": "image_vector", "weight": 0.0},
                                                  {"field": "sparse", "weight": 1.0, "text": True}]}
    systems.check_systems({"systems": [dense, sparse]})
    for s in (dense, sparse):
        _run_system(bench, s, [s])
    ev = bench / "evaluate" / "runs"

    def order(name, qid):
        r = read_run(ev / f"{name}.trec").filter(pl.col("query_id") == qid)
        return r.sort(["score", "image_id"], descending=[True, False])["image_id"].to_list()

    c = MilvusClient(db)
    texts = dict(pl.read_ndjson(bench / "qrels.jsonl").select("query_id", "query_text").unique().iter_rows())
    for qid in ("q 0", "q 1", "q 2"):
        assert order("dense", qid) == order("clip", qid)[:6]
        bm = c.search("hyb", data=[texts[qid]], anns_field="sparse", limit=50, output_fields=["image_id"],
                      search_params={"metric_type": "BM25"})[0]
        score = {h["entity"]["image_id"]: abs(h["distance"]) for h in bm}
        cut = sorted(score.values(), reverse=True)[min(5, len(score) - 1)]
        got = order("sparse", qid)
        assert got and all(score.get(i, -1) >= cut - 1e-6 for i in got[:min(6, len(score))])  # BM25's top (ties)
    c.close()


def test_validate_config_names_live_systems_keys_and_files(tmp_path, tiny_cfg, monkeypatch, capsys):
    import support

    from benchmaker.cli import main

    monkeypatch.delenv("SEARCH_TOKEN", raising=False)
    tiny_cfg["evaluate"] = {"systems": [
        _http_system("http://127.0.0.1:9"),
        {"name": "vdb", "kind": "milvus", "db_file": str(tmp_path / "missing.db"), "collection": "c", "model": "x"}]}
    path = support.write_config(tmp_path / "c.yaml", tiny_cfg)
    assert main(["validate-config", str(path)]) == 1
    err = capsys.readouterr().err
    assert "evaluate.systems[0].auth_env: environment variable SEARCH_TOKEN is not set" in err
    assert "evaluate.systems[1].db_file" in err


def test_a_service_that_is_down_is_a_clear_retryable_error(bench, tmp_path):  # noqa: F811
    from benchmaker.providers.retry import TransientExhausted

    s = {**_http_system("http://127.0.0.1:9"), "auth_env": None, "max_attempts": 2, "timeout_s": 1}
    with pytest.raises(TransientExhausted, match="kept failing.*run the workflow again.*max_attempts"):
        _run_system(bench, s, [s], llm_cache_dir=str(tmp_path / "cache"))
    assert not (bench / "evaluate" / "runs" / "live.trec").exists()  # no run file from a failed service


def test_live_runtime_keys_come_from_the_schema():
    """The keys left out of a live system's recorded settings are the schema's x-runtime keys that a live
    kind takes (evaluate_settings.LIVE_RUNTIME is derived, not listed): the same five as before."""
    from benchmaker.evaluate_settings import LIVE_RUNTIME
    from benchmaker.triggers import runtime_keys

    assert set(LIVE_RUNTIME) == {"concurrency", "timeout_s", "max_attempts", "cache", "batch_size"}
    assert set(LIVE_RUNTIME) < set(runtime_keys("evaluate.systems.[]"))

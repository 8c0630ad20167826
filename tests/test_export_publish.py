"""What is published reads the same in every tool, is reproducible and names nothing of the machine.

* Two builds of the same benchmark from different folders (the real workflow, deepening on) give
  byte-identical dataset folders except ``run_facts.json``; nothing in them (text files, parquet values and schema
  metadata) names a folder, the user or the host that built them.
* Every run file ranks alike in ranx, pytrec_eval (trec_eval's rules) and the leaderboard.
* The parquet files carry features metadata that datasets 3.6, 4.x and 5.x read.
* ``benchmaker mteb`` evaluates a model on the export with mteb and gets the leaderboard's nDCG@10.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import support

USER = "benchuser7q"
SYSTEMS = ("tiny-clip", "bm25", "fused")


# ------------------------------------------------------------------------------------------ fast checks
@pytest.fixture(scope="module")
def unit_export(tmp_path_factory, tiny_corpus):
    from test_export import OPENAI, TOKEN, _export, _public_config

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_TOKEN", TOKEN)
        mp.setenv("OPENAI_API_KEY", OPENAI)
        return _export(tmp_path_factory.mktemp("publish"), tiny_corpus,
                       public_config={**_public_config(tiny_corpus), **ENDPOINTS})


# endpoint URLs as a config writes them (llm.base_url, export.endpoint, an http system's url), published as
# test_endpoint_urls_publish_the_provider_only says
ENDPOINTS = {"llm": {"base_url": "http://bench:pa55word@127.0.0.1:8123/v1?key=k3y-in-the-query"},
             "export": {"split": "test", "token_env": "HF_TOKEN", "endpoint": "https://hub.example.org"},
             "evaluate": {"systems": [{"name": "search", "kind": "http",
                                       "url": "https://search.example.org/api?api_key=k3y-in-the-query&q=$query_url"}]}}


def _features_types(obj, out: set) -> set:
    if isinstance(obj, list):
        for v in obj:
            _features_types(v, out)
    elif isinstance(obj, dict):
        if "_type" in obj:
            out.add(obj["_type"])
        for v in obj.values():
            _features_types(v, out)
    return out


# The feature types each version's generate_from_dict resolves (datasets/features/features.py,
# `_FEATURE_TYPES` and `generate_from_dict`): 3.6 has no "List" (added in 4.0, which keeps "Sequence"
# and the JSON-list shorthand for backward compatibility; 5.x the same). A JSON list is read by every
# version as a list of its one item feature (3.6: `[feature]` -> pa.list_ in get_nested_type).
READ_BY_ALL = {"Value", "Image", "ClassLabel"}


def test_parquet_features_metadata_reads_in_datasets_3_4_5(unit_export):
    import pyarrow.parquet as pq

    out = unit_export[0]
    files = sorted(out.rglob("*.parquet"))
    assert files
    lists = 0
    for f in files:
        meta = json.loads(pq.read_schema(f).metadata[b"huggingface"])["info"]["features"]
        types = _features_types(meta, set())
        assert types <= READ_BY_ALL, (f, types)
        lists += sum(isinstance(v, list) for v in meta.values())
    assert lists  # the tags column: a list, written in the shorthand every version reads


def _probe_script() -> str:
    return (
        "import glob, json, sys\nfrom datasets import load_dataset\nfolder = sys.argv[1]\nout = {}\n"
        "for how in ('folder', 'data_files'):\n"
        "    ds = (load_dataset(folder, split='test') if how == 'folder' else load_dataset(\n"
        "        'parquet', data_files=sorted(glob.glob(folder + '/data/*.parquet')), split='train'))\n"
        "    row = ds[0]\n"
        "    out[how] = [len(ds), type(row['img']).__name__, row['img'].size[0] > 0, row['tags'],"
        " list(ds.column_names)]\n"
        "print(json.dumps(out))\n")


def _probe(python: str, folder: Path, tmp: Path) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp / "hf-cache")}
    env.pop("PYTHONPATH", None)
    r = subprocess.run([python, "-c", _probe_script(), str(folder)], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_loads_as_folder_and_through_data_files_with_images(unit_export, tmp_path):
    """The installed datasets, and every other version given in BENCHMAKER_DATASETS_PYTHONS (the
    python of a throwaway venv per version, e.g. datasets 3.6 and 4.x), read the folder and the raw
    parquet files alike, images decoding to PIL."""
    out = unit_export[0]
    pythons = [sys.executable] + [p for p in os.environ.get("BENCHMAKER_DATASETS_PYTHONS", "").split(os.pathsep) if p]
    seen = []
    for n, py in enumerate(pythons):
        got = _probe(py, out, tmp_path / str(n))
        assert got["folder"] == got["data_files"], (py, got)
        assert got["folder"][1].endswith("ImageFile") and got["folder"][2], got
        assert isinstance(got["folder"][3], list)
        seen.append(got)
    assert all(s == seen[0] for s in seen)


def _machine_names(extra: list[str]) -> list[str]:
    names = [str(support.ROOT), str(Path.home()), socket.gethostname(), *extra]
    return [n for n in names if n and n not in ("/", "")]


def _published_strings(folder: Path):
    from benchmaker.export.scrub import TEXT_SUFFIXES, parquet_strings

    for p in sorted(folder.rglob("*")):
        if not p.is_file():
            continue
        if p.suffix.lower() == ".parquet":
            for s in parquet_strings(p):
                yield p, s
        elif p.suffix.lower() in TEXT_SUFFIXES:
            yield p, p.read_text(encoding="utf-8")
        else:
            yield p, p.read_bytes().decode("latin-1")  # PNGs, timestamps: a path would show as bytes too


def scan(folder: Path, names: list[str]) -> list[tuple[str, str]]:
    """(file, name) for every name found; a name without "/" (user, host) as a whole word, and in binary
    files (PNG charts) only when it is long enough not to occur in compressed bytes by chance."""
    from benchmaker.export.scrub import TEXT_SUFFIXES

    hits = []
    for p, text in _published_strings(folder):
        binary = p.suffix.lower() not in TEXT_SUFFIXES and p.suffix.lower() != ".parquet"
        for n in names:
            if "/" in n:
                found = n in text
            elif binary and len(n) < 8:
                continue
            else:
                found = re.search(rf"(?<![A-Za-z0-9_-]){re.escape(n)}(?![A-Za-z0-9_-])", text) is not None
            if found:
                hits.append((str(p.relative_to(folder)), n))
    return sorted(set(hits))


def test_unit_export_names_no_local_path(unit_export, tiny_corpus):
    out = unit_export[0]
    assert scan(out, _machine_names([str(tiny_corpus), str(tiny_corpus.parent)])) == []
    cfg = (out / "config.yaml").read_text()
    assert "image_root: <local>/images" in cfg  # a folder outside the working folder: its name only
    assert not (out / "dataset_metadata.json").read_text().count("created_utc")
    facts = json.loads((out / "run_facts.json").read_text())
    assert facts["created_utc"] and facts["machine"]["cpu_count"] and socket.gethostname() not in json.dumps(facts)


@pytest.mark.parametrize(("url", "published"), [
    ("http://127.0.0.1:8000/v1", "http://<local>:8000/v1"),
    ("http://localhost/v1", "http://<local>/v1"),
    ("http://10.1.2.3:80", "http://<local>:80"),
    ("https://192.168.1.5/x", "https://<local>/x"),
    ("http://172.16.0.1", "http://<local>"),
    ("http://172.31.255.1:1", "http://<local>:1"),
    ("http://172.32.0.1", "http://172.32.0.1"),                    # public: outside 172.16/12
    ("http://[::1]:8000/v1", "http://<local>:8000/v1"),
    ("http://[fe80::1%25eth0]:8000/", "http://<local>:8000/"),      # link-local
    ("http://169.254.169.254/latest", "http://<local>/latest"),
    ("http://box.local:8000", "http://<local>:8000"),
    ("https://vllm.ns.svc.cluster.local:8000/v1", "https://<local>:8000/v1"),
    ("http://vllm:8000/v1", "http://<local>:8000/v1"),               # a name without a dot: a search domain's
    ("https://me:s3cret@api.openai.com/v1", "https://<redacted>@api.openai.com/v1"),
    ("https://generativelanguage.googleapis.com/v1beta?key=AIzaNOTREAL#frag",
     "https://generativelanguage.googleapis.com/v1beta?<redacted>#<redacted>"),
    ("https://llm.nrp-nautilus.io/v1", "https://llm.nrp-nautilus.io/v1"),
    ("https://8.8.8.8/a", "https://8.8.8.8/a"),
    ("s3://bucket/build", "s3://bucket/build"),                      # a bucket, not a host
    ("see http://127.0.0.1/", "see http://127.0.0.1/"),              # not a URL value: left alone
])
def test_endpoint_urls_publish_the_provider_only(url, published):
    """An endpoint URL of the config is published without credentials (userinfo, query string, fragment) and
    without this machine's, its network's or its cluster's host, from the text alone (same bytes anywhere)."""
    from benchmaker.export.scrub import scrub_config, scrub_url

    assert scrub_url(url) == published
    assert scrub_config({"llm": {"base_url": url}}, secrets=[]) == {"llm": {"base_url": published}}


def test_unit_export_publishes_endpoint_urls_scrubbed(unit_export):
    out = unit_export[0]
    cfg, values = (out / "config.yaml").read_text(), (out / "summary" / "config_values.csv").read_text()
    for text in (cfg, values):
        assert "http://<redacted>@<local>:8123/v1?<redacted>" in text and "https://hub.example.org" in text
        assert "https://search.example.org/api?<redacted>" in text
        for leak in ("pa55word", "bench:", "127.0.0.1", "k3y-in-the-query"):
            assert leak not in text, leak


def test_local_path_check_reads_parquet_values_and_refuses(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchmaker.export.scrub import find_local_paths, hide_paths

    pq.write_table(pa.table({"a": ["x", None], "tags": [["q", "/home/zed/img.jpg"], []], "s": [{"k": "v"}] * 2}),
                   tmp_path / "x.parquet")
    (tmp_path / "ok.md").write_text("see /home/zedd and image_root")
    assert find_local_paths(tmp_path, {"/home/zed": "~"}) == ["x.parquet"]
    assert find_local_paths(tmp_path, {"/home/ze": "~"}) == []  # whole path components only
    local = {"/work/me/bench": ".", "/data/photos": "<local>/photos", "/app": "~"}
    assert hide_paths({"p": ["/work/me/bench/results/x", "local-dir:/data/photos", "https://h.org/app/x"], "n": 3},
                      local) == {"p": ["./results/x", "local-dir:<local>/photos", "https://h.org/app/x"], "n": 3}


def test_config_paths_are_published_the_same_from_any_build_folder(tmp_path, monkeypatch):
    """A path the config writes absolutely is published in one form whatever folder the build runs from: it
    was ./images from the folder holding it and ~/bench/images from another (two byte-different configs)."""
    from benchmaker.export.scrub import find_local_paths, hide_paths, local_paths, scrub_config

    home = tmp_path / "home"
    bench, other = home / "bench", tmp_path / "elsewhere"
    for d in (bench / "images", bench / "models" / "clip", other, tmp_path / "photos"):
        d.mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "photos")
    monkeypatch.setenv("HOME", str(home))
    cfg = {"paths": {"image_root": str(bench / "images"), "results": "results", "rights_map": str(tmp_path / "link"),
                     "metadata_jsonl": "~/bench/meta.jsonl"},
           "similarity": {"model": f"local-dir:{bench / 'models' / 'clip'}"}}

    def published(cwd: Path) -> tuple[dict, str]:
        monkeypatch.chdir(cwd)
        local = local_paths(cfg, [cfg["paths"]["image_root"], cwd / "results" / "b" / "hf_dataset"])
        text = (f"read {bench / 'images'}/a.jpg, {tmp_path / 'photos'}/r.json and {bench / 'meta.jsonl'} into "
                f"{cwd}/results/b")
        (cwd / "out").mkdir()
        (cwd / "out" / "log.txt").write_text(hide_paths(text, local))
        assert find_local_paths(cwd / "out", local) == []
        return hide_paths(scrub_config(cfg), local), (cwd / "out" / "log.txt").read_text()

    here, there = published(bench), published(other)
    assert here == there
    assert here[0]["paths"] == {"image_root": "<local>/images", "results": "results", "rights_map": "<local>/link",
                                "metadata_jsonl": "~/bench/meta.jsonl"}  # the config's text decides, not HOME
    assert here[0]["similarity"]["model"] == "local-dir:<local>/clip"
    assert here[1] == "read <local>/images/a.jpg, <local>/link/r.json and ~/bench/meta.jsonl into ./results/b"


# ------------------------------------------------------------------------- the workflow, built twice
def _build(base: Path, numba: Path) -> Path:
    base.mkdir(parents=True)
    corpus = support.make_corpus(base / "images")
    clip = support.make_tiny_clip(base / "tiny-clip")
    systems = [{"name": "tiny-clip", "kind": "clip", "model": f"local-dir:{clip}", "device": "cpu",
                "num_workers": 0}, {"name": "bm25", "kind": "bm25"},
               {"name": "fused", "kind": "hybrid", "systems": ["tiny-clip", "bm25"]}]
    # deepening on: its published files (deepen/, summary/deepen/) are held to the same bytes; one shard
    # (what differs between the two builds is their folder, not the sharding)
    cfg = support.tiny_config(base, corpus, clip, n_shards=1, evaluate={"systems": systems},
                              deepen={"enabled": True, "k": 5})
    path = support.write_config(base / "config.yaml", cfg)
    home = base / f"home-{USER}"
    home.mkdir()
    env = {"NUMBA_CACHE_DIR": str(numba), "HOME": str(home), "USER": USER, "LOGNAME": USER}
    r = support.snakemake(["-c2"], base, path, timeout=1800, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    return base / "results" / "tiny"


@pytest.fixture(scope="module")
def builds(tmp_path_factory, numba_cache):
    tmp = tmp_path_factory.mktemp("builds")
    return _build(tmp / "first", numba_cache), _build(tmp / "elsewhere" / "second", numba_cache)


def _keys_of(doc) -> set[str]:
    """Every key of a JSON document, at any depth."""
    if isinstance(doc, dict):
        return set(doc) | {k for v in doc.values() for k in _keys_of(v)}
    return {k for v in doc for k in _keys_of(v)} if isinstance(doc, list) else set()


@pytest.mark.slow
def test_two_builds_same_bytes_but_run_facts(builds):
    a, b = (r / "hf_dataset" for r in builds)
    files_a = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
    files_b = sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    differ = [f for f in files_a if (a / f).read_bytes() != (b / f).read_bytes()]
    assert differ == ["run_facts.json"], differ
    facts = json.loads((a / "run_facts.json").read_text())
    assert set(facts["evaluate"]) >= set(SYSTEMS) and "timing" in facts["evaluate"]["tiny-clip"]
    assert "(run_facts.json)" in (a / "README.md").read_text()  # the card links it
    # the leaderboard is published without timings; they are in the results folder
    assert "query_latency_ms" not in pl.read_csv(a / "evaluate" / "leaderboard.csv").columns
    assert "query_latency_ms" in pl.read_csv(builds[0] / "evaluate" / "leaderboard.csv").columns
    # so is the leaderboard on the deepened qrels (and its summary copy): timings in run_facts.json
    assert {"deepen/evaluate/leaderboard.csv", "summary/deepen/evaluate/leaderboard.csv"} <= set(files_a)
    for f in ("deepen/evaluate/leaderboard.csv", "summary/deepen/evaluate/leaderboard.csv"):
        assert "query_latency_ms" not in pl.read_csv(a / f).columns, f
    assert "query_latency_ms" in pl.read_csv(builds[0] / "deepen" / "evaluate" / "leaderboard.csv").columns
    assert set(facts["deepen_evaluate"]) >= set(SYSTEMS) and "timing" in facts["deepen_evaluate"]["tiny-clip"]
    # no timing in a published table or result file, even where two builds happened to time alike:
    # none of the names the run facts hold a timing under is a column or a key of a published file
    timing = {k for part in ("evaluate", "deepen_evaluate") for s in facts[part].values() if isinstance(s, dict)
              for k in [*s, *(s.get("timing") or {})] if re.search(r"seconds|_ms|_per_s|latency", k)}
    assert {"seconds", "query_latency_ms", "images_per_s", "index_seconds"} <= timing, sorted(timing)
    for f in files_a:
        if f.endswith(".csv") and (a / f).stat().st_size:
            assert not timing & set(pl.read_csv(a / f, n_rows=0).columns), (f, timing & set(pl.read_csv(a / f).columns))
        elif f.endswith(".json") and f != "run_facts.json":
            assert not timing & _keys_of(json.loads((a / f).read_text())), (f, timing & _keys_of(json.loads((a / f)
                                                                                                  .read_text())))


@pytest.mark.slow
def test_nothing_published_names_the_machine(builds):
    for res in builds:
        base = res.parents[1]
        names = _machine_names([str(base), str(base.parent), USER, f"home-{USER}"])
        assert scan(res / "hf_dataset", names) == []
    cfg = (builds[0] / "hf_dataset" / "config.yaml").read_text()
    # the config's absolute paths (each build's own folder) in the form its text alone decides, whatever the
    # folder the build ran from (they were ./images here only because each build ran from its own folder)
    assert "image_root: <local>/images" in cfg and "local-dir:<local>/tiny-clip" in cfg


def _trec_eval(qrels: dict, lines: list[str]) -> dict:
    import pytrec_eval

    run: dict[str, dict[str, float]] = {}
    for line in lines:
        q, _, d, _, s, _ = line.split()
        run.setdefault(q, {})[d] = float(s)
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "map", "recip_rank"})
    per = ev.evaluate(run)
    keys = {"ndcg@10": "ndcg_cut_10", "map": "map", "mrr": "recip_rank"}
    return {m: sum(per.get(q, {}).get(k, 0.0) for q in qrels) / len(qrels) for m, k in keys.items()}


def _ranx(qrels: dict, lines: list[str], tmp: Path) -> dict:
    from ranx import Qrels, Run, evaluate

    f = tmp / "view.trec"
    f.write_text("".join(x + "\n" for x in lines))
    run = Run.from_file(str(f), kind="trec")
    got = evaluate(Qrels(qrels), run, ["ndcg@10", "map", "mrr"], make_comparable=True)
    return {k: float(v) for k, v in got.items()}


@pytest.mark.slow
def test_every_run_ranks_alike_in_ranx_pytrec_eval_and_the_leaderboard(builds, tmp_path):
    res = builds[0]
    qrels_all: dict[str, dict[str, int]] = {}
    for line in (res / "hf_dataset" / "trec" / "qrels.txt").read_text().splitlines():
        q, _, d, r = line.split()
        qrels_all.setdefault(q, {})[d] = int(r)
    qrels = {q: d for q, d in qrels_all.items() if any(v > 0 for v in d.values())}  # as the leaderboard
    exported = {d for docs in qrels_all.values() for d in docs}
    board = pl.read_csv(res / "evaluate" / "leaderboard.csv")
    assert set(board.filter(pl.col("scope") == "exported")["system"]) == {"tiny-clip", "bm25"}
    depth = json.loads((res / "evaluate" / "leaderboard.json").read_text())["systems"][0]["depth"]
    for name in SYSTEMS:
        lines = (res / "evaluate" / "runs" / f"{name}.trec").read_text().splitlines()
        by_q: dict[str, list[str]] = {}
        for line in lines:
            by_q.setdefault(line.split()[0], []).append(line)
        for q, ls in by_q.items():
            scores = [float(x.split()[4]) for x in ls]
            assert all(s > t for s, t in zip(scores, scores[1:])), (name, q)  # no tie, file order = score order
        views = {"pool": [x for x in lines if x.split()[2] in qrels_all.get(x.split()[0], {})],
                 "corpus": [x for q in by_q for x in by_q[q][:depth]]}
        if name != "fused":  # the exported images only, scored over every exported query (as mteb does)
            views["exported"] = [x for q in by_q for x in [y for y in by_q[q] if y.split()[2] in exported][:depth]]
        for scope, view in views.items():
            row = board.filter((pl.col("system") == name) & (pl.col("scope") == scope))
            assert row.height == 1, (name, scope)
            against = qrels_all if scope == "exported" else qrels
            te, rx = _trec_eval(against, view), _ranx(against, view, tmp_path)
            for m in ("ndcg@10", "map", "mrr"):
                assert te[m] == pytest.approx(rx[m], abs=1e-9), (name, scope, m, te, rx)
                assert te[m] == pytest.approx(row[m][0], abs=1e-6), (name, scope, m, te, row.to_dicts())


@pytest.mark.slow
def test_benchmaker_mteb_equals_the_leaderboard(builds, tmp_path):
    """`benchmaker mteb` (mteb.evaluate from the project's environment) on the export, with the model of
    the `tiny-clip` system, prints the leaderboard's `exported` nDCG@10 (mteb rounds to 5 decimals), and
    its ranking (--trec-run) scored by pytrec_eval against the export's trec/qrels.txt gives the
    leaderboard's number to 1e-6."""
    import pytrec_eval

    res = builds[0]
    clip = res.parents[1] / "tiny-clip"
    out, run_file = tmp_path / "mteb.json", tmp_path / "mteb.trec"
    env = {**os.environ, "PYTHONPATH": str(support.ROOT / "src"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "hf"), "MTEB_CACHE": str(tmp_path / "mteb-cache")}
    r = subprocess.run([sys.executable, "-m", "benchmaker.cli", "mteb", str(res / "hf_dataset"),
                        "--model", f"local-dir:{clip}", "--device", "cpu", "--out", str(out),
                        "--trec-run", str(run_file)], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["main_score"] == got["scores"]["ndcg_at_10"]
    board = pl.read_csv(res / "evaluate" / "leaderboard.csv")
    row = board.filter((pl.col("system") == "tiny-clip") & (pl.col("scope") == "exported")).row(0, named=True)
    assert abs(got["main_score"] - row["ndcg@10"]) <= 5e-6 + 1e-9, (got["main_score"], row)  # mteb's rounding
    qrels: dict[str, dict[str, int]] = {}
    for line in (res / "hf_dataset" / "trec" / "qrels.txt").read_text().splitlines():
        q, _, d, rel = line.split()
        qrels.setdefault(q, {})[d] = int(rel)
    run: dict[str, dict[str, float]] = {}
    for line in run_file.read_text().splitlines():
        q, _, d, _, score, _ = line.split()
        run.setdefault(q, {})[d] = float(score)
    per = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    assert len(per) == len(qrels) == row["queries"]  # every exported query, as mteb averages them
    assert sum(v["ndcg_cut_10"] for v in per.values()) / len(per) == pytest.approx(row["ndcg@10"], abs=1e-6)

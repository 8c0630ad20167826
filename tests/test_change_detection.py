"""The image folder is part of the DAG: listing files, sharded preprocess, reruns of exactly what changed.

Unit tests of benchmaker.preprocess.listing and run_shard/merge, then one small end-to-end workflow
(4 shards) that adds images, changes one and removes one, checking `snakemake -n` before each run and
what the rerun did (which jobs ran, how many images were encoded, what disappeared).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import support

from benchmaker.config import validate_config
from benchmaker.preprocess import merge, run, run_shard
from benchmaker.preprocess.listing import HEADER, read_listing, write_listings
from benchmaker.preprocess.stage import DEFAULTS
from benchmaker.sharding import shard_names, shard_of

ROOT = Path(__file__).resolve().parents[1]


def _listing_mtimes(d: Path) -> dict[str, int]:
    return {p.stem: p.stat().st_mtime_ns for p in sorted(d.glob("*.tsv"))}


# -- the listing ---------------------------------------------------------------------------------------
def test_listing_rewrites_only_changed_shards(tmp_path, tiny_corpus):
    root = support.copy_tree(tiny_corpus, tmp_path / "images")
    out = tmp_path / "listing"
    n = 4
    first = write_listings(root, out, DEFAULTS, n)
    assert first.changed == shard_names(n) and first.files == 33
    before = _listing_mtimes(out)
    again = write_listings(root, out, DEFAULTS, n)
    assert again.changed == [] and _listing_mtimes(out) == before
    # every candidate is listed once, in its shard, sorted, with its size
    rows = {name: read_listing(out / f"{name}.tsv") for name in shard_names(n)}
    ids = [e.image_id for name in rows for e in rows[name]]
    assert sorted(ids) == sorted(str(p.relative_to(root)) for p in root.rglob("*.*"))
    for name, entries in rows.items():
        assert [e.image_id for e in entries] == sorted(e.image_id for e in entries)
        assert all(shard_of(e.image_id, n) == int(name) for e in entries)
        assert all(e.size == (root / e.image_id).stat().st_size for e in entries)
    # a new file changes exactly its shard's listing; so do a changed and a removed file
    new = root / "new" / "a.png"
    new.parent.mkdir()
    shutil.copy(root / "red" / "circle_0.jpg", new)
    res = write_listings(root, out, DEFAULTS, n)
    assert res.changed == [f"{shard_of('new/a.png', n):05d}"]
    victim = sorted(rows["00001"], key=lambda e: e.image_id)[0].image_id
    (root / victim).unlink()
    assert write_listings(root, out, DEFAULTS, n).changed == ["00001"]
    # non-image files and hidden files are not listed (they never were inspected)
    (root / "notes.txt").write_text("x")
    (root / ".DS_Store").write_text("x")
    assert write_listings(root, out, DEFAULTS, n).changed == []
    # a shard count that shrank leaves no stale listing behind
    res = write_listings(root, out, DEFAULTS, 2)
    assert res.removed == ["00002", "00003"] and sorted(p.name for p in out.iterdir()) == ["00000.tsv", "00001.tsv"]


def test_listing_escapes_odd_names_and_lists_scan_rejects(tmp_path, tiny_corpus):
    root = tmp_path / "images"
    root.mkdir()
    odd = "tab\there\nnew line\\back.jpg"
    shutil.copy(next(tiny_corpus.glob("red/*.jpg")), root / odd)
    (root / "dangling.jpg").symlink_to(tmp_path / "nowhere.jpg")
    write_listings(root, tmp_path / "listing", DEFAULTS, 1)
    text = (tmp_path / "listing" / "00000.tsv").read_text()
    assert text.splitlines()[0] == HEADER and len(text.splitlines()) == 3
    entries = {e.image_id: e for e in read_listing(tmp_path / "listing" / "00000.tsv")}
    assert entries[odd].size == (root / odd).stat().st_size and entries[odd].reason is None
    assert entries["dangling.jpg"].reason == "broken_symlink" and entries["dangling.jpg"].size is None
    # run_shard inspects the odd name and quarantines the dangling link with its reason
    out = tmp_path / "out"
    run_shard(listing=str(tmp_path / "listing" / "00000.tsv"), images=str(out / "i.jsonl"),
              quarantine=str(out / "q.jsonl"), image_root=str(root), shard="00000", n_shards=1)
    assert [json.loads(x)["image_id"] for x in (out / "i.jsonl").read_text().splitlines()] == [odd]
    q = [json.loads(x) for x in (out / "q.jsonl").read_text().splitlines()]
    assert [(r["path"], r["reason"]) for r in q] == [("dangling.jpg", "broken_symlink")]


def test_bad_listing_is_named(tmp_path):
    p = tmp_path / "00000.tsv"
    p.write_text("image_id\tsize\n")
    with pytest.raises(ValueError, match="not a benchmaker listing"):
        read_listing(p)
    p.write_text(HEADER + "\na.jpg\tten\t1\t\t\n")
    with pytest.raises(ValueError, match=r"00000.tsv:2: size and mtime_ns must be integers"):
        read_listing(p)


def test_missing_image_root_names_the_key(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"paths\.image_root: .*does not exist"):
        write_listings(tmp_path / "nope", tmp_path / "listing", DEFAULTS, 2)


def test_sharded_preprocess_equals_whole_folder_run(tmp_path, tiny_corpus):
    """run_shard per listing + merge gives byte-identical files to the one-job ``run``."""
    n = 3
    meta = tmp_path / "meta.jsonl"
    meta.write_text("".join(json.dumps({"image_id": i, "site": f"s{k}"}) + "\n"
                            for k, i in enumerate(["red/circle_0.jpg", "blue/square_1.png", "gone.jpg"])))
    rm = support.rights_map(tmp_path / "rights.json")
    whole = tmp_path / "whole"
    run(images=str(whole / "images.jsonl"), quarantine=str(whole / "quarantine.jsonl"),
        shards=[str(whole / f"{s}.jsonl") for s in shard_names(n)], image_root=str(tiny_corpus), n_shards=n,
        rights_map=str(rm), metadata=str(meta))
    write_listings(tiny_corpus, tmp_path / "listing", DEFAULTS, n)
    sh = tmp_path / "sharded"
    for s in shard_names(n):
        run_shard(listing=str(tmp_path / "listing" / f"{s}.tsv"), images=str(sh / "images" / f"{s}.jsonl"),
                  quarantine=str(sh / "quarantine" / f"{s}.jsonl"), image_root=str(tiny_corpus), shard=s,
                  n_shards=n, rights_map=str(rm), metadata=str(meta), threads=2)
        assert (sh / "images" / f"{s}.jsonl").read_bytes() == (whole / f"{s}.jsonl").read_bytes()
    merge(parts=[str(sh / "images" / f"{s}.jsonl") for s in shard_names(n)],
          quarantine_parts=[str(sh / "quarantine" / f"{s}.jsonl") for s in shard_names(n)],
          images=str(sh / "images.jsonl"), quarantine=str(sh / "quarantine.jsonl"))
    assert (sh / "images.jsonl").read_bytes() == (whole / "images.jsonl").read_bytes()
    assert (sh / "quarantine.jsonl").read_bytes() == (whole / "quarantine.jsonl").read_bytes()


def test_merge_without_any_image_fails_and_keeps_the_quarantine(tmp_path):
    root = tmp_path / "images"
    root.mkdir()
    (root / "x.jpg").write_text("not a jpeg")
    write_listings(root, tmp_path / "listing", DEFAULTS, 1)
    kw = dict(images=str(tmp_path / "s.jsonl"), quarantine=str(tmp_path / "sq.jsonl"))
    run_shard(listing=str(tmp_path / "listing" / "00000.tsv"), image_root=str(root), shard=0, n_shards=1, **kw)
    with pytest.raises(ValueError, match="no usable image"):
        merge(parts=[kw["images"]], quarantine_parts=[kw["quarantine"]], images=str(tmp_path / "i.jsonl"),
              quarantine=str(tmp_path / "q.jsonl"), image_root=str(root))
    assert json.loads((tmp_path / "q.jsonl").read_text())["reason"] == "not_an_image"


def test_workflow_with_missing_image_root_is_a_clear_error(tmp_path, tiny_cfg):
    tiny_cfg["paths"]["image_root"] = str(tmp_path / "missing")
    cfg = support.write_config(tmp_path / "config.yaml", tiny_cfg)
    r = support.snakemake(["-n", "-c1"], tmp_path, cfg)
    assert r.returncode != 0
    assert "paths.image_root" in r.stdout + r.stderr and "does not exist" in r.stdout + r.stderr


# -- end to end -------------------------------------------------------------------------------------------
N_SHARDS = 3  # each step below reruns some shards and leaves another as it was (1: shard 2; 2: shards 0, 1)


def _stats(out: str) -> dict[str, int]:
    from test_workflow import job_stats

    return job_stats(out)


def _shards_of(out: str, rule: str) -> set[str]:
    """The shard (or shard group: embed_images) wildcard of every job of ``rule`` in a dry-run listing."""
    found = set()
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        if re.match(rf"(?:local)?rule {rule}:", block):
            m = re.search(r"wildcards: [^\n]*?\b(?:shard|group)=([\d-]+)", block)  # decode_images: pixels=, shard=
            if m:
                found.add(m.group(1))
    return found


def _encoded(res: Path, since: float) -> int:
    """Images CLIP encoded (vision + embed_images) in the jobs whose logs were written after ``since``."""
    n = 0
    for rule in ("vision", "embed_images"):
        for log in (res / "logs" / rule).glob("*.log"):
            if log.stat().st_mtime >= since:
                n += sum(int(m) for m in re.findall(r"(\d+) to encode", log.read_text()))
    return n


def _ran(res: Path, rule: str, since: float) -> set[str]:
    return {p.stem for p in (res / "logs" / rule).glob("*.log") if p.stat().st_mtime >= since}


def _ids(path: Path, key: str = "image_id") -> set[str]:
    return {json.loads(line)[key] for line in path.read_text().splitlines() if line.strip()}


def _names_in_shard(shard: int, count: int, prefix: str) -> list[str]:
    out, k = [], 0
    while len(out) < count:
        name = f"{prefix}/img_{k}.png"
        if shard_of(name, N_SHARDS) == shard:
            out.append(name)
        k += 1
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_clip):
    tmp = tmp_path_factory.mktemp("change")
    corpus = support.make_corpus(tmp / "images", n_per=1, with_bad=True)
    cfg = support.tiny_config(tmp, corpus, tiny_clip, n_shards=N_SHARDS)
    cfg["plan"]["num_seeds"] = 3
    cfg_path = support.write_config(tmp / "config.yaml", cfg)
    r = support.snakemake(["-c2"], tmp, cfg_path, timeout=1500)
    if r.returncode != 0:
        pytest.fail("workflow failed:\n" + (r.stdout + r.stderr)[-6000:])
    cfg = validate_config(cfg)
    return tmp, cfg_path, Path(cfg["paths"]["results"]) / cfg["benchmark"]["name"], corpus


DOWNSTREAM = {"merge_images": 1, "merge_annotations": 1, "plan": 1, "queries": 1, "judge": 1, "embed_queries": 1,
              "score": 1, "summary": 1, "export": 1, "all": 1,
              # the judge audit (on by default) follows the judge: a new sample of the new pairs
              "audit_sample": 1, "audit_labelling": 1, "audit_report": 1}


@pytest.mark.slow
def test_added_changed_and_removed_images_rerun_exactly_their_shards(run_dir):
    tmp, cfg_path, res, corpus = run_dir
    # no change: nothing to do
    r = support.snakemake(["-n", "-c1"], tmp, cfg_path)
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, r.stdout[-2000:]

    # 1. add 3 images under a new subfolder, all hashing to shard 2
    added = _names_in_shard(2, 3, "new_site")
    for k, name in enumerate(added):
        (corpus / name).parent.mkdir(exist_ok=True)
        support.draw_image((10, 200, 200), "circle", 100, seed=1000 + k).save(corpus / name)
    r = support.snakemake(["-n", "-c1"], tmp, cfg_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    shard_jobs = {"preprocess": 1, "vision": 1, "decode_images": 1, "embed_images": 1}
    assert _stats(out) == shard_jobs | DOWNSTREAM, _stats(out)
    assert (_shards_of(out, "preprocess") == _shards_of(out, "vision") == _shards_of(out, "decode_images")
            == _shards_of(out, "embed_images") == {"00002"})
    t0 = time.time()
    time.sleep(0.05)
    r = support.snakemake(["-c1"], tmp, cfg_path, timeout=1500)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert _ran(res, "preprocess", t0) == _ran(res, "vision", t0) == {"00002"}
    assert _encoded(res, t0) == len(added)  # vision + embed_images: only the new images met CLIP
    assert set(added) <= _ids(res / "images.jsonl") and set(added) <= _ids(res / "annotations.jsonl")
    r = support.snakemake(["-n", "-c1"], tmp, cfg_path)
    assert "Nothing to be done" in r.stdout + r.stderr, r.stdout[-2000:]

    # 2. change one image in place (same path, new bytes) and remove one, in two other shards
    images = {json.loads(x)["image_id"]: json.loads(x) for x in (res / "images.jsonl").read_text().splitlines()}
    by_shard: dict[int, list[str]] = {}
    for i in sorted(images):
        if not i.startswith("new_site/"):
            by_shard.setdefault(shard_of(i, N_SHARDS), []).append(i)
    changed = by_shard[0][0]
    removed = next(i for i in by_shard[1] if i in _ids(res / "qrels.jsonl")) if set(by_shard[1]) & _ids(
        res / "qrels.jsonl") else by_shard[1][0]
    support.draw_image((0, 0, 0), "stripes", 120, seed=4242).save(corpus / changed,
                                                                 format="PNG" if changed.endswith("png") else "JPEG")
    (corpus / removed).unlink()
    r = support.snakemake(["-n", "-c1"], tmp, cfg_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    shard_jobs = {"preprocess": 2, "vision": 2, "decode_images": 2, "embed_images": 2}
    assert _stats(out) == shard_jobs | DOWNSTREAM, _stats(out)
    assert _shards_of(out, "preprocess") == _shards_of(out, "vision") == {"00000", "00001"}
    t0 = time.time()
    time.sleep(0.05)
    r = support.snakemake(["-c1"], tmp, cfg_path, timeout=1500)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert _encoded(res, t0) == 1  # the changed image, once; the removed one is simply gone
    new_images = {json.loads(x)["image_id"]: json.loads(x) for x in (res / "images.jsonl").read_text().splitlines()}
    assert new_images[changed]["sha256"] != images[changed]["sha256"]
    assert removed not in new_images
    for f in ("annotations.jsonl", "query_plan.jsonl", "qrels.jsonl", "qrels_with_score.jsonl"):
        text = (res / f).read_text()
        assert json.dumps(removed) not in text, f
    assert removed not in _ids(res / "annotations.jsonl")
    parquet = sorted((res / "hf_dataset" / "data").glob("*.parquet"))
    data = pl.concat([pl.read_parquet(p, columns=["image_id"]) for p in parquet])
    assert removed not in data["image_id"].to_list()
    emb = pl.concat([pl.read_parquet(p) for p in (res / "embeddings" / "images").glob("*.parquet")])
    assert removed not in emb["image_id"].to_list() and changed in emb["image_id"].to_list()
    r = support.snakemake(["-n", "-c1"], tmp, cfg_path)
    assert "Nothing to be done" in r.stdout + r.stderr, r.stdout[-2000:]


# -- resume after kill -9 (README "Interrupted runs") -----------------------------------------------------
def _smk_cmd(tmp: Path, cfg: Path, *args: str) -> list[str]:
    # the workflow profile (profiles/default) applies, as in the README's commands
    return [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(tmp),
            "--configfile", str(cfg), *args]


def _env() -> dict:
    e = dict(os.environ)
    e.setdefault("HF_HUB_OFFLINE", "1")
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    e["PATH"] = support.no_slurm_path(e.get("PATH", ""))
    return e


@pytest.mark.slow
def test_resume_after_kill_9_is_the_documented_command(tmp_path, tiny_clip):
    corpus = support.make_corpus(tmp_path / "images", n_per=1, with_bad=False)
    # one shard: the stale lock and the documented resume are the point, not the shards (which jobs a
    # change reruns, shard by shard: the test above)
    cfg = support.tiny_config(tmp_path, corpus, tiny_clip, n_shards=1)
    cfg["plan"]["num_seeds"] = 3
    cfg_path = support.write_config(tmp_path / "config.yaml", cfg)
    res = tmp_path / "results" / "tiny"
    proc = subprocess.Popen(_smk_cmd(tmp_path, cfg_path, "--cores", "2"), env=_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 600
        # kill when a vision job is running: a lock is held and outputs are being written
        while time.time() < deadline and not list((res / "logs" / "vision").glob("*.log")):
            assert proc.poll() is None, "the workflow ended before it could be killed"
            time.sleep(0.2)
        time.sleep(1.0)
        assert proc.poll() is None
        os.killpg(proc.pid, signal.SIGKILL)  # snakemake and the job it started, as a hard kill does
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert list((tmp_path / ".snakemake" / "locks").iterdir()), "expected the stale lock a hard kill leaves"
    assert not (res / "hf_dataset").exists()
    # without the documented first step Snakemake refuses (the README says why)
    r = subprocess.run(_smk_cmd(tmp_path, cfg_path, "--cores", "2"), env=_env(), capture_output=True, text=True)
    assert r.returncode != 0 and "cannot be locked" in r.stdout + r.stderr
    # README: `snakemake --configfile my.yaml --unlock`, then the same run command again
    r = subprocess.run(_smk_cmd(tmp_path, cfg_path, "--unlock"), env=_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run(_smk_cmd(tmp_path, cfg_path, "--cores", "2"), env=_env(), capture_output=True, text=True,
                       timeout=1500)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert (res / "hf_dataset" / "README.md").exists()
    r = subprocess.run(_smk_cmd(tmp_path, cfg_path, "-n", "--cores", "1"), env=_env(), capture_output=True, text=True)
    assert "Nothing to be done" in r.stdout + r.stderr, r.stdout[-2000:]


def test_job_processes_never_rescan_the_folder(tmp_path, tiny_cfg):
    """Snakemake parses the workflow again in every job it starts as a process (cluster jobs: --mode
    remote; local subprocess jobs): those parses must not list image_root (it may not even be mounted
    where the job runs, and a million stats per job would be absurd); they use the controller's listing."""
    tiny_cfg["paths"]["image_root"] = str(tmp_path / "not-here")
    cfg = support.write_config(tmp_path / "config.yaml", tiny_cfg)
    r = support.snakemake(["--mode", "subprocess", "-n", "-c1"], tmp_path, cfg)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert not (tmp_path / "results" / "tiny" / "shards" / "listing").exists()

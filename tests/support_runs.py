"""The tiny benchmark built twice, in two folders with the same config file contents (results relative
to the folder, shared corpus and checkpoint, the configured column names ``qid`` / ``relevant``): run A
fresh at ``--cores 1``; run B with other runtime knobs, a pre-warmed embedding cache, ``--cores 2``
killed with SIGKILL, unlocked and resumed (tests/test_determinism.py says why). One session fixture,
``tiny_runs`` (tests/conftest.py): tests/test_determinism.py compares the two, tests/test_workflow.py
reads run A.

And the tiny benchmark's upstream on one shard (``tiny_upstream``): the stages up to the labelled,
scored qrels and the query embeddings (UPSTREAM_RULES), built once; a test that evaluates, deepens or
totals losses on it copies the folder (with its ``.snakemake``, so Snakemake sees that upstream as done)
and runs only the stages it adds."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import support

ROOT = support.ROOT
EPOCH = "1700000000"
# files that may differ between runs: Snakemake's bookkeeping, logs and timings (the dataset's run facts)
VOLATILE = re.compile(r"(^|/)(logs|benchmarks)/|\.snakemake_timestamp$|(^|/)run_facts\.json$")
# the configured names on disk (tests/test_workflow.py reads them back): the same in both folders
COLUMNS = {"query_id": "qid", "relevance_label": "relevant"}


def digests(results: Path) -> dict[str, str]:
    out = {}
    for f in sorted(results.rglob("*")):
        rel = f.relative_to(results).as_posix()
        if f.is_file() and not VOLATILE.search(rel):
            out[rel] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def config_for(shared: Path, tiny_corpus: Path, n_shards: int = 2, **runtime) -> dict:
    """The tiny config with paths that are the same for every run folder (results is relative);
    ``runtime``: {"section" or "section.sub": {key: value}} merged in."""
    cfg = support.tiny_config(shared, tiny_corpus, shared / "clip", n_shards=n_shards, columns=dict(COLUMNS))
    cfg["paths"]["results"] = "results"
    cfg["paths"]["rights_map"] = str(shared / "rights_map.json")
    for section, values in runtime.items():
        node = cfg
        for part in section.split("."):
            node = node.setdefault(part, {})
        node.update(values)
    return cfg


def smk(args, workdir: Path, cfg: dict, name="config.yaml", **kw):
    path = support.write_config(workdir / name, cfg)
    return support.snakemake(args, workdir, path, env={"SOURCE_DATE_EPOCH": EPOCH}, **kw)


def _check(r) -> None:
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]


def _prewarm(shared: Path, b: Path, tiny_corpus: Path) -> None:
    """B's embedding cache holds half of the images, encoded by another benchmark with 10 shards sharing
    it: those embeddings come from forward passes of 1-5 images, and B's own jobs encode the other half.
    (Without fixed-shape passes a pass of 3 images gives other bits than one of 16, at 1 and at 2
    threads; 8 and 12 do not.)"""
    warm = config_for(shared, tiny_corpus, n_shards=10)
    warm["paths"]["results"] = "prewarm"
    warm["similarity"]["cache_dir"] = "results/.cache/embeddings"
    warm["similarity"]["gpu_jobs"] = 10  # one embed_images job per shard: targets named by shard
    _check(smk(["-c1", *(f"prewarm/tiny/embeddings/images/{i:05d}.parquet" for i in range(5))], b, warm,
               name="prewarm.yaml"))
    assert list((b / "results" / ".cache" / "embeddings").rglob("part-*.keys.npy"))


def _killed_run(b: Path, cfg: dict) -> bool:
    """A ``--cores 2`` run of ``cfg`` in ``b``, killed (SIGKILL to Snakemake and its jobs) once some jobs
    have finished; True if it was killed (not finished first)."""
    cfg_path = support.write_config(b / "config.yaml", cfg)
    env = dict(os.environ, HF_HUB_OFFLINE="1", SOURCE_DATE_EPOCH=EPOCH,
               PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PATH=support.no_slurm_path())
    proc = subprocess.Popen([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(b),
                             "--configfile", str(cfg_path), "--workflow-profile", "none", "-c2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.time() + 600
    marker = b / "results" / "tiny" / "annotations.jsonl"
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    killed = proc.poll() is None
    if killed:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return killed


def run_twice(shared: Path, tiny_corpus: Path, tiny_clip: Path) -> dict:
    """Build A and B (module docstring) under ``shared``; their folders, config and digests."""
    shutil.copytree(tiny_clip, shared / "clip")  # the in-place replacement test touches this copy
    support.rights_map(shared / "rights_map.json")
    a, b = shared / "a", shared / "b"
    a.mkdir()
    b.mkdir()
    base = config_for(shared, tiny_corpus)
    _check(smk(["-c1", "--show-failed-logs"], a, base))

    other = config_for(shared, tiny_corpus, **{"similarity": {"batch_size": 3, "num_workers": 1},
                                               "vision.clip": {"batch_size": 5, "num_workers": 1}})
    _prewarm(shared, b, tiny_corpus)
    killed = _killed_run(b, other)
    r = smk(["--unlock"], b, other)
    assert r.returncode == 0, r.stderr[-3000:]
    _check(smk(["-c1", "--rerun-incomplete", "--show-failed-logs"], b, other))
    res_a, res_b = a / "results" / "tiny", b / "results" / "tiny"
    return {"shared": shared, "a": a, "b": b, "base": base, "killed": killed,
            "digests_a": digests(res_a), "digests_b": digests(res_b), "corpus": tiny_corpus}


# the jobs of a 1-shard tiny build up to the scored qrels and the query embeddings: what every test on
# `tiny_upstream` shares, and what a copy of it must not run again
UPSTREAM_RULES = frozenset({"preprocess", "decode_images", "merge_images", "embed_images", "vision",
                            "merge_annotations", "plan", "queries", "judge", "embed_queries", "score"})


def build_upstream(shared: Path, tiny_corpus: Path, tiny_clip: Path) -> dict:
    """The tiny config on one shard (support.tiny_config; results relative to the run folder, the rights
    map in ``shared``) built up to UPSTREAM_RULES in ``shared/upstream``; its folder and config."""
    folder = shared / "upstream"
    folder.mkdir()
    cfg = support.tiny_config(shared, tiny_corpus, tiny_clip, n_shards=1)
    cfg["paths"]["results"] = "results"
    targets = [f"results/tiny/{f}" for f in ("qrels_with_score.jsonl", "embeddings/queries.parquet")]
    r = support.snakemake(["-c2", "--show-failed-logs", *targets], folder,
                          support.write_config(shared / "upstream.yaml", cfg), timeout=1500)
    _check(r)
    assert set(support.job_stats(r.stdout + r.stderr)) - {"all"} == UPSTREAM_RULES, r.stdout[-3000:]
    return {"folder": folder, "config": cfg}


def copy_upstream(upstream: dict, workdir: Path, **sections) -> dict:
    """Copy the built upstream into ``workdir`` (results under ``workdir/results``, Snakemake's records
    in ``workdir/.snakemake``, file times kept); a copy of its config with ``sections`` merged in."""
    from benchmaker.config import deep_merge

    shutil.copytree(upstream["folder"], workdir, symlinks=True, dirs_exist_ok=True)
    return deep_merge(upstream["config"], sections)


def assert_upstream_not_rerun(output: str) -> None:
    """A run on a copy of `tiny_upstream` (its Snakemake output) ran none of the upstream's jobs."""
    ran = set(support.job_stats(output))
    assert ran and not ran & UPSTREAM_RULES, (sorted(ran & UPSTREAM_RULES), output[-3000:])

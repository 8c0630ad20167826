"""The whole Snakefile on the tiny fixture corpus: dry run, lint, end-to-end contracts, rerun scope."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
import support

from benchmaker.config import validate_config
from benchmaker.formats import FacetModel, read_table
from benchmaker.losses import read_losses

ROOT = Path(__file__).resolve().parents[1]
RULES_PER_RUN = {"preprocess", "merge_images", "vision", "merge_annotations", "plan", "queries", "judge",
                 "decode_images", "embed_images", "embed_queries", "score", "summary", "export", "all"}


job_stats = support.job_stats  # parse Snakemake's 'Job stats' table (tests/support.py)


def test_dry_run_lists_every_job(tmp_path, tiny_cfg):
    cfg = support.write_config(tmp_path / "config.yaml", tiny_cfg)
    r = support.snakemake(["-n", "-c1"], tmp_path, cfg)
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    n = tiny_cfg["n_shards"]
    assert stats == {
        "all": 1, "preprocess": n, "merge_images": 1, "vision": n, "merge_annotations": 1, "plan": 1, "queries": 1,
        "judge": 1, "decode_images": n, "embed_images": n, "embed_queries": 1, "score": 1, "summary": 1, "export": 1,
    } | {k: v for k, v in stats.items() if k not in RULES_PER_RUN}


def test_job_count_scales_with_shards_only(tmp_path, tiny_cfg):
    tiny_cfg["n_shards"] = 64
    cfg = support.write_config(tmp_path / "config.yaml", tiny_cfg)
    r = support.snakemake(["-n", "-c1", "--quiet", "rules"], tmp_path, cfg)
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    assert stats["decode_images"] == 64 and stats["vision"] == 64
    assert stats["preprocess"] == 64
    # the model jobs follow the work, not the shard count: similarity.gpu_jobs (4) groups of 16 shards
    assert stats["embed_images"] == 4
    assert sum(stats.values()) < 64 * 5 + 20


def test_bad_config_key_is_named(tmp_path, tiny_cfg):
    tiny_cfg["plan"]["neg_hardd"] = 1
    cfg = support.write_config(tmp_path / "config.yaml", tiny_cfg)
    r = support.snakemake(["-n", "-c1"], tmp_path, cfg)
    assert r.returncode != 0
    assert "plan.neg_hardd" in r.stdout + r.stderr


def test_lint_is_clean():
    r = subprocess.run([sys.executable, "-m", "snakemake", "--lint", "-s", str(ROOT / "Snakefile"),
                        "-d", str(ROOT)], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PATH": support.no_slurm_path()})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Lints for" not in r.stdout + r.stderr


def test_snakefmt_is_clean():
    """`make lint` (and so CI) runs snakefmt --check: catch a misformatted rule file in pytest first."""
    snakefmt = Path(sys.executable).with_name("snakefmt")
    if not snakefmt.exists():
        pytest.skip("snakefmt is not installed (pip install -e '.[test]')")
    r = subprocess.run([str(snakefmt), "--check", "Snakefile", "rules"], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


@dataclass
class Run:
    """A built benchmark: its folder, validated config (results as an absolute path) and config file."""
    folder: Path
    cfg: dict
    config: Path
    shared: Path
    corpus: Path

    def variant(self, name: str, **sections) -> Path:
        """A config file in the run's folder: the run's config with ``sections`` merged in
        (support_runs.config_for)."""
        from support_runs import config_for

        return support.write_config(self.folder / name, config_for(self.shared, self.corpus, **sections))

    def dry_run(self, config: Path) -> subprocess.CompletedProcess:
        from support_runs import EPOCH

        return support.snakemake(["-n", "-c1"], self.folder, config, env={"SOURCE_DATE_EPOCH": EPOCH})


@pytest.fixture(scope="module")
def full_run(tiny_runs) -> Run:
    """Run A of the two builds tests/test_determinism.py compares (tests/support_runs.py: the tiny corpus,
    2 shards, the columns renamed to qid / relevant, results relative to the folder)."""
    a, base = tiny_runs["a"], tiny_runs["base"]
    cfg = validate_config(base)
    cfg["paths"]["results"] = str(a / base["paths"]["results"])  # the tests read the results from here
    return Run(a, cfg, a / "config.yaml", tiny_runs["shared"], tiny_runs["corpus"])


@pytest.mark.slow
def test_end_to_end_contracts(full_run):
    cfg = full_run.cfg
    res = Path(cfg["paths"]["results"]) / cfg["benchmark"]["name"]
    cols = cfg["columns"]
    fm = FacetModel.from_config(cfg["facets"])
    images = read_table("images", res / "images.jsonl", columns=cols)
    quarantine = read_table("quarantine", res / "quarantine.jsonl")
    # bad input: the three broken files are quarantined with reasons, everything else accepted
    assert images.height == 30
    assert quarantine.height == 3
    assert set(quarantine["path"].to_list()) == {"broken/truncated.jpg", "broken/not_an_image.jpg", "broken/empty.png"}
    assert quarantine["reason"].null_count() == 0
    shard_rows = sum(read_table("images", p, columns=cols).height for p in (res / "shards" / "images").glob("*.jsonl"))
    assert shard_rows == images.height
    ann = read_table("annotations", res / "annotations.jsonl", columns=cols, facets=fm)
    vision_losses = read_losses(res / "losses" / "vision.jsonl")
    assert ann.height + vision_losses.height == images.height
    plan = read_table("query_plan", res / "query_plan.jsonl", columns=cols)
    assert plan.height >= 1
    qrels = read_table("qrels", res / "qrels.jsonl", columns=cols)
    judge_losses = read_losses(res / "losses" / "judge.jsonl")
    # every planned query is written (queries.jsonl, from its seed alone) or lost writing it, and every
    # written one labelled or lost labelling: no query is counted twice, none is dropped silently
    queries = read_table("queries", res / "queries.jsonl", columns=cols)
    query_losses = read_losses(res / "losses" / "queries.jsonl")
    assert queries.height + query_losses.height == plan.height and set(queries["writer"]) == {"rules"}
    assert qrels["query_id"].n_unique() + judge_losses.filter(pl.col("item_type") == "query").height == queries.height
    assert qrels.select("query_id", "query_text", "narrative").unique(maintain_order=True).rows() == \
        queries.filter(pl.col("query_id").is_in(qrels["query_id"].unique().to_list())) \
        .select("query_id", "query_text", "narrative").rows()
    # seed row first within each query
    firsts = qrels.group_by("query_id", maintain_order=True).first()
    assert firsts["is_seed"].all()
    # configured names on disk
    first_line = json.loads((res / "qrels.jsonl").read_text().splitlines()[0])
    assert "qid" in first_line and "relevant" in first_line and "query_id" not in first_line
    scored = read_table("qrels_with_score", res / "qrels_with_score.jsonl", columns=cols)
    assert scored.height == qrels.height
    assert scored["clip_score"].drop_nulls().is_between(-1.0001, 1.0001).all()
    assert (res / "summary").is_dir() and any((res / "summary").glob("*.png"))
    assert any((res / "summary").glob("*.csv"))
    ds = res / "hf_dataset"
    assert (ds / "README.md").exists()
    assert list((ds / "data").glob("*.parquet"))


@pytest.mark.slow
def test_hf_dataset_loads_and_decodes(full_run):
    datasets = pytest.importorskip("datasets")
    cfg = full_run.cfg
    ds_dir = Path(cfg["paths"]["results"]) / cfg["benchmark"]["name"] / "hf_dataset"
    files = sorted(str(p) for p in (ds_dir / "data").glob("*.parquet"))
    ds = datasets.load_dataset("parquet", data_files={"test": files}, split="test")
    row = ds[0]
    assert row["image"].size[0] > 0
    assert "qid" in ds.column_names and "relevant" in ds.column_names
    assert "narrative" in ds.column_names and row["narrative"].startswith("A relevant image shows")
    beir = [json.loads(x) for x in (ds_dir / "beir" / "queries.jsonl").read_text().splitlines()]
    assert beir[0]["metadata"]["narrative"].startswith("A relevant image shows")


@pytest.mark.slow
def test_second_run_has_nothing_to_do(full_run):
    r = full_run.dry_run(full_run.config)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Nothing to be done" in r.stdout + r.stderr


@pytest.mark.slow
def test_judge_change_reruns_only_judge_and_downstream(full_run):
    r = full_run.dry_run(full_run.variant("config_judge.yaml", **{"judge.rules": {"relevant_min_jaccard": 0.6}}))
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    # embed_queries reads the written queries (queries.jsonl), never the labels: no model load again
    assert set(stats) == {"judge", "score", "summary", "export", "all",
                          "audit_sample", "audit_labelling", "audit_report"}, stats  # the audit reads qrels


@pytest.mark.slow
def test_query_writer_change_rewrites_the_queries_and_relabels(full_run):
    """A change of the query writer's settings writes the queries again and labels again (the judge
    reads queries.jsonl) and embeds them again, and nothing before them; a labelling change (above) never
    rewrites or re-embeds a query."""
    r = full_run.dry_run(full_run.variant("config_queries.yaml", **{"queries.rules": {"query_tags": 3}}))
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    assert set(stats) == {"queries", "judge", "embed_queries", "score", "summary", "export", "all",
                          "audit_sample", "audit_labelling", "audit_report"}, stats


@pytest.mark.slow
def test_similarity_model_change_does_not_rerun_vision_or_judge(full_run):
    r = full_run.dry_run(full_run.variant("config_sim.yaml", similarity={"precision": "fp32"}))
    assert r.returncode == 0, r.stderr[-3000:]
    stats = job_stats(r.stdout + r.stderr)
    assert "vision" not in stats and "judge" not in stats and "plan" not in stats
    assert stats.get("embed_images") == full_run.cfg["n_shards"]
    assert "decode_images" not in stats  # the precision decides no pixel


@pytest.mark.slow
def test_tiny_clip_run_is_marked_smoke_test_and_ships_no_empty_rationale(full_run):
    """A run with the random tiny CLIP says so in the report, the card and the dataset metadata; the
    rules judge without rationale ships no all-null `rationale` column (#14)."""
    import pyarrow.parquet as pq

    cfg = full_run.cfg
    assert cfg["benchmark"]["smoke_test"] and "tinyclip" in cfg["benchmark"]["smoke_reason"]
    res = Path(cfg["paths"]["results"]) / cfg["benchmark"]["name"]
    html = (res / "summary" / "report.html").read_text()
    assert "<h1>SMOKE TEST" in html and "meaningless" in html
    ds = res / "hf_dataset"
    card = (ds / "README.md").read_text()
    assert "SMOKE TEST" in card and "smoke-test" in card and "Baseline:" not in card
    assert "rationale" not in card
    md = json.loads((ds / "dataset_metadata.json").read_text())
    assert md["smoke_test"] is True and "tinyclip" in md["smoke_reason"]
    for f in (ds / "data").glob("*.parquet"):
        assert "rationale" not in pq.read_schema(f).names
    assert "rationale" not in json.loads((res / "qrels.jsonl").read_text().splitlines()[0])

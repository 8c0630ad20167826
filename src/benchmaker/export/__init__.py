"""Export stage: the Hugging Face dataset folder (parquet with embedded images + dataset card).

``hf_dataset/`` holds ``data/<split>-0000i-of-0000N.parquet`` (one row per judged (query, image)
pair, the image bytes embedded as a ``datasets.Image`` feature), ``README.md`` (the dataset card,
generated from the written schema and the real counts), ``summary/`` (+ ``config_values.csv``),
``annotations.jsonl``, ``losses.jsonl``, ``config.yaml`` (public, scrubbed) and
``dataset_metadata.json``. See docs/export.md.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl
import yaml

from .. import __version__
from ..formats import FORMAT_VERSION, RENAMABLE, write_table
from ..io import atomic_write_text, file_sha256
from ..logs import get_logger
from ..pages.outdir import staged_dir
from ..summary.inputs import load_inputs
from .card import render_card
from .facts import RUN_FACTS, run_facts
from .ir_views import MtebCorpusWriter, mteb_configs, write_ir_views
from .parquet import write_parquet
from .rows import _export_rows, hide_paths_col
from .scrub import (
    find_local_paths,
    find_secrets,
    hide_paths,
    hide_paths_in_folder,
    local_paths,
    scrub_config,
    secret_values,
)

__all__ = ["run", "card_tables", "counts", "EXPORT_META"]

log = get_logger("export")
EXPORT_META = "dataset_metadata.json"


def flatten_config(cfg: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str, str]]:
    """Upstream's config_values.csv rows: (dotted key, value, type); lists as JSON."""
    out = []
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out += flatten_config(v, key + ".")
        else:
            val = json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else ("" if v is None else str(v))
            out.append((key, val, type(v).__name__))
    return out


def counts(rows: pl.DataFrame) -> dict[str, Any]:
    """Counts of the exported table (the card's numbers come from here)."""
    pos = rows.group_by("query_id").agg((pl.col("relevance_label") > 0).sum().alias("p"))["p"]
    rel = {str(k): int(v) for k, v in rows.group_by("relevance_label").len().sort("relevance_label").iter_rows()}
    return {
        "rows": rows.height, "queries": rows["query_id"].n_unique(), "images": rows["image_id"].n_unique(),
        "positive_pairs": int((rows["relevance_label"] > 0).sum()),
        "positives_per_query": {"mean": round(float(pos.mean()), 4) if pos.len() else 0.0,
                                "min": int(pos.min()) if pos.len() else 0, "max": int(pos.max()) if pos.len() else 0},
        "queries_without_positives": int((pos == 0).sum()),
        "relevance_distribution": rel,
        "seed_not_relevant_queries": int(rows.filter(pl.col("seed_not_relevant"))["query_id"].n_unique()),
        "pairs_without_clip_score": int(rows["clip_score"].null_count()),
    }


def card_tables(rows: pl.DataFrame, n_examples: int = 5) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(image sources by collection and license, the first queries with pool size and positives) of the
    exported rows, for the dataset card."""
    sources = (rows.unique("image_id").group_by(pl.col("original_dataset_name").alias("source"), "license")
               .len("images").with_columns(pl.col("images").cast(pl.Int64))
               .sort(["images", "source", "license"], descending=[True, False, False], nulls_last=True))
    examples = (rows.group_by("query_id", maintain_order=True)
                .agg(pl.col("query_text").first(), pl.len().alias("pairs"),
                     (pl.col("relevance_label") > 0).sum().alias("positives"))
                .head(n_examples))
    return sources, examples


def _published_summary(summary_dir: Path) -> None:
    """The summary copy without its run facts: the quality-vs-compute chart (timings) and its image
    lines in report.html / report.md (the chart stays in the results folder's summary)."""
    import re

    from ..evaluate.report import CHARTS

    chart = f"evaluate/{CHARTS[1]}"
    (summary_dir / chart).unlink(missing_ok=True)
    for name, pattern in (("report.html", rf'<img src="{re.escape(chart)}"[^>]*>'),
                          ("report.md", rf"!\[[^\]]*\]\({re.escape(chart)}\)\n?")):
        p = summary_dir / name
        if p.is_file():
            p.write_text(re.sub(pattern, "", p.read_text(encoding="utf-8")), encoding="utf-8")


def _evaluation_files(out: Path, *, evaluation: str | None, leakage: str | None, deepen: str | None) -> str:
    """Copy the evaluate, seed leakage and deepening result files into the dataset folder ``out``; the
    card's sections for them (markdown; "" when none was run)."""
    md = ""
    if evaluation:  # the evaluate target's leaderboard and result files (docs/evaluate.md)
        from ..evaluate.report import card_markdown, copy_results

        copy_results(evaluation, out / "evaluate")
        md = card_markdown(evaluation)
    if leakage:  # seed leakage, from the evaluate aggregate (docs/evaluate.md)
        from ..evaluate.leakage_view import card_markdown as leakage_card

        md += leakage_card(leakage, out / "evaluate")
    if deepen:  # pool deepening: its report and the deepened qrels, deepened pairs marked (docs/deepen.md)
        from ..deepen.report import card_markdown as deepen_card
        from ..deepen.report import copy_results as deepen_copy

        deepen_copy(deepen, out / "deepen")
        md += deepen_card(deepen)
    return md


def _trust_block(trust: str | None, audit: str | None, deepen: str | None, out: Path) -> str:
    """The card's opening "How far to trust this benchmark" block (docs/trust.md); trust.json published
    beside the leaderboard."""
    from ..summary.trust import card_markdown, copy_trust

    copy_trust(trust, out / "evaluate")
    return card_markdown(trust, audit, deepen)


def _metadata(*, meta: Mapping[str, Any], split: str, image_col: str, columns: Mapping[str, str], n: dict,
              checks: dict, all_losses: pl.DataFrame, quarantine: pl.DataFrame, files: list, config_text: str,
              annotations: str, scored: str, images: str, similarity: Mapping[str, Any] | None,
              version: str | None) -> dict[str, Any]:
    """dataset_metadata.json's document."""
    import datasets
    import pyarrow

    return {
        "benchmark": meta.get("name"), "title": meta.get("title"), "version": meta.get("version"),
        "smoke_test": bool(meta.get("smoke_test")), "smoke_reason": meta.get("smoke_reason"),
        "split": split, "image_column": image_col, "columns": {k: columns.get(k, k) for k in
                                                                (*RENAMABLE, "image")},
        "counts": n, "checks": checks,
        "losses": {s: {r: int(c) for r, c in g.group_by("reason").len().sort("reason").iter_rows()}
                   for (s,), g in all_losses.group_by("stage", maintain_order=True)},
        "quarantine": {r: int(c) for r, c in quarantine.group_by("reason").len().sort("reason").iter_rows()},
        "files": files,
        "digests": {"config": hashlib.sha256(config_text.encode()).hexdigest(),
                    "annotations": file_sha256(Path(annotations)), "qrels_with_score": file_sha256(Path(scored)),
                    "images": file_sha256(Path(images))},
        "similarity": dict(similarity or {}),
        "versions": {"benchmaker": __version__, "export_stage": version, "format": FORMAT_VERSION,
                     "datasets": datasets.__version__, "pyarrow": pyarrow.__version__,
                     "polars": pl.__version__},
        "run_facts": RUN_FACTS,
    }


def _copy_summary(summary: str | None, out: Path, cfg_public: Mapping[str, Any]) -> None:
    """The summary folder as published (:func:`_published_summary`), with the public config's values."""
    if summary and Path(summary).is_dir():
        shutil.copytree(summary, out / "summary")
        _published_summary(out / "summary")
    (out / "summary").mkdir(exist_ok=True)
    cv = pl.DataFrame(flatten_config(cfg_public), schema=["Config Variable", "Value", "Type"], orient="row")
    cv.write_csv(out / "summary" / "config_values.csv")


def _refuse_leaks(out: Path, secrets: Sequence[str], local: Mapping[str, str]) -> None:
    """An error when a secret of the environment or a local path of this machine is in a file of ``out``."""
    leaked = find_secrets(out, secrets)
    if leaked:
        raise RuntimeError(f"export: a secret from the environment appears in {leaked}; nothing was published")
    named = find_local_paths(out, local)
    if named:
        raise RuntimeError(f"export: a local path of this machine appears in {named}; nothing was published")


def run(
    *,
    images: str,
    annotations: str,
    scored: str,
    dataset: str,
    quarantine: str | None = None,
    plan: str | None = None,
    summary: str | None = None,
    losses: str | Sequence[str] | None = None,
    loss_stages: Sequence[str | None] | None = None,
    costs: str | Sequence[str] | None = None,
    cost_stages: Sequence[str | None] | None = None,
    outside_stages: Sequence[str] | None = None,
    settings: Mapping[str, Any] | None = None,
    benchmark_meta: Mapping[str, Any] | None = None,
    facets: Mapping[str, Any],
    columns: Mapping[str, str] | None = None,
    image_root: str = ".",
    similarity: Mapping[str, Any] | None = None,
    public_config: Mapping[str, Any] | None = None,
    version: str | None = None,
    threads: int = 1,
    audit: str | None = None,
    evaluation: str | None = None,
    deepen: str | None = None,
    trust: str | None = None,
    leakage: str | None = None,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    from ..settings_schema import filled

    settings = filled("export", settings)
    columns = filled("columns", columns)
    meta = dict(benchmark_meta or {})
    split = str(settings["split"])
    rows_per_file = int(settings["rows_per_file"])
    image_col = columns["image"]
    # only the images of the scored pairs: memory bounded by the pairs, not by the corpus
    inp = load_inputs(images=images, quarantine=quarantine, annotations=annotations, plan=plan, scored=scored,
                      losses=losses, costs=costs, columns=columns, facets=facets,
                      loss_stages=loss_stages, cost_stages=cost_stages, outside_stages=outside_stages)
    rows, export_losses, checks = _export_rows(inp, image_root, scored=scored, columns=columns, image_col=image_col)
    secrets = secret_values(public_config, [settings["token_env"]])
    # local folders (the config's paths, the working and home folders) in a public form (docs/export.md)
    local = local_paths(public_config, [image_root, Path(dataset).parent])
    cfg_public = hide_paths(scrub_config(dict(public_config or {}), secrets), local)
    similarity = hide_paths(dict(similarity or {}), local)
    rows = rows.with_columns(hide_paths_col(rows, c, local) for c, t in rows.schema.items() if t == pl.String)
    summary_numbers: dict[str, Any] = {}
    if summary and (Path(summary) / "summary.json").is_file():
        summary_numbers = json.loads((Path(summary) / "summary.json").read_text())
    all_losses = pl.concat([inp.losses, export_losses.to_frame()], how="vertical_relaxed")
    with staged_dir(dataset, EXPORT_META) as out:
        image_storage = str(settings["image_storage"])
        mteb_corpus = MtebCorpusWriter(out, split)  # fed as the flat table reads each image
        files, features = write_parquet(rows, out_dir=out, split=split, rows_per_file=rows_per_file,
                                        image_root=image_root, columns=columns, image_col=image_col,
                                        threads=threads, image_storage=image_storage, corpus=mteb_corpus)
        mteb_corpus.close()
        written = sum(f["rows"] for f in files if f["path"].startswith("data/"))
        if written != rows.height:
            raise AssertionError(f"export: wrote {written} rows, expected {rows.height}")
        _copy_summary(summary, out, cfg_public)
        shutil.copyfile(annotations, out / "annotations.jsonl")
        ir_views = write_ir_views(rows, out, split)
        evaluation_md = _evaluation_files(out, evaluation=evaluation, leakage=leakage, deepen=deepen)
        checks = {**checks, "ir_views": ir_views}
        write_table(all_losses, "losses", out / "losses.jsonl")
        config_text = yaml.safe_dump(cfg_public, sort_keys=False, allow_unicode=True)
        atomic_write_text(out / "config.yaml", config_text)
        n = counts(rows)
        sources, examples = card_tables(rows)
        from ..summary.stats import cost_summary

        cost_table = cost_summary(inp.costs) if inp.costs is not None else None
        metadata = _metadata(meta=meta, split=split, image_col=image_col, columns=columns, n=n, checks=checks,
                             all_losses=all_losses, quarantine=inp.quarantine, files=files, config_text=config_text,
                             annotations=annotations, scored=scored, images=images, similarity=similarity,
                             version=version)
        atomic_write_text(out / EXPORT_META, json.dumps(metadata, indent=2, ensure_ascii=False) + "\n")
        card = render_card(meta=meta, features=features, files=files, split=split, counts=n, checks=checks,
                           losses=all_losses, quarantine=inp.quarantine, costs=cost_table, config=cfg_public,
                           similarity=dict(similarity or {}), summary=summary_numbers, columns=columns,
                           image_col=image_col, facets=inp.facets, repo_id=settings.get("repo_id"),
                           config_digest=metadata["digests"]["config"], version=version,
                           sources=sources, examples=examples, audit=audit,
                           extra_configs=mteb_configs(split), evaluation_md=evaluation_md,
                           outside_stages=inp.outside_stages, cost_stages=inp.cost_stages,
                           trust_md=_trust_block(trust, audit, deepen, out))
        from ..audit.render import export_files

        export_files(audit, out)  # the judge audit's numbers and human labels as audit/ (docs/audit.md)
        atomic_write_text(out / "README.md", card)
        hide_paths_in_folder(out, local)   # the copied summary, audit and evaluate files
        facts = run_facts(seconds=time.perf_counter() - t0, evaluation=evaluation, deepen=deepen)
        atomic_write_text(out / RUN_FACTS, json.dumps(facts, indent=2) + "\n")
        _refuse_leaks(out, secrets, local)
    log.info("export: %d rows, %d queries, %d images in %d file(s) -> %s (%.1f s)", n["rows"], n["queries"],
             n["images"], len(files), dataset, time.perf_counter() - t0)
    return metadata


"""The dataset card (README.md): YAML front matter from the written features, prose from real counts."""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Sequence

import polars as pl

from ..formats import FacetModel
from ..pages.report import md_table
from ..settings_schema import default, filled
from ..summary.stats import cost_coverage, outside_note

__all__ = ["render_card", "COLUMN_DOCS", "size_category"]

COLUMN_DOCS = {
    "query_id": "Query identifier, a string such as `<benchmark>_q0001` (keep it a string: INQUIRE-style schemas "
                "that type it as a number will not match).",
    "query_text": "The natural-language query, written from the seed image(s) alone, before any labelling. "
                  "Unique per query_id.",
    "narrative": "One or two sentences on what an image must show to be relevant to the query (TREC's narrative), "
                 "written with query_text and given to the judge with it; null for a query imported with its labels.",
    "image_id": "Stable image identifier: the POSIX path of the image relative to the image folder.",
    "relevance_label": "Judged relevance of the image to the query: 0/1 (binary) or 0..3 (graded). Never null.",
    "image": "The image itself (`datasets.Image`, bytes embedded; decodes to a PIL image).",
    "clip_score": "Cosine similarity between the CLIP embeddings of query_text and the image (higher = more similar). "
                  "Null only where the image could not be embedded.",
    "clip_rank": "Rank of the image within the query's pool by clip_score (1 = most similar).",
    "pool": "Why the planner put the image in the query's pool: seed, positive, neutral, hard, nearmiss or easy.",
    "is_seed": "True for the seed image(s) the query was written from; seed rows come first within a query.",
    "seed_not_relevant": "True on every row of a query whose seed image was judged not relevant.",
    "judge": "Which judge produced the label (adapter and model).",
    "rationale": "The judge's short justification (when enabled).",
    "summary": "One-sentence description of the image by the vision annotator.",
    "tags": "Tags of the image from the controlled vocabulary.",
    "confidence": "Annotator confidence per facet (0..1).",
    "license": "License of the image file.",
    "doi": "DOI of the image's source, or the credit line its license asks for, from the rights map "
           "(null when unknown).",
    "original_dataset_name": "Name of the collection the image comes from.",
    "image_url": "Public URL of the image, when configured.",
    "mime_type": "MIME type of the image file.",
    "width": "Image width in pixels.",
    "height": "Image height in pixels.",
    "sha256": "SHA-256 of the image file.",
}

# what a relevance label means, per judge.labels (docs/judge-rules.md: binary 1 = graded 2 or 3)
RELEVANCE_SCALES = {"binary": "1 = relevant, 0 = not relevant",
                    "graded": "0 = not relevant, 1 = partially relevant, 2 = relevant, 3 = highly relevant"}


def relevance_note(labels: str) -> str:
    """The card's sentence on the labels: this benchmark's scale and how the tools that read it count it."""
    note = (f"{RELEVANCE_SCALES[labels]} (`judge.labels: {labels}`). nDCG takes the label as its gain (linear: ranx "
            "`ndcg`, trec_eval `ndcg_cut`, pytrec_eval, BEIR, mteb); MAP, MRR, precision, recall, hit rate and the "
            "positives counted here take every label of 1 or more as relevant (trec_eval's default relevance level)")
    if labels == "graded":
        note += ("; so partially relevant images count as relevant there (`trec_eval -l 2` counts relevant and "
                 "above only, as the binary scale would)")
    return note + "."


SIZE_CATEGORIES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                   (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"))


def size_category(n: int) -> str:
    for limit, name in SIZE_CATEGORIES:
        if n < limit:
            return name
    return "1B<n<10B"


def _front_matter(meta, features, files, split, n_rows, repo_tags, extra_configs=()) -> str:
    from datasets import DatasetInfo
    from datasets.info import DatasetInfosDict
    from datasets.splits import SplitDict, SplitInfo
    from huggingface_hub import DatasetCardData

    size = sum(f["bytes"] for f in files)
    info = DatasetInfo(features=features, splits=SplitDict({split: SplitInfo(name=split, num_bytes=size,
                                                                             num_examples=n_rows)}),
                       download_size=size, dataset_size=size)
    data = DatasetCardData(
        license=(meta.get("license") or default("benchmark.license")), language=["en"],
        pretty_name=meta.get("title") or meta.get("name"),
        task_categories=["text-to-image", "image-feature-extraction"],
        tags=repo_tags, size_categories=[size_category(n_rows)],
        configs=[{"config_name": "default", "data_files": [{"split": split, "path": f"data/{split}-*"}]}]
        + ([{"config_name": "images", "data_files": [{"split": split, "path": "corpus/images-*"}]}]
           if any(f["path"].startswith("corpus/") for f in files) else [])
        + list(extra_configs),
    )
    DatasetInfosDict({"default": info}).to_dataset_card_data(data)
    return data.to_yaml()


def _llm_or_clip(section: Mapping[str, Any] | None) -> str:
    if not section:
        return "not recorded"
    adapter = section.get("adapter", "?")
    sub = section.get(adapter) or {}
    if adapter == "rules":
        return "`rules` (deterministic facet/tag matching, no model)"
    model = sub.get("model", "?")
    extra = f", pretrained `{sub.get('pretrained')}`" if adapter == "clip" and sub.get("pretrained") else ""
    mode = f", {sub.get('mode')} mode" if sub.get("mode") else ""
    return f"`{adapter}` with model `{model}`{extra}{mode}"


def feature_type(feat: Any) -> str:
    """A short readable type for the Columns table: string, int64, image, list of string, struct, ..."""
    from datasets import Image, LargeList, List, Sequence, Value

    if isinstance(feat, Value):
        return str(feat.dtype)
    if isinstance(feat, Image):
        return "image"
    if isinstance(feat, (List, LargeList, Sequence)):
        return f"list of {feature_type(feat.feature)}"
    if isinstance(feat, list) and feat:
        return f"list of {feature_type(feat[0])}"
    if isinstance(feat, dict):
        types = {k: feature_type(v) for k, v in feat.items()}
        if len(types) > 3 and len(set(types.values())) == 1:
            return f"struct of {len(types)} {next(iter(types.values()))} fields"
        return "struct {" + ", ".join(f"{k}: {t}" for k, t in types.items()) + "}"
    return getattr(feat, "dtype", None) or type(feat).__name__


def _losses_table(losses: pl.DataFrame) -> pl.DataFrame:
    if not losses.height:
        return pl.DataFrame()
    return (losses.group_by("stage", "item_type", "reason").len("count").sort("stage", "item_type", "reason"))


def _reused_labels(summary: Mapping[str, Any] | None) -> str:
    """The judge step's note on labels reused from paths.judge_reuse_file (judge 'imported:<source>')."""
    reused = {j[len("imported:"):]: v for j, v in ((summary or {}).get("judges") or {}).items()
              if j.startswith("imported:")}
    if not reused:
        return ""
    q, p = sum(v["queries"] for v in reused.values()), sum(v["pairs"] for v in reused.values())
    return (f", except for {q:,} queries ({p:,} pairs) whose query text and labels were reused as they were from "
            f"an earlier judgment ({', '.join(f'`{k}`' for k in sorted(reused))}; column `judge` = "
            "`imported:<source>`), without asking the judge again")


def render_card(*, meta: Mapping[str, Any], features, files: list[dict], split: str, counts: dict[str, Any],
                checks: dict[str, Any], losses: pl.DataFrame, quarantine: pl.DataFrame, costs: pl.DataFrame | None,
                config: Mapping[str, Any], similarity: Mapping[str, Any], summary: Mapping[str, Any],
                columns: Mapping[str, str], image_col: str, facets: FacetModel, repo_id: str | None,
                config_digest: str, version: str | None,
                sources: pl.DataFrame | None = None, examples: pl.DataFrame | None = None,
                audit: str | None = None, extra_configs: Sequence[Mapping[str, Any]] = (),
                evaluation_md: str = "", outside_stages: Sequence[str] = (), cost_stages: Sequence[str] = (),
                trust_md: str = "") -> str:
    """The card's text. ``sources`` (original_dataset_name, license, images) and ``examples`` (a few
    queries with their pool size and positives) come from the exported rows (see export.card_tables).
    ``outside_stages``: the stages of ``losses`` that are not the benchmark's own (Inputs.outside_stages);
    ``cost_stages``: every stage whose cost files ``costs`` totals (Inputs.cost_stages), named under it.
    One section after the other, each written by its own function below."""
    from ..audit.render import card_markdown  # judge vs people; "not audited yet" without an audit

    name = meta.get("name") or "benchmark"
    title = meta.get("title") or name
    if meta.get("smoke_test") and "smoke" not in title.lower():
        title = f"SMOKE TEST - {title}"
    col = lambda k: columns.get(k, k)  # noqa: E731
    out = _card_head(meta, title, features, files, split, counts, extra_configs, trust_md, repo_id, image_col, col)
    labels = filled("judge", (config or {}).get("judge"))["labels"]
    out += _card_counts(meta, files, counts, checks, examples, summary, col, labels)
    if evaluation_md:
        out.append(evaluation_md)
    out.append(card_markdown(audit))
    out += _card_how_built(config or {}, sources, facets, similarity, summary, config_digest, version, col)
    out += _card_losses(losses, quarantine, checks, outside_stages)
    out += _card_sources(sources, col)
    out += _card_costs(costs, cost_stages)
    out += _card_columns(features, columns, image_col, facets, labels)
    out += _card_files(split, files)
    out += _card_credits(meta, name, title, col)
    return "\n".join(out)


def _card_head(meta: Mapping[str, Any], title: str, features, files: list[dict], split: str, c: dict[str, Any],
               extra_configs: Sequence[Mapping[str, Any]], trust_md: str, repo_id: str | None, image_col: str,
               col: Callable[[str], str]) -> list[str]:
    """The front matter, the title, the smoke-test banner, what the benchmark is, how far to trust it
    and how to load it."""
    tags = ["image-retrieval", "text-to-image-retrieval", "benchmark", "benchmaker"]
    if meta.get("smoke_test"):
        tags = ["image-retrieval", "benchmaker", "smoke-test", "not-a-benchmark"]
    fm = _front_matter(meta, features, files, split, c["rows"], tags, extra_configs)
    out = [f"---\n{fm.rstrip()}\n---\n", f"# {title}\n"]
    if meta.get("smoke_test"):   # a random / tiny model (benchmaker.smoke): first thing a reader sees
        from ..smoke import BANNER

        out.append("> **" + BANNER.format(reason=meta.get("smoke_reason") or "a smoke-test configuration") + "**\n")
    if meta.get("description"):
        out.append(meta["description"].strip() + "\n")
    out.append(
        f"An image-retrieval benchmark: {c['queries']:,} text queries, each with a judged pool of images, "
        f"{c['rows']:,} (query, image) pairs over {c['images']:,} unique images, in one split `{split}`. "
        "Each row is one pair with its relevance label and the image embedded. Built with benchmaker.\n")
    if trust_md:  # "How far to trust this benchmark" (docs/trust.md): before anything is loaded
        out.append(trust_md)
    out.append("## Load it\n")
    src = repo_id or "path/to/this/folder"
    out.append(
        "```python\nfrom datasets import load_dataset\n\n"
        f'ds = load_dataset("{src}", split="{split}")\n'
        f'row = ds[0]\nrow["{image_col}"]  # a PIL image\n'
        f'print(row["{col("query_id")}"], row["{col("query_text")}"], row["{col("relevance_label")}"])\n```\n')
    out.append(
        f"Rows of a query are contiguous and complete (every judged image of the pool is present, so "
        f"relevant-per-query counts are exact); the seed image's row comes first. `{col('query_id')}` is a "
        "string. Images used in several pools appear once per query; "
        f"`{col('image_id')}` identifies them.\n")
    return out


def _card_counts(meta: Mapping[str, Any], files: list[dict], c: dict[str, Any], checks: dict[str, Any],
                 examples: pl.DataFrame | None, summary: Mapping[str, Any], col: Callable[[str], str],
                 labels: str = default("judge.labels")) -> list[str]:
    """The counts, the relevance labels, example queries and the CLIP baseline."""
    ppq = c["positives_per_query"]
    numbers = pl.DataFrame({
        "count": ["queries", "pairs (rows)", "unique images", "positive pairs",
                  "positives per query (mean / min / max)", "queries without a positive",
                  "queries whose seed was judged not relevant", "pairs without clip_score", "parquet files"],
        "value": [f"{c['queries']:,}", f"{c['rows']:,}", f"{c['images']:,}", f"{c['positive_pairs']:,}",
                  f"{ppq['mean']:.2f} / {ppq['min']} / {ppq['max']}", str(c["queries_without_positives"]),
                  str(c["seed_not_relevant_queries"]), str(c["pairs_without_clip_score"]), str(len(files))],
    })
    out = ["## Counts\n"]
    out.append(md_table(numbers))
    rel = pl.DataFrame({"relevance_label": list(c["relevance_distribution"]),
                        "pairs": list(c["relevance_distribution"].values())})
    out.append(f"\nRelevance labels: {relevance_note(labels)}\n\n" + md_table(rel))
    if checks.get("duplicate_query_texts"):
        out.append(f"\nWarning: {len(checks['duplicate_query_texts'])} query texts are shared by several "
                   f"query ids: {checks['duplicate_query_texts'][:10]}.\n")
    if examples is not None and examples.height:
        out.append("\nExample queries (the first in the file):\n\n" + md_table(examples.rename(
            {"query_id": col("query_id"), "query_text": col("query_text")}), max_rows=examples.height))
    rk = (summary or {}).get("clip_ranking") or {}
    if rk.get("ndcg@10") is not None and meta.get("smoke_test"):
        out.append(f"\nNo baseline: the `{col('clip_score')}` of a smoke test is random.\n")
    elif rk.get("ndcg@10") is not None:
        out.append(
            f"\nBaseline: ranking each query's pool by `{col('clip_score')}` gives nDCG@10 "
            f"{rk['ndcg@10']:.4f}, MRR {rk.get('mrr') or 0:.4f}, MAP {rk.get('map') or 0:.4f} over "
            f"{rk.get('evaluated_queries')} queries with a positive (see summary/clip_ranking_metrics.csv).\n")
    return out


def _card_how_built(cfg: Mapping[str, Any], sources: pl.DataFrame | None, facets: FacetModel,
                    similarity: Mapping[str, Any], summary: Mapping[str, Any], config_digest: str,
                    version: str | None, col: Callable[[str], str]) -> list[str]:
    """"How it was built": the five steps as configured, and where the configuration is."""
    plan = cfg.get("plan") or {}
    has_licenses = bool((cfg.get("paths") or {}).get("rights_map")) or (
        sources is not None and sources["license"].null_count() < sources.height)
    out = ["## How it was built\n"]
    out.append(
        "1. **Preprocess**: the image folder was scanned recursively; empty, unreadable, truncated, non-image, "
        "oversized (bytes or pixels) and symlink-escaping files were quarantined (see below); size, MIME type "
        "and SHA-256 were recorded per image"
        + (", and licenses assigned from the rights map.\n" if has_licenses
           else "; no rights map was configured, so no image has a recorded license.\n")
        +
        f"2. **Vision annotations**: {_llm_or_clip(cfg.get('vision'))}: a summary, tags and the facets "
        f"{', '.join(f'`{n}`' for n in facets.names)} for every image.\n"
        + (("3. **Query plan**: fixed pools read from a pools file (`paths.pools_file`, e.g. an earlier "
            "benchmark's query plan): its queries, seeds and candidates as listed, minus images without an "
            "annotation (see losses).\n") if (cfg.get("paths") or {}).get("pools_file") else
           f"3. **Query plan**: seeds sampled (`plan.num_seeds` = {plan.get('num_seeds', '?')}); each pool holds the "
           f"seed, positives ({plan.get('pos_total', '?')}), neutrals ({plan.get('neutral_total', '?')}) and "
           f"negatives ({plan.get('neg_total', '?')}: hard {plan.get('neg_hard', '?')}, near-miss "
           f"{plan.get('neg_nearmiss', '?')}, easy {plan.get('neg_easy', '?')}).\n")
        + f"4. **Judge**: {_llm_or_clip(cfg.get('judge'))} wrote the query text from the seed and labelled "
        f"every pair ({filled('judge', cfg.get('judge'))['labels']} labels)"
        + _reused_labels(summary) + ".\n"
        f"5. **Similarity**: `{col('clip_score')}` from open_clip model `{similarity.get('model', '?')}` "
        + (f"(pretrained `{similarity.get('pretrained')}`, " if similarity.get("pretrained") else "(")
        + f"precision `{similarity.get('precision', '?')}`).\n")
    out.append(f"The full public configuration is in `config.yaml` (sha256 `{config_digest[:16]}`; prompts "
               f"included); the export stage version is `{version}`.\n")
    return out


def _card_losses(losses: pl.DataFrame, quarantine: pl.DataFrame, checks: dict[str, Any],
                 outside_stages: Sequence[str]) -> list[str]:
    """What the stages lost, what preprocessing quarantined and the queries the export left out."""
    out = ["## Losses and quarantine\n"]
    lt = _losses_table(losses)
    if lt.height:
        out.append("Items lost on the way (details in `losses.jsonl`):\n\n" + md_table(lt, max_rows=100))
        note = outside_note(lt, outside_stages)
        if note:
            out.append("\n" + note + "\n")
    else:
        out.append("No stage lost an item.\n")
    if quarantine.height:
        q = quarantine.group_by("reason").len("files").sort("reason")
        out.append(f"\n{quarantine.height} files were quarantined by preprocessing:\n\n" + md_table(q))
    else:
        out.append("\nNo file was quarantined.\n")
    if checks.get("queries_dropped_missing_images"):
        out.append(f"\n{checks['queries_dropped_missing_images']} queries were left out of the export whole "
                   "because an image of their pool was missing (stage `export` above).\n")
    return out


def _card_sources(sources: pl.DataFrame | None, col: Callable[[str], str]) -> list[str]:
    """The images' source collections and licenses (none without sources)."""
    if sources is None or not sources.height:
        return []
    out = ["## Image sources and licenses\n"]
    out.append(f"Images of the exported pairs by source collection and license (columns "
               f"`{col('original_dataset_name')}` and `{col('license')}`; each image keeps its own license):\n\n"
               + md_table(sources.with_columns(pl.col("license").fill_null("(not recorded)")), max_rows=50))
    unknown = int(sources.filter(pl.col("license").is_null())["images"].sum())
    if unknown:
        out.append(f"\n{unknown} image(s) have no recorded license: check the rights map before publishing.\n")
    return out


def _card_costs(costs: pl.DataFrame | None, cost_stages: Sequence[str]) -> list[str]:
    """The API spend by stage and model (none without a cost table)."""
    if costs is None:
        return []
    out = ["## API costs\n"]
    over = cost_coverage(costs, cost_stages)
    if costs.height:
        last = (f"; the last run USD {costs['cost_usd_last_run'].sum():.4f}"
                if "cost_usd_last_run" in costs.columns else "")
        out.append(md_table(costs) + f"\nTotal: USD {costs['cost_usd'].sum():.4f} {over + ',' if over else 'over'} "
                   f"{int(costs['requests'].sum())} requests (spend to date, all runs){last}.\n")
    else:
        out.append(f"No paid request was made{' ' + over if over else ''}.\n")
    return out


def _card_columns(features, columns: Mapping[str, str], image_col: str, facets: FacetModel,
                  labels: str = default("judge.labels")) -> list[str]:
    """One row per exported column: its name, type and meaning."""
    docs = []
    for f_name, feat in features.items():
        canonical = next((k for k, v in columns.items() if v == f_name and k != "image"), f_name)
        if f_name == image_col:
            canonical = "image"
        if canonical in facets.taxonomy:
            desc = f"Facet `{canonical}`: one of {', '.join(f'`{v}`' for v in facets.taxonomy[canonical])}."
        elif canonical in facets.boolean:
            desc = f"Boolean facet `{canonical}`."
        elif canonical == "relevance_label":
            desc = (f"Judged relevance of the image to the query: {RELEVANCE_SCALES[labels]} "
                    f"(`judge.labels: {labels}`). Never null.")
        else:
            desc = COLUMN_DOCS.get(canonical, "Image metadata from metadata.jsonl.")
        docs.append((f"`{f_name}`", feature_type(feat), desc))
    return ["## Columns\n",
            md_table(pl.DataFrame(docs, schema=["column", "type", "description"], orient="row"), max_rows=500)]


def _card_files(split: str, files: list[dict]) -> list[str]:
    """The files of the dataset folder."""
    return ["\n## Files\n",
            f"- `data/{split}-*.parquet`: the rows ({len(files)} file(s)).\n"
            "- `annotations.jsonl`: the vision annotations of every image.\n"
            "- `losses.jsonl`: every item lost by a stage, with the reason.\n"
            "- `config.yaml`: the public configuration (private `_` keys and secrets removed).\n"
            "- `dataset_metadata.json`: counts, digests and versions.\n"
            "- [`run_facts.json`](run_facts.json): when and on what kind of machine this copy was built and how "
            "long it took (the evaluated systems' timings included); the only file that differs between two builds "
            "of the same benchmark.\n"
            "- `beir/` (`queries.jsonl`, `corpus.jsonl`, `qrels/<split>.tsv`) and `trec/qrels.txt`: corpus-level "
            "views of the same judgments, each image once, for evaluators that rank a whole corpus.\n"
            "- `mteb/{corpus,queries,qrels}/`: the configs `corpus` (id, image), `queries` (id, text) and `qrels` "
            "(query-id, corpus-id, score) that mteb's image retrieval tasks load (`load_dataset(repo, \"corpus\")`); "
            "ids there and in `beir/` and `trec/` are URL-percent-encoded image/query ids (no whitespace).\n"
            "- `summary/`: statistics and charts (`summary/report.md`), `summary/config_values.csv`.\n"]


def _card_credits(meta: Mapping[str, Any], name: str, title: str, col: Callable[[str], str]) -> list[str]:
    """The authors, the license and how to cite the benchmark."""
    out = []
    authors = meta.get("authors") or []
    if authors:
        out.append("## Authors\n")
        out.append("".join(f"- {a.get('name')}" + (f" ({a['affiliation']})" if a.get("affiliation") else "") + "\n"
                           for a in authors))
    out.append("\n## License\n")
    license = meta.get("license") or default("benchmark.license")
    out.append(f"Benchmark annotations, queries and labels: `{license}`. Each image keeps "
               f"its own license (column `{col('license')}`).\n")
    out.append("\n## Citation\n")
    if meta.get("citation"):
        out.append("```\n" + str(meta["citation"]).strip() + "\n```\n")
    else:
        key = name.replace("-", "_").replace(".", "_")
        who = " and ".join(a.get("name", "") for a in authors) or "unknown"
        out.append("```bibtex\n@misc{" + key + ",\n  title = {" + json.dumps(title)[1:-1] + "},\n  author = {"
                   + who + "},\n  note = {version " + str(meta.get("version", "")) + "}\n}\n```\n")
    return out

"""Migrating from ``imsearch_benchmaker``, the outputs: ``import_upstream(toml, outputs=DIR, out=FILE)``
converts the config (:mod:`.convert`) and imports upstream's (paid-for) outputs.

**outputs** (``--outputs DIR`` or the folders of upstream's ``*_jsonl`` paths):
``images.jsonl`` -> ``<results>/imported/metadata.jsonl`` (license, doi, original_dataset_name and
every extra column, as ``paths.metadata_jsonl`` unless a rights map / metadata file is configured);
``annotations.jsonl`` -> **vision response cache** entries under ``<results>/.cache/vision``, keyed
exactly as the ``vision`` stage keys its requests for the imported config, so the first run sends
no vision request for an image upstream annotated (its costs file shows them as cached, $0);
``query_plan.jsonl`` -> ``<results>/imported/pools.jsonl`` (``paths.pools_file``: the plan is
upstream's queries, seeds and candidate pools, not the planner's own; the seeds file would be
redundant and is not written); ``qrels.jsonl`` -> ``<results>/imported/upstream_qrels.jsonl`` in
this project's qrels shape (``paths.judge_reuse_file``: a planned query whose every candidate
upstream labelled is answered from it, so the judge is not paid again; see
:mod:`benchmaker.reuse`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote

import yaml

from ..config import validate_config
from ..errors import UserError
from ..io import file_sha256
from .convert import COLUMN_KEYS, ImportReport, convert_config, read_toml

__all__ = ["import_upstream"]


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for ln, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}: line {ln} is not JSON: {exc}") from None
    return rows


def _output_file(up: Mapping[str, Any], outputs: Path | None, key: str, default: str) -> Path | None:
    cands = []
    if outputs is not None:
        cands.append(outputs / default)
        if up.get(key):
            cands.append(outputs / Path(up[key]).name)
    if up.get(key):
        cands.append(Path(up[key]))
    for c in cands:
        if c.is_file():
            return c
    return None


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows),
                    encoding="utf-8")


def _vision_answer(row: Mapping[str, Any], fm: Any, up_cols: Mapping[str, str]) -> dict:
    """An upstream annotation row as this config's vision answer, in its wire form (vision_schema)."""
    from ..vision.prompts import confidence_wire

    ans: dict[str, Any] = {"summary": row.get(up_cols["summary"], row.get("summary"))}
    for n in fm.names:
        ans[n] = row.get(n)
    tags = row.get(up_cols["tags"], row.get("tags"))
    ans["tags"] = list(tags) if isinstance(tags, list) else []
    if fm.names:       # percentages in facet order
        conf = row.get(up_cols["confidence"], row.get("confidence")) or {}
        ans["confidence"] = confidence_wire(conf if isinstance(conf, dict) else {}, fm)
    return ans


def _prefill_vision(cfg: dict, images_rows: list[dict], ann_rows: list[dict], rep: ImportReport,
                    up_cols: Mapping[str, str]) -> None:
    import polars as pl

    from ..formats import FacetModel
    from ..providers.cache import ResponseCache
    from ..providers.parse import validate_answer
    from ..providers.spec import LLMSettings, request_key
    from ..vision.openai import vision_items

    full = validate_config(cfg)
    s = full["vision"]["openai"]
    root = Path(full["paths"]["image_root"])
    if not root.is_dir():
        rep.notes.append(f"paths.image_root {root} is not a folder here: the image hashes that key the vision "
                         "cache cannot be computed; rerun import-upstream where the images are")
        rep.vision_skipped["image folder not found"] = len(ann_rows)
        return
    fm = FacetModel.from_config(full["facets"])
    base = full["preprocess"]["image_base_url"]
    meta = {r.get("image_id"): r for r in images_rows}
    frame_rows, answers, skipped = [], {}, rep.vision_skipped
    for a in ann_rows:
        iid = a.get("image_id")
        f = root / str(iid)
        if not iid or not f.is_file():
            skipped["image file missing under image_root"] = skipped.get("image file missing under image_root", 0) + 1
            continue
        sha = file_sha256(f)
        row = {**{k: v for k, v in meta.get(iid, {}).items() if not isinstance(v, (dict, list))}, "image_id": iid,
               "sha256": sha, "width": 0, "height": 0,
               "image_url": (base.rstrip("/") + "/" + quote(iid, safe="/")) if base else None}
        frame_rows.append(row)
        answers[iid] = _vision_answer(a, fm, up_cols)
    if not frame_rows:
        return
    cols = sorted({k for r in frame_rows for k in r})
    frame = pl.DataFrame([{c: r.get(c) for c in cols} for r in frame_rows], infer_schema_length=None)
    llm = LLMSettings.from_config(s)
    cache = ResponseCache(Path(full["paths"]["results"]) / ".cache" / "vision")
    with cache.bulk():
        for it in vision_items(frame, fm, s, str(root)):
            ans = answers[it.item_id]
            problem = validate_answer(ans, it.spec.schema, it.check)
            if problem is not None:
                reason = f"does not fit this config's vision schema ({problem.split(':')[0]})"
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            cache.put(request_key(it.spec, llm), {"answer": ans, "model": llm.model, "source": "imsearch_benchmaker",
                                                  "usage": {"input_tokens": 0, "cached_input_tokens": 0,
                                                            "output_tokens": 0, "reasoning_tokens": 0}})
            rep.vision_cached += 1
    cache.close()


def _import_images(images_rows: list[dict], cfg: dict, rep: ImportReport, up_cols: Mapping[str, str],
                   imported: Path) -> list[dict]:
    """Upstream's images.jsonl rows (under this project's ``image_id``, less what preprocess computes):
    their license, doi and dataset name as a rights map and their other columns as metadata.jsonl,
    unless the config names its own."""
    id_col = up_cols["image_id"]
    meta_rows = []
    for r in images_rows:
        r = dict(r)
        r["image_id"] = r.pop(id_col, r.get("image_id"))
        meta_rows.append({k: v for k, v in r.items() if k not in ("image_url", "mime_type")})
    rights_keys = {"license": up_cols["license"], "doi": up_cols["doi"],
                   "dataset_name": up_cols["original_dataset_name"]}
    if not cfg["paths"].get("rights_map"):
        # upstream's per-image license / doi / dataset name, as a rights map (preprocess computes them)
        files = {r["image_id"]: {k: r.get(col) for k, col in rights_keys.items()} for r in meta_rows}
        imported.mkdir(parents=True, exist_ok=True)
        (imported / "rights_map.json").write_text(json.dumps(
            {"default": {"license": None, "doi": None, "dataset_name": None}, "files": files}, indent=1,
            sort_keys=True) + "\n", encoding="utf-8")
        cfg["paths"]["rights_map"] = str(imported / "rights_map.json")
        rep.files.append(f"{imported / 'rights_map.json'} (upstream's license, doi, dataset name per image; "
                         "paths.rights_map)")
    extra = [{k: v for k, v in r.items() if k not in rights_keys.values()} for r in meta_rows]
    if not cfg["paths"].get("metadata_jsonl") and any(len(r) > 1 for r in extra):
        _write_jsonl(imported / "metadata.jsonl", extra)
        cfg["paths"]["metadata_jsonl"] = str(imported / "metadata.jsonl")
        rep.files.append(f"{imported / 'metadata.jsonl'} (upstream images.jsonl's extra columns; "
                         "paths.metadata_jsonl)")
    return meta_rows


def _import_plan(plan_f: Path, cfg: dict, rep: ImportReport, up_cols: Mapping[str, str], imported: Path) -> None:
    """Upstream's query plan as a pools file (paths.pools_file), with the notes on what it replaces."""
    pools = []
    qcol = up_cols["query_id"]
    scol = up_cols["seed_image_ids"]
    ccol = up_cols["candidate_image_ids"]
    for r in _read_jsonl(plan_f):
        pools.append({"query_id": r.get(qcol, r.get("query_id")),
                      "seed_image_ids": r.get(scol, r.get("seed_image_ids", [])),
                      "candidate_image_ids": r.get(ccol, r.get("candidate_image_ids", []))})
    _write_jsonl(imported / "pools.jsonl", pools)
    cfg["paths"]["pools_file"] = str(imported / "pools.jsonl")
    rep.files.append(f"{imported / 'pools.jsonl'} ({len(pools)} queries with upstream's ids, seeds and "
                     "candidate pools; paths.pools_file: the plan stage uses these pools instead of "
                     "planning its own)")
    p = cfg["plan"]
    n_neg = p["neg_hard"] + p["neg_nearmiss"] + p["neg_easy"]
    named = sum(1 for r in pools if len([c for c in r["candidate_image_ids"]
                                         if c not in set(r["seed_image_ids"])]) == n_neg)
    # the planner's pools are not drawn with a pools file: the note on pos/neutral totals does not apply
    rep.notes = [n for n in rep.notes if not n.startswith("plan: upstream had no positive or neutral pools")]
    rep.notes.append("plan: the plan is upstream's pools (paths.pools_file), so plan.pos_total, neutral_total "
                     "and the other planner settings are not used; to let this project plan new pools "
                     "instead, remove paths.pools_file (upstream's labels then cover few or none of them)")
    rep.notes.append(f"plan: {named} of {len(pools)} upstream pools have neg_hard + neg_nearmiss + neg_easy = "
                     f"{n_neg} candidates besides the seed and get pool names by position (hard, nearmiss, "
                     "easy); the others' candidates are in the pool 'imported'")


def _import_qrels(qrels_f: Path, cfg: dict, rep: ImportReport, up_cols: Mapping[str, str], imported: Path, *,
                  has_plan: bool) -> None:
    """Upstream's judgments as labels to reuse (paths.judge_reuse_file)."""
    rows = []
    for r in _read_jsonl(qrels_f):
        rows.append({"query_id": r.get(up_cols["query_id"]),
                     "query_text": r.get(up_cols["query_text"]),
                     "image_id": r.get(up_cols["image_id"]), "relevance_label": r.get(up_cols["relevance_label"]),
                     "judge": "imsearch_benchmaker"})
    _write_jsonl(imported / "upstream_qrels.jsonl", rows)
    cfg["paths"]["judge_reuse_file"] = str(imported / "upstream_qrels.jsonl")
    rep.files.append(f"{imported / 'upstream_qrels.jsonl'} ({len(rows)} upstream judgments of "
                     f"{len({r['query_id'] for r in rows})} queries; paths.judge_reuse_file: a planned query "
                     "whose every candidate upstream labelled is not sent to the judge)")
    if not has_plan:
        rep.notes.append("judge: no query_plan.jsonl upstream, so this project plans its own pools; upstream's "
                         "labels are reused only for queries whose planned candidates they all cover (few or "
                         "none): see `benchmaker estimate`")


def import_upstream(toml: str | Path, *, outputs: str | Path | None = None, out: str | Path = "config/imported.yaml",
                    results: str | None = None, force: bool = False) -> ImportReport:
    """Convert an upstream config (and outputs); writes ``out`` and files under ``<results>/<name>/imported``."""
    toml = Path(toml)
    up = read_toml(toml)
    outputs_dir = Path(outputs) if outputs else None
    if outputs_dir is not None and not outputs_dir.is_dir():
        raise UserError(f"--outputs {outputs_dir}: not a folder")
    if results is None:
        results = "results"
    cfg, rep = convert_config(up, results=results)
    out = Path(out)
    if out.exists() and not force:
        raise UserError(f"{out} exists: pass --force to overwrite it, or --out another file")
    # upstream's column names; each defaults upstream to the name this project uses
    up_cols = {ours: up.get(k) or ours for k, ours in COLUMN_KEYS.items()}
    imported = Path(results) / rep.benchmark / "imported"

    images_f = _output_file(up, outputs_dir, "images_jsonl", "images.jsonl")
    ann_f = _output_file(up, outputs_dir, "annotations_jsonl", "annotations.jsonl")
    plan_f = _output_file(up, outputs_dir, "query_plan_jsonl", "query_plan.jsonl")
    qrels_f = _output_file(up, outputs_dir, "qrels_jsonl", "qrels.jsonl")
    images_rows = _read_jsonl(images_f) if images_f else []
    id_col = up_cols["image_id"]
    if images_rows:
        images_rows = _import_images(images_rows, cfg, rep, up_cols, imported)
    if plan_f:
        _import_plan(plan_f, cfg, rep, up_cols, imported)
    if qrels_f:
        _import_qrels(qrels_f, cfg, rep, up_cols, imported, has_plan=bool(plan_f))
    if ann_f and cfg.get("vision", {}).get("adapter") == "openai" and \
            cfg["vision"]["openai"].get("image_transport") == "url":
        ann_rows = _read_jsonl(ann_f)
        for r in ann_rows:
            r["image_id"] = r.get(id_col, r.get("image_id"))
        _prefill_vision(cfg, images_rows, ann_rows, rep, up_cols)
    elif ann_f:
        rep.notes.append("upstream annotations not reused: the imported vision adapter does not send the same "
                         "requests (needs vision.adapter openai with image_transport url)")
    if outputs_dir is not None and not any((images_f, ann_f, plan_f, qrels_f)):
        rep.notes.append(f"no upstream output found in {outputs_dir} (images.jsonl, annotations.jsonl, "
                         "query_plan.jsonl, qrels.jsonl)")
    validate_config(cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# converted from {toml} by `benchmaker import-upstream` (docs/upstream.md, Migrating)\n"
              "# secrets are not here: export OPENAI_API_KEY / HF_TOKEN\n")
    out.write_text(header + yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True), encoding="utf-8")
    rep.config_path = str(out)
    return rep

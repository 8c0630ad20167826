"""The requests each paid stage would send (``benchmaker estimate``, the package's doc): the images
preprocessing accepts, the annotations the run will have, the planner's plan (or the quotas and the
pools file before it), the writer's and the judge's requests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..providers.tokens import _typical_row
from .core import API_ADAPTERS, _Stage


# -- the requests of each stage --------------------------------------------------------------------------
@dataclass
class Context:
    """What the stages' estimates share: the config, facet model, results folder, response caches, and
    what earlier stages found (the images, the annotations the run will have)."""

    cfg: Mapping[str, Any]
    fm: Any
    results: Path
    cache_root: str
    memo: dict[str, Any] = field(default_factory=dict)

    def images(self):
        if "images" not in self.memo:
            self.memo["images"] = _images(self.cfg, self.results)
        return self.memo["images"]


def _corpus_changed(cfg: Mapping[str, Any], results: Path, p: Path) -> bool:
    """Whether the image folder differs from ``images.jsonl`` (a file added, removed, resized or
    modified since it was written): one ``stat`` per file, as the workflow's listings."""
    from ..formats import read_table
    from ..preprocess.scan import Candidate, scan
    from ..settings_schema import filled

    pre = filled("preprocess", cfg.get("preprocess"))
    t = p.stat().st_mtime_ns
    q = results / "quarantine.jsonl"
    files = {}
    for c in scan(cfg["paths"]["image_root"], extensions=pre["extensions"], follow_symlinks=pre["follow_symlinks"],
                  skip_hidden=pre["skip_hidden"], exclude_dirs=[results], with_stat=True):
        if isinstance(c, Candidate):
            if (c.mtime_ns or 0) > t:
                return True
            files[c.image_id] = c.size
    known = dict(read_table("images", p, columns=cfg["columns"]).select("image_id", "file_size").iter_rows())
    quarantined = set()
    if q.exists():
        quarantined = set(read_table("quarantine", q)["path"].to_list())
    return (any(i not in files or (s is not None and files[i] != s) for i, s in known.items())
            or any(i not in known and i not in quarantined for i in files))


def _images(cfg: Mapping[str, Any], results: Path):
    """(images frame, how it was obtained, number of files preprocessing will quarantine)."""

    from ..formats import read_table

    p = results / "images.jsonl"
    if p.exists() and not _corpus_changed(cfg, results, p):
        q = results / "quarantine.jsonl"
        nq = 0
        if q.exists():
            with open(q, encoding="utf-8") as fh:
                nq = sum(1 for ln in fh if ln.strip())
        return read_table("images", p, columns=cfg["columns"]), "images.jsonl", nq
    from ..preprocess.metadata import load_metadata, merge_metadata
    from ..preprocess.rights import load_rights_map
    from ..preprocess.stage import _IMAGE_COLUMNS, _image_url, inspect_corpus
    from ..settings_schema import filled

    pre = dict(cfg.get("preprocess") or {})
    root = Path(cfg["paths"]["image_root"])
    workers = int(filled("preprocess", pre)["workers"])
    accepted, quarantine, _stats, _notes = inspect_corpus(str(root), pre, workers=workers,
                                                          exclude_dirs=[results])
    # the rows preprocess will write: rights map, URLs and metadata columns (prompts may use them, so
    # they are part of the request keys that the response cache is checked against)
    paths = cfg["paths"]
    df = (load_rights_map(paths.get("rights_map")).apply(accepted.sort("image_id"), root.resolve().name or "images")
          .with_columns(_image_url(pre.get("image_base_url"))).select(_IMAGE_COLUMNS))
    if paths.get("metadata_jsonl"):
        df = merge_metadata(df, load_metadata(paths["metadata_jsonl"], cfg["columns"]), cfg["columns"])[0]
    how = "images.jsonl is older than the image folder: " if p.exists() else ""
    return df, how + "inspection of image_root (what preprocess will accept)", quarantine.height


def _pools_file_rows(path: str, columns: Mapping[str, str]) -> list[tuple[str, list[str], int]]:
    """(query id, candidate ids seeds first, number of seeds) per row of a pools file (before any plan)."""
    from ..settings_schema import filled

    columns = filled("columns", columns)
    qcol, scol, ccol = columns["query_id"], columns["seed_image_ids"], columns["candidate_image_ids"]
    from ..formats import iter_json_objects

    out = []
    for _ln, row in iter_json_objects(path, "paths.pools_file"):
        seeds = row.get(scol, row.get("seed_image_ids")) or []
        seeds = [seeds] if isinstance(seeds, str) else list(seeds)
        cands = row.get(ccol, row.get("candidate_image_ids")) or []
        out.append((str(row.get(qcol, row.get("query_id"))), list(dict.fromkeys([*seeds, *cands])), len(seeds)))
    return out


def _vision_stage(ctx: Context) -> _Stage | None:
    ad = ctx.cfg["vision"]["adapter"]
    if ad not in API_ADAPTERS:
        return None
    return _Stage("vision", ad, ctx.cfg["vision"][ad], f"{ctx.cache_root}/vision", item_type="image")


def _annotations(ctx: Context):
    """(annotation rows the run will have, whether they cover every image): from the vision stage's
    response cache (an API vision adapter: exactly the rows the run writes for the images it has
    answered), else ``annotations.jsonl`` when it exists."""
    if "annotations" in ctx.memo:
        return ctx.memo["annotations"]
    import polars as pl

    from ..formats import read_table
    from ..providers.parse import validate_answer
    from ..vision.openai import answers_to_frame, vision_items

    imgs = ctx.images()[0]
    st = _vision_stage(ctx)
    if st is None:
        p = ctx.results / "annotations.jsonl"
        ann = read_table("annotations", p, columns=ctx.cfg["columns"], facets=ctx.fm) if p.exists() else None
        out = (ann, ann is not None and set(imgs["image_id"].to_list()) <= set(ann["image_id"].to_list()))
    else:
        answers: dict[str, dict] = {}
        for it in vision_items(imgs, ctx.fm, st.s, ctx.cfg["paths"]["image_root"]):
            rec = st.runner.cache.get(st.runner.request_key(it.spec))
            obj = (rec or {}).get("answer")
            if isinstance(obj, dict) and validate_answer(obj, it.spec.schema, it.check) is None:
                answers[it.item_id] = obj
        ann = answers_to_frame(answers, imgs["image_id"].to_list(), ctx.fm, f"{st.adapter}:{st.runner.llm.model}")
        out = (ann if ann.height else None, ann.height == imgs.height and imgs.height > 0)
    if out[0] is not None and not isinstance(out[0], pl.DataFrame):
        out = (None, False)
    ctx.memo["annotations"] = out
    return out


@dataclass
class JudgeRequests:
    """The judge's requests to price: (spec, candidates, item or None) each; where they come from; the
    queries ``paths.judge_reuse_file`` answers; whether they are the run's own requests (cache-checked);
    the share of the pools the run may send."""

    specs: Iterable[tuple[Any, int, Any, Any]]     # (spec, candidates, item or None, the spec without pools)
    source: str
    reused: int = 0
    real: bool = False
    pool_fill: tuple[float, float] | None = None


def _planned(ctx: Context, ann) -> Any:
    """The query plan the run's plan rule will write, made by the planner's own code now."""
    from ..losses import Losses
    from ..plan import plan_frames

    paths, cfg = ctx.cfg["paths"], ctx.cfg
    imgs = ctx.images()[0]
    keep = [c for c in ("image_id", "sha256", "phash", "duplicate_group") if c in imgs.columns]
    pools = paths.get("pools_file")
    # as the plan rule: a pools file fixes the queries (its seeds file is then not read)
    return plan_frames(ann, imgs.select(keep), ctx.fm, cfg["plan"], cfg["benchmark"]["name"], Losses("plan"),
                       seeds_file=None if pools else paths.get("seeds_file"), columns=cfg["columns"],
                       pools_file=pools)


def judge_requests(ctx: Context, s: Mapping[str, Any]) -> JudgeRequests:
    """The judge's requests (:class:`JudgeRequests`): the planner's plan over the annotations the run
    will have once every image's is known, else the quotas or the pools file (see the module doc)."""
    from ..judge.openai import judge_items
    from ..losses import Losses
    from ..reuse import split_reused

    cfg = ctx.cfg
    reuse_path = cfg["paths"].get("judge_reuse_file")
    graded = s.get("labels") == "graded"
    ann, complete = _annotations(ctx)
    if complete:
        key = "plan"
        if key not in ctx.memo:
            ctx.memo[key] = _planned(ctx, ann)
        plan = ctx.memo[key]
        n_all = plan.height
        plan = split_reused(plan, reuse_path, graded=graded, columns=cfg["columns"])[0]
        plan, written = _with_written_queries(ctx, plan)
        items = judge_items(plan, ann, ctx.images()[0], ctx.fm, s, cfg["paths"]["image_root"], Losses("judge"))
        # a query not written yet is priced with a typical text: never a pilot's request
        return JudgeRequests(((it.spec, len(keys), it if it.item_id in written else None, None)
                              for it, keys in items),
                             f"the planner's plan ({n_all} queries, {len(written)} written) over the annotations "
                             "the run will have", n_all - plan.height, True)
    return _typical_judge_requests(ctx, s, ann)


def pools_file_todo(cfg: Mapping[str, Any], graded: bool) -> tuple[list, list]:
    """``paths.pools_file``'s (query_id, candidate ids, seed count) rows, and those of them whose pools
    ``paths.judge_reuse_file`` does not already answer (what the queries writer and the judge still send)."""
    from ..reuse import read_reuse_file, reusable

    rows = _pools_file_rows(cfg["paths"]["pools_file"], cfg["columns"])
    reuse_path = cfg["paths"].get("judge_reuse_file")
    done: set[str] = set()
    if reuse_path:
        done = set(reusable(read_reuse_file(reuse_path, cfg["columns"]), ((q, ids) for q, ids, _ in rows),
                            3 if graded else 1)[0])
    return rows, [r for r in rows if r[0] not in done]


def _typical_judge_requests(ctx: Context, s: Mapping[str, Any], ann) -> JudgeRequests:
    """Before the queries can be planned: the pools file's pools, else the ``plan`` quotas, with the
    annotation rows already answered (cycled), else rows of typical length."""
    from ..judge.prompts import candidate_keys, judge_spec

    cfg, fm = ctx.cfg, ctx.fm
    rows_known = list(ann.iter_rows(named=True)) if ann is not None else []
    what = f"{len(rows_known)} annotation rows already answered" if rows_known else "typical annotation rows"

    def typical(qid: str, n_seed: int, n_c: int, q: int):
        rows = [dict(rows_known[(q * n_c + j) % len(rows_known)], image_id=f"img{q * n_c + j}") if rows_known
                else _typical_row(fm, q * n_c + j) for j in range(n_c)]
        keys = candidate_keys(qid, [r["image_id"] for r in rows])
        def spec(cands: list[dict]):
            thumbs = ({r["image_id"]: _typical_image(r["image_id"]) for r in cands} if s.get("send_thumbnails")
                      else None)
            return judge_spec(query_text=_TYPICAL_QUERY, narrative=_TYPICAL_NARRATIVE, candidates=cands,
                              keys={r["image_id"]: keys[r["image_id"]] for r in cands}, meta_row={}, fm=fm,
                              settings=s, thumbnails=thumbs)

        return spec(rows), n_c, None, spec(rows[:n_seed])

    if cfg["paths"].get("pools_file"):
        rows, todo = pools_file_todo(cfg, s.get("labels") == "graded")
        return JudgeRequests((typical(q, n_seed, len(ids), k) for k, (q, ids, n_seed) in enumerate(todo)),
                             f"paths.pools_file ({len(rows)} queries, {what})", len(rows) - len(todo))
    n_q, n_seed, per_query, why, low = _quota_pools(ctx)
    return JudgeRequests((typical(f"q{q}", n_seed, n_seed + per_query[q], q) for q in range(n_q)),
                         f"plan quotas ({n_q} queries x up to {n_seed + max(per_query, default=0)} candidates{why}, "
                         f"{what}; the exact plan once every image's annotation is known)", 0, False, (low, 1.0))


def _quota_pools(ctx: Context) -> tuple[int, int, list[int], str, float]:
    """(queries, seeds per query, candidates beyond the seeds per query, what capped them, the least
    share of those the planner plans) that the planner can plan at most: ``num_seeds`` (or the seeds
    file's queries) of distinct unused seeds, the pool quotas, and every image in at most
    ``max_image_reuse`` pools, seeds included (:class:`benchmaker.plan.planner.Planner`).

    The least share is the planner's own rule, not a guess: positives and neutrals need images whose
    facets match the seed (a corpus may have none), but the easy pool pads the negatives the other
    pools fall short of from any eligible image, so every query gets ``neg_total`` negatives if the
    images allow; with ``diversity_facets``, at most ``diversity_cap`` per facet value in a pool, so
    only ``diversity_cap`` of them are certain (every image may share one value). Under the reuse cap
    the queries that come first take what the later ones cannot; the slots fill as long as the
    queries' certain negatives cover them. Images that are duplicates of a seed are never candidates:
    this share assumes a corpus that is not mostly copies of a few images."""
    from ..settings_schema import filled

    p = filled("plan", ctx.cfg["plan"])
    n_img = ctx.images()[0].height
    n_seed = int(p["seeds_per_query"])
    n_q = int(p["num_seeds"])
    seeds_file = ctx.cfg["paths"].get("seeds_file")
    if seeds_file:
        with open(seeds_file, encoding="utf-8") as fh:
            n_q = sum(1 for ln in fh if ln.strip())
    n_q = min(n_q, n_img // max(1, n_seed))
    quota = int(p["pos_total"]) + int(p["neutral_total"]) + int(p["neg_total"])
    slots = max(0, n_img * int(p["max_image_reuse"]) - n_q * n_seed)
    certain = int(p["neg_total"]) if not p["diversity_facets"] else min(int(p["neg_total"]), int(p["diversity_cap"]))
    low = min(slots, n_q * certain) / max(1, min(slots, n_q * quota))
    if n_q == 0 or slots >= n_q * quota:
        return n_q, n_seed, [quota] * n_q, "", min(1.0, low)
    per = [min(quota, slots // n_q + (q < slots % n_q)) for q in range(n_q)]
    return (n_q, n_seed, per, f" (max_image_reuse {p['max_image_reuse']} over {n_img} images: {sum(per)} in all)",
            min(1.0, low))


# -- the query writer (the ``queries`` stage, docs/judge-rules.md "Method") ------------------------------
# a written query's typical length, for labelling requests priced before its text is known
_TYPICAL_QUERY = "a photo of the query's subject in its setting, with two distinctive details"
_TYPICAL_NARRATIVE = ("A relevant image shows the query's subject as its main content, clearly visible; an image "
                      "that shows it only as a background detail is not relevant.")


def _typical_image(image_id: str):
    """An image of typical size as a request part (priced, never read: estimates make no request)."""
    import hashlib

    from ..providers.spec import ImageRef

    return ImageRef(sha256=hashlib.sha256(image_id.encode()).hexdigest(), width=1024, height=768)


def _queries_stage(ctx: Context) -> _Stage | None:
    """The query writer's accumulator: on the judge's adapter (None when that is offline)."""
    from ..providers.settings import query_settings
    from ..queries.openai import writer_settings

    ad = ctx.cfg["judge"]["adapter"]
    if ad not in API_ADAPTERS:
        return None
    return _Stage("queries", ad, writer_settings(query_settings(ctx.cfg["queries"], ctx.cfg["judge"])),
                  f"{ctx.cache_root}/queries", item_type="query")


def _to_write(ctx: Context, ann):
    """(the planner's plan, its queries the writer will write: those ``paths.judge_reuse_file`` does not
    fully label), as :func:`benchmaker.queries.to_write` splits them."""
    from ..reuse import split_reused

    if "plan" not in ctx.memo:
        ctx.memo["plan"] = _planned(ctx, ann)
    plan = ctx.memo["plan"]
    cfg = ctx.cfg
    todo = split_reused(plan, cfg["paths"].get("judge_reuse_file"), graded=cfg["judge"]["labels"] == "graded",
                        columns=cfg["columns"])[0]
    return plan, todo


def _query_items(ctx: Context, st: _Stage, ann):
    from ..losses import Losses
    from ..queries.openai import query_items

    plan, todo = _to_write(ctx, ann)
    return plan, todo, query_items(todo, ann, ctx.images()[0], ctx.fm, st.s, ctx.cfg["paths"]["image_root"],
                                   Losses("queries"))


def _written(ctx: Context) -> dict[str, tuple[str, str]]:
    """query id -> (query text, narrative) the writer has answered (its response cache): exactly the
    texts the run will write for them, as :func:`_annotations` reads vision's answers."""
    if "queries" in ctx.memo:
        return ctx.memo["queries"]
    from ..providers.parse import validate_answer

    out: dict[str, tuple[str, str]] = {}
    st = _queries_stage(ctx)
    ann, complete = _annotations(ctx)
    if st is not None and complete:
        for it in _query_items(ctx, st, ann)[2]:
            obj = (st.runner.cache.get(st.runner.request_key(it.spec)) or {}).get("answer")
            if isinstance(obj, dict) and validate_answer(obj, it.spec.schema, it.check) is None:
                out[it.item_id] = (str(obj["query_text"]).strip(), str(obj["narrative"]).strip())
    ctx.memo["queries"] = out
    return out


def _with_written_queries(ctx: Context, plan):
    """(the plan with each query's ``query_text`` and ``narrative``: the written ones, else typical
    ones, the ids of the written ones)."""
    import polars as pl

    written = {q: t for q, t in _written(ctx).items() if q in set(plan["query_id"].to_list())}
    ids = plan["query_id"].to_list()
    return plan.with_columns(
        pl.Series("query_text", [written.get(q, (_TYPICAL_QUERY, ""))[0] for q in ids], dtype=pl.String),
        pl.Series("narrative", [written.get(q, ("", _TYPICAL_NARRATIVE))[1] for q in ids], dtype=pl.String),
    ), set(written)

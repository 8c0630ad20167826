"""``benchmaker estimate``: requests, tokens and dollars still to pay, before or during a run.

What it counts, per API stage:

* **only what will be sent**: the images preprocessing accepts (before preprocess has run, the same
  inspection that preprocess runs decides, so files it will quarantine are not counted); after it,
  ``images.jsonl``;
* **each distinct request content once** (byte-identical images share an answer, as in the run);
* **minus the response cache**: requests whose content key is already answered cost nothing (after
  a partial run, only the rest is priced). Keys are the provider's own (``openai`` or ``gemini``);
* **prompt caching**: the stable prefix of a request (schema + system prompt, when it reaches 1,024
  tokens) is priced at the cached-input rate for every request after the first, as the provider bills;
* tokens: ~4 characters per text token, each provider's own image rule, output = a schema-shaped
  answer of typical size plus an allowance for reasoning tokens (``reasoning_effort``,
  :data:`~benchmaker.providers.tokens.REASONING_OUTPUT`); once at least ``CALIBRATE_MIN`` answers
  of the stage are cached, their real answer sizes and billed reasoning tokens replace both guesses.
  Batch mode gets ``batch_discount``.

The query writer (its own line, ``queries``, on the judge's adapter) is priced from the planned
queries' seeds (pixels at low detail and annotation rows); the judge's line also gives its price in
both labelling modes, text-only and with each candidate's image (``labelling_modes``). The judge is
priced from the real query plan and annotations when they exist (the exact requests
and their cache keys); before that, from ``paths.pools_file`` when set (its queries and pool sizes),
else from ``plan`` (queries x candidates), with annotation rows of the typical length the facet
model yields. Queries that ``paths.judge_reuse_file`` fully labels are free (never sent) and counted
as ``reused`` (:mod:`benchmaker.reuse`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .providers.cost import Usage, cost_usd
from .providers.tokens import (  # noqa: F401 - re-exported
    REASONING_OUTPUT,
    _typical_row,
    answer_text,
    answer_tokens,
    out_tokens,
    reasoning_allowance,
    text_tokens,
)

__all__ = ["API_ADAPTERS", "REASONING_OUTPUT", "estimate", "out_tokens"]

API_ADAPTERS = ("openai", "gemini")
CACHE_MIN, CACHE_STEP = 1024, 128
# with at least CALIBRATE_MIN cached answers of the stage, their billed output tokens (at most
# CALIBRATE_MAX read) replace the schema-based guess
CALIBRATE_MIN, CALIBRATE_MAX = 5, 200


def _prefix_tokens(spec) -> int:
    from .providers.spec import _schema_memo

    return (len(_schema_memo(spec.schema)[1]) + len(spec.system)) // 4


class _Stage:
    """Accumulates one stage's requests: distinct keys, cache hits, input / cached / output tokens."""

    def __init__(self, stage: str, adapter: str, settings: Mapping[str, Any], cache_dir: str | None):
        from .providers.runners import provider_runner

        self.stage, self.adapter = stage, adapter
        self.runner = provider_runner(adapter, stage=stage, item_type="x", settings=dict(settings),
                                      cache_dir=cache_dir)
        self.s = self.runner.settings
        self.items = self.cached = self.duplicates = self.requests = 0
        self.tok_in = self.tok_cached = self.tok_out = self.tok_answer = 0
        self._seen: set[str] = set()
        self._prefixes: set[str] = set()
        # per cached answer: (its answer's tokens, the schema's guess for it, reasoning tokens billed)
        self._billed: list[tuple[int, int, int]] = []

    def add(self, spec, n_judgments: int = 0, *, check_cache: bool = True) -> None:
        from .providers.spec import estimate_input_tokens

        self.items += 1
        key = self.runner.request_key(spec)
        if key in self._seen:
            self.duplicates += 1
            return
        self._seen.add(key)
        if check_cache and self.runner.cache.contains(key):
            self.cached += 1
            if len(self._billed) < CALIBRATE_MAX:
                self._calibrate(self.runner.cache.get(key) or {}, spec, n_judgments)
            return
        self.requests += 1
        n_in = estimate_input_tokens(spec, self.runner.llm, provider=self.adapter)
        self.tok_in += n_in
        pre = _prefix_tokens(spec)
        pkey = f"{spec.system}\x00{id(spec.schema)}"
        if n_in >= CACHE_MIN and pre >= CACHE_MIN:
            if pkey in self._prefixes:
                # OpenAI caches in steps of 128 tokens; Gemini's implicit cache has no documented step
                step = CACHE_STEP if self.adapter == "openai" else 1
                self.tok_cached += (min(pre, n_in) // step) * step
            self._prefixes.add(pkey)
        self.tok_answer += answer_tokens(spec.schema, n_judgments)

    def _calibrate(self, rec: Mapping[str, Any], spec, n_judgments: int) -> None:
        """What a cached answer says about this model: its visible answer's size against the schema's
        guess, and the reasoning tokens it was billed (``reasoning_tokens``, else output - answer)."""
        u = rec.get("usage") or {}
        n_out = int(u.get("output_tokens") or 0)
        obj = rec.get("answer")
        if not n_out or not isinstance(obj, dict):
            return
        shown = text_tokens(answer_text(obj))
        n_j = len(obj["judgments"]) if isinstance(obj.get("judgments"), list) else n_judgments
        reasoning = int(u.get("reasoning_tokens") or 0) or max(0, n_out - shown)
        self._billed.append((shown, answer_tokens(spec.schema, n_j), reasoning))

    def line(self) -> dict:
        price = self.runner.price
        batch = self.s["mode"] == "batch"
        allowance = reasoning_allowance(self.s)
        if len(self._billed) >= CALIBRATE_MIN:
            # answers already paid for say what this model really writes and how much it reasons
            n = len(self._billed)
            scale = sum(b[0] for b in self._billed) / max(1, sum(b[1] for b in self._billed))
            reasoning = sum(b[2] for b in self._billed) / n
            answer = round(self.tok_answer * scale)
            source = (f"measured on {n} cached answers: answer size x{scale:.2f} of the schema's guess, "
                      f"{reasoning:.0f} reasoning tokens per answer")
        else:
            answer, reasoning = self.tok_answer, allowance
            source = (f"answer schema + reasoning allowance of {allowance} tokens for reasoning_effort "
                      f"{self.s.get('reasoning_effort')!s} (assumed: the main uncertainty until answers are cached)")
        self.tok_out = answer + round(self.requests * reasoning)
        usd = cost_usd(Usage(self.tok_in, self.tok_cached, self.tok_out, 0), price, batch=batch,
                       batch_discount=float(self.s["batch_discount"]))
        return {"stage": self.stage, "model": self.runner.llm.model, "mode": self.s["mode"],
                "items": self.items, "requests": self.requests, "cached": self.cached,
                "duplicates": self.duplicates, "input_tokens": self.tok_in, "cached_input_tokens": self.tok_cached,
                "output_tokens": self.tok_out, "answer_tokens": answer,
                "reasoning_tokens": round(self.requests * reasoning), "output_from": source, "usd": round(usd, 6),
                "price_known": price.known}


def _images(cfg: Mapping[str, Any], results: Path):
    """(images frame, how it was obtained, number of files preprocessing will quarantine)."""

    from .formats import read_table

    p = results / "images.jsonl"
    if p.exists():
        q = results / "quarantine.jsonl"
        nq = 0
        if q.exists():
            with open(q, encoding="utf-8") as fh:
                nq = sum(1 for ln in fh if ln.strip())
        return read_table("images", p, columns=cfg["columns"]), "images.jsonl", nq
    from .preprocess.metadata import load_metadata, merge_metadata
    from .preprocess.rights import load_rights_map
    from .preprocess.stage import _IMAGE_COLUMNS, _image_url, inspect_corpus

    pre = dict(cfg.get("preprocess") or {})
    root = Path(cfg["paths"]["image_root"])
    accepted, quarantine, _stats, _notes = inspect_corpus(str(root), pre, workers=int(pre.get("workers") or 1),
                                                          exclude_dirs=[results])
    # the rows preprocess will write: rights map, URLs and metadata columns (prompts may use them, so
    # they are part of the request keys that the response cache is checked against)
    paths = cfg["paths"]
    df = (load_rights_map(paths.get("rights_map")).apply(accepted.sort("image_id"), root.resolve().name or "images")
          .with_columns(_image_url(pre.get("image_base_url"))).select(_IMAGE_COLUMNS))
    if paths.get("metadata_jsonl"):
        df = merge_metadata(df, load_metadata(paths["metadata_jsonl"], cfg["columns"]), cfg["columns"])[0]
    return df, "inspection of image_root (what preprocess will accept)", quarantine.height


def _pools_file_rows(path: str, columns: Mapping[str, str]) -> list[tuple[str, list[str], int]]:
    """(query id, candidate ids seeds first, number of seeds) per row of a pools file (before any plan)."""
    from .settings_schema import filled

    columns = filled("columns", columns)
    qcol, scol, ccol = columns["query_id"], columns["seed_image_ids"], columns["candidate_image_ids"]
    from .formats import iter_json_objects

    out = []
    for _ln, row in iter_json_objects(path, "paths.pools_file"):
        seeds = row.get(scol, row.get("seed_image_ids")) or []
        seeds = [seeds] if isinstance(seeds, str) else list(seeds)
        cands = row.get(ccol, row.get("candidate_image_ids")) or []
        out.append((str(row.get(qcol, row.get("query_id"))), list(dict.fromkeys([*seeds, *cands])), len(seeds)))
    return out


def _judge_specs(cfg: Mapping[str, Any], fm, s: Mapping[str, Any], results: Path) -> tuple[Iterable, str, int]:
    """(spec and candidate count per request to price, where they come from, queries answered by
    paths.judge_reuse_file)."""
    from .formats import read_table
    from .judge.openai import judge_items
    from .losses import Losses
    from .reuse import read_reuse_file, reusable, split_reused

    reuse_path = cfg["paths"].get("judge_reuse_file")
    graded = s.get("labels") == "graded"
    plan_p, ann_p, img_p = results / "query_plan.jsonl", results / "annotations.jsonl", results / "images.jsonl"
    if plan_p.exists() and ann_p.exists() and img_p.exists():
        cols = cfg["columns"]
        plan = read_table("query_plan", plan_p, columns=cols)
        ann = read_table("annotations", ann_p, columns=cols, facets=fm)
        imgs = read_table("images", img_p, columns=cols)
        n_all = plan.height
        plan = _with_query_texts(split_reused(plan, reuse_path, graded=graded, columns=cols)[0], results, cols)
        items = judge_items(plan, ann, imgs, fm, s, cfg["paths"]["image_root"], Losses("judge"))
        return ((it.spec, len(keys)) for it, keys in items), "query_plan.jsonl + annotations.jsonl", \
            n_all - plan.height
    from .judge.prompts import candidate_keys, judge_spec

    def typical(qid: str, n_seed: int, n_c: int, q: int):
        rows = [_typical_row(fm, q * n_c + j) for j in range(n_c)]
        keys = candidate_keys(qid, [r["image_id"] for r in rows])
        thumbs = {r["image_id"]: _typical_image(r["image_id"]) for r in rows} if s.get("send_thumbnails") else None
        return judge_spec(query_text=_TYPICAL_QUERY, narrative=_TYPICAL_NARRATIVE, candidates=rows, keys=keys,
                          meta_row={}, fm=fm, settings=s, thumbnails=thumbs), n_c

    pools_file = cfg["paths"].get("pools_file")
    if pools_file:
        rows = _pools_file_rows(pools_file, cfg["columns"])
        done: set[str] = set()
        if reuse_path:
            done = set(reusable(read_reuse_file(reuse_path, cfg["columns"]), ((q, ids) for q, ids, _ in rows),
                                3 if graded else 1)[0])
        todo = [r for r in rows if r[0] not in done]
        return ((typical(q, n_seed, len(ids), k)) for k, (q, ids, n_seed) in enumerate(todo)), \
            f"paths.pools_file ({len(rows)} queries, typical annotation rows)", len(rows) - len(todo)

    p = cfg["plan"]
    n_q = int(p["num_seeds"])
    n_seed = int(p["seeds_per_query"])
    n_c = n_seed + int(p["pos_total"]) + int(p["neutral_total"]) + int(p["neg_total"])

    return ((typical(f"q{q}", n_seed, n_c, q)) for q in range(n_q)), \
        f"plan settings ({n_q} queries x {n_c} candidates, typical annotation rows)", 0


def estimate(cfg: Mapping[str, Any]) -> list[dict]:
    """One line per API stage: items, distinct requests still to send, cache hits, duplicates, tokens, USD."""
    from .config import results_dir
    from .formats import FacetModel
    from .vision.openai import vision_items

    fm = FacetModel.from_config(cfg["facets"])
    results = Path(results_dir(cfg))
    cache_root = f"{cfg['paths']['results']}/.cache"
    lines = []
    ad = cfg["vision"]["adapter"]
    if ad in API_ADAPTERS:
        s = cfg["vision"][ad]
        st = _Stage("vision", ad, s, f"{cache_root}/vision")
        imgs, source, n_quar = _images(cfg, results)
        for it in vision_items(imgs, fm, st.s, cfg["paths"]["image_root"]):
            st.add(it.spec)
        lines.append(st.line() | {"source": source, "quarantined": n_quar})
    ad = cfg["judge"]["adapter"]
    if ad in API_ADAPTERS:
        lines.append(_queries_line(cfg, fm, results, cache_root))
        s = {**cfg["judge"][ad], "labels": cfg["judge"]["labels"], "rationale": cfg["judge"]["rationale"]}
        st = _Stage("judge", ad, s, f"{cache_root}/judge")
        specs, source, n_reused = _judge_specs(cfg, fm, st.s, results)
        real = source.startswith("query_plan")
        for spec, n in specs:
            st.add(spec, n, check_cache=real)
        lines.append(st.line() | {"source": source, "reused": n_reused,
                                  "labelling_modes": _labelling_modes(cfg, fm, results, s)})
        dp = cfg.get("deepen") or {}
        if dp.get("enabled"):  # pool deepening: the same judge, cache and prices (docs/deepen.md)
            from .deepen.label import estimate_specs

            st = _Stage("deepen", ad, s, f"{cache_root}/judge")
            specs, source, pairs, real = estimate_specs(cfg, fm, st.s, results)
            for spec, n in specs:
                st.add(spec, n, check_cache=real)
            ln = st.line()
            ok = ((dp.get("max_pairs") is None or pairs <= dp["max_pairs"])
                  and (dp.get("max_usd") is None or ln["usd"] <= dp["max_usd"]))
            lines.append(ln | {"source": source, "pairs": pairs, "max_pairs": dp.get("max_pairs"),
                               "max_usd": dp.get("max_usd"), "within_budget": ok})
    j2 = _second_judge_line(cfg, fm, results, cache_root)
    if j2 is not None:
        lines.append(j2)
    return lines


def _second_judge_line(cfg: Mapping[str, Any], fm, results: Path, cache_root: str) -> dict | None:
    """The audit's second judge (``audit.second_judge``), when it is an API judge: priced like the
    judge, on the audit sample's pairs (scope ``sample``: the real sample once drawn, else
    ``audit.sample_size`` pairs) or on every query (scope ``all``), with its own response cache."""
    from .settings_schema import filled

    audit = filled("audit", cfg.get("audit"))
    sj = audit.get("second_judge") or {}
    if not audit.get("enabled") or sj.get("judge") is None:
        return None
    from .config import deep_merge, validate_config

    judge = validate_config(deep_merge({k: v for k, v in cfg.items() if not str(k).startswith("_")},
                                       {"judge": sj["judge"]}))["judge"]
    ad = judge["adapter"]
    if ad not in API_ADAPTERS:
        return None
    s = {**judge[ad], "mode": "sync", "labels": judge["labels"], "rationale": judge["rationale"]}
    st = _Stage("audit_judge2", ad, s, f"{cache_root}/judge-audit/{sj['name']}")
    specs, source, _ = _judge_specs(cfg, fm, st.s, results)
    real = source.startswith("query_plan")
    sample_p = results / "audit" / "sample.jsonl"
    if sj["scope"] == "sample":
        if real and sample_p.exists():
            from .audit.files import read_sample
            from .audit.judge2 import restrict_plan
            from .formats import read_table
            from .judge.openai import judge_items
            from .losses import Losses

            cols = cfg["columns"]
            plan = restrict_plan(read_table("query_plan", results / "query_plan.jsonl", columns=cols),
                                 read_sample(str(sample_p)))
            plan = _with_query_texts(plan, results, cols)
            items = judge_items(plan, read_table("annotations", results / "annotations.jsonl", columns=cols,
                                                 facets=fm),
                                read_table("images", results / "images.jsonl", columns=cols), fm, st.s,
                                cfg["paths"]["image_root"], Losses("judge"))
            for it, keys in items:
                st.add(it.spec, len(keys))
            return st.line() | {"source": "audit/sample.jsonl (the sampled pairs)", "reused": 0}
        # before the sample: audit.sample_size pairs, spread over queries as the judge's pools are
        budget = int(audit["sample_size"])
        for spec, n in specs:
            if budget <= 0:
                break
            take = min(n, budget)
            st.add(spec, take, check_cache=False)
            budget -= take
        return st.line() | {"source": f"audit.sample_size ({audit['sample_size']} pairs) over {source}",
                            "reused": 0}
    for spec, n in specs:
        st.add(spec, n, check_cache=real)
    return st.line() | {"source": source, "reused": 0}


# -- the query writer (the ``queries`` stage, docs/judge-rules.md "Method") ------------------------------
# a written query's typical length, for labelling requests priced before queries.jsonl exists
_TYPICAL_QUERY = "a photo of the query's subject in its setting, with two distinctive details"
_TYPICAL_NARRATIVE = ("A relevant image shows the query's subject as its main content, clearly visible; an image "
                      "that shows it only as a background detail is not relevant.")


def _with_query_texts(plan, results: Path, columns):
    """The plan with each query's text and narrative: queries.jsonl's once written, else typical ones."""
    import polars as pl

    q = results / "queries.jsonl"
    if q.exists():
        from .judge import with_queries

        return with_queries(plan, str(q), columns)
    return plan.with_columns(pl.lit(_TYPICAL_QUERY).alias("query_text"), pl.lit(_TYPICAL_NARRATIVE).alias("narrative"))


def _typical_image(image_id: str):
    """An image of typical size as a request part (priced, never read: estimates make no request)."""
    import hashlib

    from .providers.spec import ImageRef

    return ImageRef(sha256=hashlib.sha256(image_id.encode()).hexdigest(), width=1024, height=768)


def _queries_line(cfg: Mapping[str, Any], fm, results: Path, cache_root: str) -> dict:
    """The query writer (``queries`` stage), on the judge's adapter: one request per planned query that
    ``paths.judge_reuse_file`` does not fully label, each with its seeds' pixels at low detail and
    their annotation rows. From the real plan, annotations and images once they exist (the exact
    requests and cache keys), else ``paths.pools_file`` or the plan settings with typical rows."""
    from .losses import Losses
    from .providers.settings import query_settings
    from .queries.openai import query_items, writer_settings
    from .queries.prompts import query_spec

    ad = cfg["judge"]["adapter"]
    st = _Stage("queries", ad, writer_settings(query_settings(cfg["queries"], cfg["judge"])),
                f"{cache_root}/queries")
    reuse, labels = cfg["paths"].get("judge_reuse_file"), cfg["judge"]["labels"]
    files = [results / f for f in ("query_plan.jsonl", "annotations.jsonl", "images.jsonl")]
    if all(p.exists() for p in files):
        from .queries import to_write

        _, _, todo, imported, ann, imgs = to_write(*map(str, files), cfg["columns"], cfg["facets"], reuse, labels)
        for it in query_items(todo, ann, imgs, fm, st.s, cfg["paths"]["image_root"], Losses("queries")):
            st.add(it.spec)
        return st.line() | {"source": "query_plan.jsonl + annotations.jsonl + images.jsonl", "reused": imported.height}
    pools_file = cfg["paths"].get("pools_file")
    if pools_file:
        rows = [(q, n_seed) for q, _ids, n_seed in _pools_file_rows(pools_file, cfg["columns"])]
        done: set[str] = set()
        if reuse:
            from .reuse import read_reuse_file, reusable

            pools = ((q, ids) for q, ids, _ in _pools_file_rows(pools_file, cfg["columns"]))
            done = set(reusable(read_reuse_file(reuse, cfg["columns"]), pools, 3 if labels == "graded" else 1)[0])
        todo = [(q, n) for q, n in rows if q not in done]
        source = f"paths.pools_file ({len(rows)} queries, typical annotation rows)"
    else:
        n_seed = int(cfg["plan"]["seeds_per_query"])
        todo = [(f"q{q}", n_seed) for q in range(int(cfg["plan"]["num_seeds"]))]
        rows, source = todo, f"plan settings ({len(todo)} queries x {n_seed} seed(s), typical annotation rows)"
    for k, (qid, n_seed) in enumerate(todo):
        seeds = [_typical_row(fm, k * 100 + j) for j in range(max(1, n_seed))]
        st.add(query_spec(seed_rows=seeds, seed_images=[_typical_image(f"{qid}/{r['image_id']}") for r in seeds],
                          meta_row={}, fm=fm, settings=st.s), check_cache=False)
    return st.line() | {"source": source, "reused": len(rows) - len(todo)}


def _labelling_modes(cfg: Mapping[str, Any], fm, results: Path, s: Mapping[str, Any]) -> dict:
    """The judge's requests priced in both labelling modes (``send_thumbnails``: text-only, or with
    each candidate's image at the judge's ``image_detail``), whatever the cache holds: what labelling
    with images would add (docs/judge-rules.md, "Method")."""
    out = {}
    for mode, images in (("text_only", False), ("with_images", True)):
        st = _Stage("judge", cfg["judge"]["adapter"], {**s, "send_thumbnails": images}, None)
        specs, _, _ = _judge_specs(cfg, fm, st.s, results)
        for spec, n in specs:
            st.add(spec, n, check_cache=False)
        ln = st.line()
        out[mode] = {k: ln[k] for k in ("requests", "input_tokens", "cached_input_tokens", "output_tokens", "usd")}
    return out

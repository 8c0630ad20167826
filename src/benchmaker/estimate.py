"""``benchmaker estimate``: requests, tokens and dollars still to pay, before or during a run
(docs/openai.md, "Estimate").

What it counts, per paid stage (:data:`PAID`, one entry per stage of :data:`benchmaker.stages.STAGES`
that has a cost file):

* **only what will be sent**: the images preprocessing accepts (the same inspection that preprocess
  runs decides, so files it will quarantine are not counted; ``images.jsonl`` when the image folder
  has not changed since it was written);
* **each distinct request content once** (byte-identical images share an answer, as in the run);
* **minus the response cache**: requests whose content key is already answered cost nothing (after a
  partial run or an edit, only what changed is priced). Keys are the provider's own;
* **the queries the run will plan**: once the vision answers of every image are known (in the
  response cache), the planner's own code (:func:`benchmaker.plan.plan_frames`) plans them with the
  current ``plan`` settings, so the judge's requests are the run's, after a plan edit, an image change
  or a prompt change too; before that, the ``plan`` quotas (or ``paths.pools_file``'s pools) with
  annotation rows already answered (else rows of typical length), the pools between what the
  planner's padding of negatives guarantees and the quotas (:func:`_quota_pools`);
* **the query writer** (``queries``, on the judge's adapter): one request per planned query that
  ``paths.judge_reuse_file`` does not fully label, with its seeds' pixels at low detail and their
  annotation rows; the judge's requests carry the written query texts (from the writer's response
  cache; a typical text for a query not written yet) and its line also gives its price in both
  labelling modes, text-only and with each candidate's image (``labelling_modes``);
* **prompt caching**: the stable prefix of a request (schema + system prompt, when it reaches 1,024
  tokens) at the cached-input rate for every request after the first, as the provider bills.

Tokens: ~4 characters per text token, each provider's image rule; output = a schema-shaped answer of
typical size plus reasoning. Before any answer of the stage is cached, the reasoning is not known:
the estimate is a **range** (``low_usd`` .. ``high_usd``) whose assumptions are :data:`RANGE` and
``assumes`` says; ``usd`` is the allowance's figure (:data:`~benchmaker.providers.tokens.REASONING_OUTPUT`).
Once at least :data:`CALIBRATE_MIN` answers of the stage's current requests are cached, what they
were billed (input, output, reasoning) replaces the guesses and the range is their 95 % interval.

**Pilot** (``benchmaker estimate --pilot [N]``, :func:`run_pilot`): sends a stratified sample (by
request size) of each stage's real requests still to send, at least ``N`` (default
:data:`PILOT_MIN`) or :data:`PILOT_SHARE` of them, through the stage's own runner and response cache,
so the run reuses every answer; their cost rows go to ``estimate/pilot_costs.jsonl`` (the summary
counts them). ``--record`` (implied by ``--pilot``) writes the estimate to ``estimate/estimate.json``
(docs/formats.md ``estimate``), which the summary shows beside the bill.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
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
from .stages import ESTIMATE_FILE, PILOT_COSTS_FILE, STAGES

__all__ = ["API_ADAPTERS", "PAID", "NOT_ESTIMATED", "REASONING_OUTPUT", "RANGE", "estimate", "out_tokens",
           "run_pilot", "record", "append_pilot_costs", "ESTIMATE_FILE", "PILOT_COSTS_FILE"]

API_ADAPTERS = ("openai", "gemini")
CACHE_MIN, CACHE_STEP = 1024, 128
# with at least CALIBRATE_MIN cached answers of the stage's current requests, what they were billed (at
# most CALIBRATE_MAX read) replaces the guesses
CALIBRATE_MIN, CALIBRATE_MAX = 5, 400
# a pilot sends at least PILOT_MIN requests per stage, or PILOT_SHARE of them if that is more
PILOT_MIN, PILOT_SHARE = 20, 0.02
# before any answer is measured: the range's assumptions, as factors of the point estimate's parts.
# input: the 4-characters-per-token rule (measured within -1 %..+6 % of the providers' counts, docs/openai.md);
# answer: a model's answers are 0.75..1.3x the schema's typical size; reasoning: 0.1..1.25x the allowance
# for the request's reasoning_effort (the one published run reasoned 1.04x; models seen at 0.17..0.75x,
# the low end: the judge's labelling-only answers at low effort, ~80 tokens of an allowance of 450)
RANGE = {"input": (0.97, 1.08), "answer": (0.80, 1.90), "reasoning": (0.17, 1.10)}
# a measured factor's range is at least +-MEASURED_FLOOR of it
MEASURED_FLOOR = 0.10


def _prefix_tokens(spec) -> int:
    from .providers.spec import _schema_memo

    return (len(_schema_memo(spec.schema)[1]) + len(spec.system)) // 4


def _t95(n: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, max(1, n - 1)))


def _mean_ci(xs: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean of ``xs`` and its 95 % t interval."""
    import statistics

    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, m, m
    h = _t95(len(xs)) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - h, m + h


class _Stage:
    """Accumulates one stage's requests: distinct keys, cache hits, input / cached / output tokens, and
    the real requests still to send (``pending``: what a pilot samples)."""

    def __init__(self, stage: str, adapter: str, settings: Mapping[str, Any], cache_dir: str | None,
                 *, item_type: str = "x"):
        from .providers.runners import provider_runner

        self.stage, self.adapter, self.cache_dir, self.item_type = stage, adapter, cache_dir, item_type
        self.runner = provider_runner(adapter, stage=stage, item_type=item_type, settings=dict(settings),
                                      cache_dir=cache_dir)
        self.s = self.runner.settings
        self.items = self.cached = self.duplicates = self.requests = 0
        self.tok_in = self.tok_cached = self.tok_out = self.tok_answer = 0
        self.tok_fixed = 0         # input tokens that do not grow with a pool (see pool_fill)
        self._seen: set[str] = set()
        self._prefixes: set[str] = set()
        # per cached answer: (its answer's tokens, the schema's guess for it, reasoning tokens billed,
        # input tokens billed, the input estimate of its request)
        self._billed: list[tuple[int, int, int, int, int]] = []
        self.pending: list[tuple[int, Any]] = []     # (input tokens, item) of real requests to send
        # share of the priced pools' candidates the run may send; None: the real pools (nothing assumed)
        self.pool_fill: tuple[float, float] | None = None
        self.assumes: list[str] = []

    def add(self, spec, n_judgments: int = 0, *, check_cache: bool = True, item=None, fixed=None) -> None:
        """One request; ``item``: the real item (a pilot may send it); ``fixed``: the same request
        without its pools' candidates (the part of its input that ``pool_fill`` does not scale).
        ``check_cache=False``: a stand-in for a request not known yet (typical rows): neither looked up
        in the cache nor merged with an identical stand-in."""
        from .providers.spec import estimate_input_tokens

        self.items += 1
        key = self.runner.request_key(spec)
        if check_cache and key in self._seen:
            self.duplicates += 1
            return
        self._seen.add(key)
        n_in = estimate_input_tokens(spec, self.runner.llm, provider=self.adapter)
        if check_cache and self.runner.cache.contains(key):
            self.cached += 1
            if len(self._billed) < CALIBRATE_MAX:
                self._calibrate(self.runner.cache.get(key) or {}, spec, n_judgments, n_in)
            return
        self.requests += 1
        self.tok_in += n_in
        self.tok_fixed += n_in if fixed is None else estimate_input_tokens(fixed, self.runner.llm,
                                                                           provider=self.adapter)
        if item is not None:
            item.key = key
            self.pending.append((n_in, item))
        pre = _prefix_tokens(spec)
        pkey = f"{spec.system}\x00{id(spec.schema)}"
        if n_in >= CACHE_MIN and pre >= CACHE_MIN:
            if pkey in self._prefixes:
                # OpenAI caches in steps of 128 tokens; Gemini's implicit cache has no documented step
                step = CACHE_STEP if self.adapter == "openai" else 1
                self.tok_cached += (min(pre, n_in) // step) * step
            self._prefixes.add(pkey)
        self.tok_answer += answer_tokens(spec.schema, n_judgments)

    def _calibrate(self, rec: Mapping[str, Any], spec, n_judgments: int, n_in: int) -> None:
        """What a cached answer says about this model: its visible answer's size against the schema's
        guess, the reasoning tokens it was billed (``reasoning_tokens``, else output - answer) and its
        billed input against the input rule."""
        u = rec.get("usage") or {}
        n_out = int(u.get("output_tokens") or 0)
        obj = rec.get("answer")
        if not n_out or not isinstance(obj, dict):
            return
        shown = text_tokens(answer_text(obj))
        n_j = len(obj["judgments"]) if isinstance(obj.get("judgments"), list) else n_judgments
        reasoning = int(u.get("reasoning_tokens") or 0) or max(0, n_out - shown)
        billed_in = int(u.get("input_tokens") or 0) or n_in
        self._billed.append((shown, answer_tokens(spec.schema, n_j), reasoning, billed_in, n_in))

    def _usd(self, tok_in: float, tok_cached: float, tok_out: float) -> float:
        return cost_usd(Usage(round(tok_in), round(min(tok_cached, tok_in)), round(tok_out), 0), self.runner.price,
                        batch=self.s["mode"] == "batch", batch_discount=float(self.s["batch_discount"]))

    def _measured(self) -> tuple[dict, str, list[str]]:
        """Point, low and high factors (input scale, answer scale, reasoning per request) from the
        cached answers: the ratio of their sums, widened by the 95 % interval of the per-answer mean."""
        b = self._billed
        n = len(b)

        def factor(num: list[float], den: list[float]) -> tuple[float, float, float]:
            point = sum(num) / max(1.0, sum(den))
            m, lo, hi = _mean_ci([x / max(1.0, d) for x, d in zip(num, den)])
            return point, max(0.0, point - (m - lo)), point + (hi - m)

        f = {"input": factor([x[3] for x in b], [x[4] for x in b]),
             "answer": factor([x[0] for x in b], [x[1] for x in b]),
             "reasoning": factor([x[2] for x in b], [1.0] * n)}
        # never narrower than MEASURED_FLOOR around the point: the rules that carry the measured
        # factors to other requests (the schema's guess, the token rule) err by a few per cent too
        f = {k: (p, min(lo, p * (1 - MEASURED_FLOOR)), max(hi, p * (1 + MEASURED_FLOOR)))
             for k, (p, lo, hi) in f.items()}
        source = (f"measured on {n} cached answers: input x{f['input'][0]:.2f} of the token rule, answer size "
                  f"x{f['answer'][0]:.2f} of the schema's guess, {f['reasoning'][0]:.0f} reasoning tokens per answer")
        assumes = [f"the requests still to send are like the {n} answered ones (95 % intervals of their means: "
                   f"input x{f['input'][1]:.2f}..{f['input'][2]:.2f}, answer x{f['answer'][1]:.2f}.."
                   f"{f['answer'][2]:.2f}, reasoning {f['reasoning'][1]:.0f}..{f['reasoning'][2]:.0f} tokens)"]
        return f, source, assumes

    def _assumed(self) -> tuple[dict, str, list[str]]:
        allowance = reasoning_allowance(self.s)
        r = RANGE["reasoning"]
        f = {"input": (1.0, *RANGE["input"]), "answer": (1.0, *RANGE["answer"]),
             "reasoning": (float(allowance), allowance * r[0], allowance * r[1])}
        effort = self.s.get("reasoning_effort")
        source = (f"answer schema + reasoning allowance of {allowance} tokens for reasoning_effort {effort!s} "
                  "(assumed: the main uncertainty until answers are cached; `--pilot` measures it)")
        assumes = [f"input tokens x{RANGE['input'][0]}..{RANGE['input'][1]} of the 4-characters rule",
                   f"answers x{RANGE['answer'][0]}..{RANGE['answer'][1]} of the schema's typical size",
                   f"reasoning {f['reasoning'][1]:.0f}..{f['reasoning'][2]:.0f} tokens per request "
                   f"({r[0]}..{r[1]}x the allowance of {allowance} for reasoning_effort {effort!s})"]
        return f, source, assumes

    def line(self) -> dict:
        price = self.runner.price
        calibrated = len(self._billed) >= CALIBRATE_MIN
        f, source, assumes = self._measured() if calibrated else self._assumed()
        lo_p, hi_p = self.pool_fill or (1.0, 1.0)
        if self.pool_fill is not None:
            assumes = [*assumes, f"the planner plans {lo_p:.0%}..{hi_p:.0%} of the candidates priced (at least the "
                                 "negatives it pads from any image; no corpus of near-copies of the seeds)"]

        def figure(k: int, pools: float) -> tuple[float, float, float, float, float]:
            tin = (self.tok_fixed + (self.tok_in - self.tok_fixed) * pools) * f["input"][k]
            cached = self.tok_cached * f["input"][k]
            answer = self.tok_answer * f["answer"][k] * pools
            reasoning = self.requests * f["reasoning"][k]
            return tin, cached, answer, reasoning, self._usd(tin, cached, answer + reasoning)

        tin, cached, answer, reasoning, usd = figure(0, hi_p)
        low, high = figure(1, lo_p)[4], figure(2, hi_p)[4]
        self.tok_out = round(answer + reasoning)
        pilot = self._next_pilot(usd, low, high)
        return {"stage": self.stage, "model": self.runner.llm.model, "mode": self.s["mode"],
                "items": self.items, "requests": self.requests, "cached": self.cached,
                "duplicates": self.duplicates, "input_tokens": round(tin), "cached_input_tokens": round(cached),
                "output_tokens": self.tok_out, "answer_tokens": round(answer),
                "reasoning_tokens": round(reasoning), "output_from": source, "calibrated_on": len(self._billed),
                "usd": round(usd, 6), "low_usd": round(low, 6), "high_usd": round(high, 6),
                "assumes": assumes + self.assumes, "price_known": price.known, "next_pilot": pilot}

    def _next_pilot(self, usd: float, low: float, high: float) -> dict:
        """What ``--pilot`` (of :data:`PILOT_MIN`) would send of this stage now (:func:`pilot_size`; none
        before the stage's real requests are known) and cost: its share of the figures, at the sync price
        whatever the mode (a pilot answers now), so in batch mode ``over_batch_usd`` more than the run would
        pay for the same requests in its batch (they are then cached, not sent again)."""
        k = pilot_size(self, PILOT_MIN)
        share = k / max(1, self.requests)
        disc = float(self.s["batch_discount"]) if self.s["mode"] == "batch" else 0.0
        sync = 1.0 / (1.0 - disc) if disc < 1.0 else 1.0
        return {"requests": k, "usd": round(usd * share * sync, 6), "low_usd": round(low * share * sync, 6),
                "high_usd": round(high * share * sync, 6), "over_batch_usd": round(usd * share * (sync - 1.0), 6)}


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
    from .formats import read_table
    from .preprocess.scan import Candidate, scan
    from .settings_schema import filled

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

    from .formats import read_table

    p = results / "images.jsonl"
    if p.exists() and not _corpus_changed(cfg, results, p):
        q = results / "quarantine.jsonl"
        nq = 0
        if q.exists():
            with open(q, encoding="utf-8") as fh:
                nq = sum(1 for ln in fh if ln.strip())
        return read_table("images", p, columns=cfg["columns"]), "images.jsonl", nq
    from .preprocess.metadata import load_metadata, merge_metadata
    from .preprocess.rights import load_rights_map
    from .preprocess.stage import _IMAGE_COLUMNS, _image_url, inspect_corpus
    from .settings_schema import filled

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

    from .formats import read_table
    from .providers.parse import validate_answer
    from .vision.openai import answers_to_frame, vision_items

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
    from .losses import Losses
    from .plan import plan_frames

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
    from .judge.openai import judge_items
    from .losses import Losses
    from .reuse import split_reused

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


def _typical_judge_requests(ctx: Context, s: Mapping[str, Any], ann) -> JudgeRequests:
    """Before the queries can be planned: the pools file's pools, else the ``plan`` quotas, with the
    annotation rows already answered (cycled), else rows of typical length."""
    from .judge.prompts import candidate_keys, judge_spec
    from .reuse import read_reuse_file, reusable

    cfg, fm = ctx.cfg, ctx.fm
    rows_known = list(ann.iter_rows(named=True)) if ann is not None else []
    reuse_path = cfg["paths"].get("judge_reuse_file")
    graded = s.get("labels") == "graded"
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

    pools_file = cfg["paths"].get("pools_file")
    if pools_file:
        rows = _pools_file_rows(pools_file, cfg["columns"])
        done: set[str] = set()
        if reuse_path:
            done = set(reusable(read_reuse_file(reuse_path, cfg["columns"]), ((q, ids) for q, ids, _ in rows),
                                3 if graded else 1)[0])
        todo = [r for r in rows if r[0] not in done]
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
    from .settings_schema import filled

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

    from .providers.spec import ImageRef

    return ImageRef(sha256=hashlib.sha256(image_id.encode()).hexdigest(), width=1024, height=768)


def _queries_stage(ctx: Context) -> _Stage | None:
    """The query writer's accumulator: on the judge's adapter (None when that is offline)."""
    from .providers.settings import query_settings
    from .queries.openai import writer_settings

    ad = ctx.cfg["judge"]["adapter"]
    if ad not in API_ADAPTERS:
        return None
    return _Stage("queries", ad, writer_settings(query_settings(ctx.cfg["queries"], ctx.cfg["judge"])),
                  f"{ctx.cache_root}/queries", item_type="query")


def _to_write(ctx: Context, ann):
    """(the planner's plan, its queries the writer will write: those ``paths.judge_reuse_file`` does not
    fully label), as :func:`benchmaker.queries.to_write` splits them."""
    from .reuse import split_reused

    if "plan" not in ctx.memo:
        ctx.memo["plan"] = _planned(ctx, ann)
    plan = ctx.memo["plan"]
    cfg = ctx.cfg
    todo = split_reused(plan, cfg["paths"].get("judge_reuse_file"), graded=cfg["judge"]["labels"] == "graded",
                        columns=cfg["columns"])[0]
    return plan, todo


def _query_items(ctx: Context, st: _Stage, ann):
    from .losses import Losses
    from .queries.openai import query_items

    plan, todo = _to_write(ctx, ann)
    return plan, todo, query_items(todo, ann, ctx.images()[0], ctx.fm, st.s, ctx.cfg["paths"]["image_root"],
                                   Losses("queries"))


def _written(ctx: Context) -> dict[str, tuple[str, str]]:
    """query id -> (query text, narrative) the writer has answered (its response cache): exactly the
    texts the run will write for them, as :func:`_annotations` reads vision's answers."""
    if "queries" in ctx.memo:
        return ctx.memo["queries"]
    from .providers.parse import validate_answer

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


def _estimate_queries(ctx: Context) -> list[tuple[_Stage, dict]]:
    """The query writer (``queries`` stage): one request per planned query that ``paths.judge_reuse_file``
    does not fully label, each with its seeds' pixels at low detail and their annotation rows. The
    planner's plan once every image's annotation is known (the exact requests and cache keys), else
    stand-ins from ``paths.pools_file`` or the plan quotas with typical rows."""
    from .queries.prompts import query_spec

    st = _queries_stage(ctx)
    if st is None:
        return []
    ann, complete = _annotations(ctx)
    if complete:
        plan, todo, items = _query_items(ctx, st, ann)
        for it in items:
            st.add(it.spec, item=it)
        return [(st, {"source": f"the planner's plan ({plan.height} queries) over the annotations the run will "
                                "have", "reused": plan.height - todo.height})]
    cfg, reuse = ctx.cfg, ctx.cfg["paths"].get("judge_reuse_file")
    pools_file = cfg["paths"].get("pools_file")
    if pools_file:
        rows = _pools_file_rows(pools_file, cfg["columns"])
        done: set[str] = set()
        if reuse:
            from .reuse import read_reuse_file, reusable

            done = set(reusable(read_reuse_file(reuse, cfg["columns"]), ((q, ids) for q, ids, _ in rows),
                                3 if cfg["judge"]["labels"] == "graded" else 1)[0])
        todo = [(q, n) for q, _ids, n in rows if q not in done]
        n_all, source = len(rows), f"paths.pools_file ({len(rows)} queries, typical annotation rows)"
    else:
        n_q, n_seed, _per, why, _low = _quota_pools(ctx)
        todo = [(f"q{q}", n_seed) for q in range(n_q)]
        n_all, source = n_q, f"plan quotas ({n_q} queries x {n_seed} seed(s){why}, typical annotation rows)"
    for k, (qid, n_seed) in enumerate(todo):
        seeds = [_typical_row(ctx.fm, k * 100 + j) for j in range(max(1, n_seed))]
        st.add(query_spec(seed_rows=seeds, seed_images=[_typical_image(f"{qid}/{r['image_id']}") for r in seeds],
                          meta_row={}, fm=ctx.fm, settings=st.s), check_cache=False)
    return [(st, {"source": source, "reused": n_all - len(todo)})]


def _labelling_modes(ctx: Context, s: Mapping[str, Any]) -> dict:
    """The judge's requests priced in both labelling modes (``send_thumbnails``: text-only, or with
    each candidate's image at the judge's ``image_detail``), whatever the cache holds: what labelling
    with images would add (docs/judge-rules.md, "Method")."""
    out = {}
    for mode, images in (("text_only", False), ("with_images", True)):
        st = _Stage("judge", ctx.cfg["judge"]["adapter"], {**s, "send_thumbnails": images}, None, item_type="query")
        req = judge_requests(ctx, st.s)
        st.pool_fill = req.pool_fill
        for spec, n, _item, fixed in req.specs:
            st.add(spec, n, check_cache=False, fixed=fixed)
        ln = st.line()
        out[mode] = {k: ln[k] for k in ("requests", "input_tokens", "cached_input_tokens", "output_tokens", "usd")}
    return out


def _judge_settings(judge: Mapping[str, Any]) -> tuple[str, dict]:
    ad = judge["adapter"]
    return ad, {**judge.get(ad, {}), "labels": judge["labels"], "rationale": judge["rationale"]}


# -- the paid stages: one entry each (benchmaker.stages.STAGES names) ------------------------------------
def _estimate_vision(ctx: Context) -> list[tuple[_Stage, dict]]:
    from .vision.openai import vision_items

    st = _vision_stage(ctx)
    if st is None:
        return []
    imgs, source, n_quar = ctx.images()
    for it in vision_items(imgs, ctx.fm, st.s, ctx.cfg["paths"]["image_root"]):
        st.add(it.spec, item=it)
    return [(st, {"source": source, "quarantined": n_quar})]


def _estimate_judge(ctx: Context) -> list[tuple[_Stage, dict]]:
    ad, s = _judge_settings(ctx.cfg["judge"])
    if ad not in API_ADAPTERS:
        return []
    st = _Stage("judge", ad, s, f"{ctx.cache_root}/judge", item_type="query")
    req = judge_requests(ctx, st.s)
    st.pool_fill = req.pool_fill
    for spec, n, item, fixed in req.specs:
        st.add(spec, n, check_cache=req.real, item=item, fixed=fixed)
    return [(st, {"source": req.source, "reused": req.reused, "labelling_modes": _labelling_modes(ctx, s)})]


def _estimate_deepen(ctx: Context) -> list[tuple[_Stage, dict]]:
    """Pool deepening: the same judge, cache and prices (docs/deepen.md), with its budgets checked."""
    dp = ctx.cfg.get("deepen") or {}
    ad, s = _judge_settings(ctx.cfg["judge"])
    if not dp.get("enabled") or ad not in API_ADAPTERS:
        return []
    from .deepen.label import estimate_specs

    st = _Stage("deepen", ad, s, f"{ctx.cache_root}/judge", item_type="query")
    specs, source, pairs, real = estimate_specs(ctx.cfg, ctx.fm, st.s, ctx.results)
    for spec, n in specs:
        st.add(spec, n, check_cache=real)
    usd = st.line()["usd"]
    ok = ((dp.get("max_pairs") is None or pairs <= dp["max_pairs"])
          and (dp.get("max_usd") is None or usd <= dp["max_usd"]))
    return [(st, {"source": source, "pairs": pairs, "max_pairs": dp.get("max_pairs"), "max_usd": dp.get("max_usd"),
                  "within_budget": ok})]


def _estimate_second_judge(ctx: Context) -> list[tuple[_Stage, dict]]:
    """The audit's second judge (``audit.second_judge``), when it is an API judge: priced like the
    judge, on the audit sample's pairs (scope ``sample``: the real sample once drawn, else
    ``audit.sample_size`` pairs) or on every query (scope ``all``), with its own response cache."""
    from .settings_schema import filled

    cfg = ctx.cfg
    audit = filled("audit", cfg.get("audit"))
    sj = audit.get("second_judge") or {}
    if not audit.get("enabled") or sj.get("judge") is None:
        return []
    from .config import deep_merge, validate_config

    judge = validate_config(deep_merge({k: v for k, v in cfg.items() if not str(k).startswith("_")},
                                       {"judge": sj["judge"]}))["judge"]
    ad, s = _judge_settings(judge)
    if ad not in API_ADAPTERS:
        return []
    st = _Stage("audit_judge2", ad, {**s, "mode": "sync"}, f"{ctx.cache_root}/judge-audit/{sj['name']}",
                item_type="query")
    req = judge_requests(ctx, st.s)
    st.pool_fill = req.pool_fill
    sample_p = ctx.results / "audit" / "sample.jsonl"
    if sj["scope"] != "sample":
        for spec, n, item, fixed in req.specs:
            st.add(spec, n, check_cache=req.real, item=item, fixed=fixed)
        return [(st, {"source": req.source, "reused": 0})]
    if req.real and sample_p.exists():
        from .audit.files import read_sample
        from .audit.judge2 import restrict_plan
        from .judge.openai import judge_items
        from .losses import Losses

        plan, written = _with_written_queries(ctx, restrict_plan(ctx.memo["plan"], read_sample(str(sample_p))))
        for it, keys in judge_items(plan, _annotations(ctx)[0], ctx.images()[0], ctx.fm, st.s,
                                    cfg["paths"]["image_root"], Losses("judge")):
            st.add(it.spec, len(keys), item=it if it.item_id in written else None)
        return [(st, {"source": "audit/sample.jsonl (the sampled pairs)", "reused": 0})]
    # before the sample: audit.sample_size pairs, spread over queries as the judge's pools are
    budget = int(audit["sample_size"])
    for spec, n, _item, _fixed in req.specs:
        if budget <= 0:
            break
        take = min(n, budget)
        st.add(spec, take, check_cache=False)
        budget -= take
    return [(st, {"source": f"audit.sample_size ({audit['sample_size']} pairs) over {req.source}", "reused": 0})]


# stage (benchmaker.stages.STAGES) -> its estimate: the (accumulated stage, extra line fields) it prices.
# A paid stage plugs in here: build its requests as the run does (its own items function) and add each to
# a _Stage with its item (``item=``: what a pilot sends); a stage with a cost file that is not priced is
# in NOT_ESTIMATED: its declaration says why (``Stage(not_estimated=...)``; tests/test_estimate_bill.py checks
# that every one is in one of the two).
PAID: dict[str, Callable[[Context], list[tuple[_Stage, dict]]]] = {
    "vision": _estimate_vision,
    "queries": _estimate_queries,       # before the judge: its pilot's texts are the judge's queries
    "judge": _estimate_judge,
    "deepen_system": _estimate_deepen,
    "audit_judge2": _estimate_second_judge,
}
NOT_ESTIMATED = {name: st.not_estimated for name, st in STAGES.items() if st.not_estimated}


def _context(cfg: Mapping[str, Any]) -> Context:
    from .config import results_dir
    from .formats import FacetModel

    return Context(cfg, FacetModel.from_config(cfg["facets"]), Path(results_dir(cfg)),
                   f"{cfg['paths']['results']}/.cache")


def estimate(cfg: Mapping[str, Any], *, pilot: int | None = None,
             on_pilot: Callable[[list[dict]], None] | None = None) -> list[dict]:
    """One line per paid stage: items, distinct requests still to send, cache hits, duplicates, tokens,
    USD (``usd`` and the range ``low_usd`` .. ``high_usd``). ``pilot``: first send a pilot of at least
    that many of each stage's real requests (:func:`run_pilot`), stage by stage (the judge's requests
    are known once vision's answers are); ``on_pilot`` gets each pilot's cost rows as they are paid."""
    ctx = _context(cfg)
    lines = []
    for fn in PAID.values():
        got = fn(ctx)
        if pilot is not None and any(st.pending for st, _ in got):
            spent = []
            for st, _ in got:
                rows = run_pilot(st, pilot)
                spent += rows
                if on_pilot is not None and rows:
                    on_pilot(rows)
            for k in ("annotations", "plan", "queries"):   # what the pilot answered is known now
                ctx.memo.pop(k, None)
            got = fn(ctx)
            for st, extra in got:
                extra["pilot"] = _spent([r for r in spent if r["stage"] == st.stage])
                # sent sync: in batch mode, the batch discount on these requests is what the pilot costs extra
                disc = float(st.s["batch_discount"]) if st.s["mode"] == "batch" else 0.0
                extra["pilot"]["over_batch_usd"] = round(extra["pilot"]["usd"] * disc, 10)
        for st, extra in got:
            ln = st.line() | extra
            paid = (ln.get("pilot") or {}).get("usd", 0.0)
            # the stage's whole figure: what this pilot paid and what is still to send
            ln["total_usd"], ln["total_low_usd"], ln["total_high_usd"] = (round(paid + ln[k], 6) for k in (
                "usd", "low_usd", "high_usd"))
            lines.append(ln)
    return lines


def _spent(rows: list[dict]) -> dict:
    return {"requests": sum(not r["cached"] for r in rows), "usd": round(sum(r["cost_usd"] for r in rows), 10),
            **{k: sum(r[k] for r in rows) for k in ("input_tokens", "cached_input_tokens", "output_tokens",
                                                     "reasoning_tokens")}}


def pilot_size(st: _Stage, n: int) -> int:
    """How many of the stage's requests a pilot of ``n`` sends: at least ``n`` (and PILOT_SHARE of the
    stage's requests), less what is already measured, at most what there is to send."""
    want = max(int(n), math.ceil(PILOT_SHARE * (st.requests + st.cached)))
    return max(0, min(len(st.pending), want - len(st._billed)))


def _stratified(pending: list[tuple[int, Any]], k: int) -> list[Any]:
    """``k`` items spread over the requests ordered by size (input tokens): the middle one of each of
    ``k`` equal strata, so small and large requests (few and many candidates, small and large images)
    are all measured."""
    if k <= 0:
        return []
    order = sorted(range(len(pending)), key=lambda i: (pending[i][0], pending[i][1].item_id))
    n = len(order)
    return [pending[order[min(n - 1, (2 * j + 1) * n // (2 * k))]][1] for j in range(k)]


def run_pilot(st: _Stage, n: int) -> list[dict]:
    """Send a stratified sample of the stage's real requests still to send (:func:`pilot_size`) through
    its own runner (sync, whatever the stage's mode: answers now) and response cache, so the run
    reuses every answer. Returns the pilot's cost rows (stage, tokens, USD at the sync price)."""
    from .logs import get_logger
    from .losses import Losses
    from .providers.runners import provider_runner

    sample = _stratified(st.pending, pilot_size(st, n))
    if not sample:
        return []
    runner = provider_runner(st.adapter, stage=st.stage, item_type=st.item_type,
                             settings={**dict(st.s), "mode": "sync"}, cache_dir=st.cache_dir)
    losses = Losses(st.stage)
    runner.run_sync(sample, losses)
    get_logger("estimate").info("pilot %s: sent %d of %d requests, USD %.6f; %d lost", st.stage, len(sample),
                                len(st.pending), sum(r["cost_usd"] for r in runner.cost_rows), len(losses))
    return list(runner.cost_rows)


# -- the recorded estimate (docs/formats.md ``estimate``) ----------------------------------------------
def _record_entry(ln: Mapping[str, Any]) -> dict:
    pilot = ln.get("pilot") or {}
    return {"model": ln["model"], "mode": ln["mode"], "requests": ln["requests"] + int(pilot.get("requests", 0)),
            "pilot_requests": int(pilot.get("requests", 0)), "usd": ln.get("total_usd", ln["usd"]),
            "low_usd": ln.get("total_low_usd", ln["low_usd"]), "high_usd": ln.get("total_high_usd", ln["high_usd"]),
            "pilot_usd": float(pilot.get("usd", 0.0)), "calibrated_on": ln["calibrated_on"],
            "output_from": ln["output_from"], "assumes": list(ln["assumes"]), "source": ln["source"]}


def record(cfg: Mapping[str, Any], lines: list[dict]) -> Path:
    """Write the estimate to ``<results>/estimate/estimate.json`` (what the summary shows beside the
    bill): per stage, what it still had to send plus what its pilot paid. A stage with nothing left to
    send and no pilot now keeps the figure recorded before (the estimate made while it had requests to
    price: after vision has run, ``--pilot`` for the judge keeps vision's estimate)."""
    import json

    from .config import results_dir
    from .estimate_file import read_estimate
    from .io import atomic_write_text

    p = Path(results_dir(cfg)) / ESTIMATE_FILE
    stages = read_estimate(p)["stages"] if p.exists() else {}
    for ln in lines:
        entry = _record_entry(ln)
        if entry["requests"] or ln["stage"] not in stages:
            stages[ln["stage"]] = entry
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(p, json.dumps({"version": 1, "stages": stages}, indent=1, sort_keys=True) + "\n")
    return p


def append_pilot_costs(cfg: Mapping[str, Any], rows: list[dict]) -> None:
    """Append a pilot's cost rows (kind ``costs``) to ``<results>/estimate/pilot_costs.jsonl``."""
    from .config import results_dir
    from .io import dumps

    p = Path(results_dir(cfg)) / PILOT_COSTS_FILE
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a", encoding="utf-8") as fh:
        fh.writelines(dumps(r) + "\n" for r in rows)
        fh.flush()


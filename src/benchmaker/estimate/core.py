"""The range / pilot core of ``benchmaker estimate`` (the package's doc): :class:`_Stage`, one paid
stage's requests, tokens and USD, its range before any answer is measured (:data:`RANGE`) and after
(:data:`CALIBRATE_MIN` cached answers); the pilot that sends a stratified sample of its requests."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..providers.cost import Usage, cost_usd
from ..providers.tokens import REASONING_OUTPUT, answer_text, answer_tokens, reasoning_allowance, text_tokens

API_ADAPTERS = ("openai", "gemini")
CACHE_MIN, CACHE_STEP = 1024, 128
# with at least CALIBRATE_MIN cached answers of the stage's current requests, what they were billed (at
# most CALIBRATE_MAX read) replaces the guesses
CALIBRATE_MIN, CALIBRATE_MAX = 5, 400
# a pilot sends at least PILOT_MIN requests per stage, or PILOT_SHARE of them if that is more
PILOT_MIN, PILOT_SHARE = 20, 0.02
# before any answer is measured: the range's assumptions, as factors of the point estimate's parts.
# input: the 4-characters-per-token rule (measured within -1 %..+6 % of the providers' counts, docs/openai.md);
# answer: a model's answers are 0.8..1.9x the schema's typical size (1.9: JSON written with spaces);
# reasoning, per reasoning_effort: a model whose mean is between the least and the most of the models
# seen at that effort (REASONING_SEEN), as factors of the allowance; an effort no model was seen at
# ("other"): the widest of those
RANGE: dict[str, Any] = {"input": (0.97, 1.08), "answer": (0.80, 1.90)}
# mean reasoning tokens per request of the models seen, (least, most), by reasoning_effort: issue 34's
# table (output per request minus its answer, billed by the fakes it was tried against: ~80 at low for
# images and labels, ~240 at medium for FireBench's judge) and upstream's one published run, the one
# real model measured (gpt-5-mini: 717 - ~250 per image at low; 1,481 - ~500 per 13-candidate query at
# medium). A model outside them is outside the range: the pilot measures it
REASONING_SEEN = {"low": (80, 467), "medium": (240, 981)}
# a stage's bill is n requests' draws, not n times the model's mean: the range adds RANGE_Z (a 90 %
# two-sided interval) standard errors of a per-request coefficient of variation REQUEST_CV (assumed;
# the pilot measures it): +-17 % for 8 requests, +-5 % for 100
REQUEST_CV, RANGE_Z = 0.3, 1.645


def _reasoning_bands() -> dict[str, tuple[float, float]]:
    bands = {e: (lo / REASONING_OUTPUT[e], hi / REASONING_OUTPUT[e]) for e, (lo, hi) in REASONING_SEEN.items()}
    bands["other"] = (min(b[0] for b in bands.values()), max(b[1] for b in bands.values()))
    return bands


RANGE["reasoning"] = _reasoning_bands()
# a measured factor's range is at least +-MEASURED_FLOOR of it
MEASURED_FLOOR = 0.10


def _prefix_tokens(spec) -> int:
    from ..providers.spec import _schema_memo

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
        from ..providers.runners import provider_runner

        self.stage, self.adapter, self.cache_dir, self.item_type = stage, adapter, cache_dir, item_type
        self.runner = provider_runner(adapter, stage=stage, item_type=item_type, settings=dict(settings),
                                      cache_dir=cache_dir)
        self.s = self.runner.settings
        self.items = self.cached = self.duplicates = self.requests = 0
        self.tok_in = self.tok_out = self.tok_answer = 0
        self.tok_fixed = 0         # input tokens that do not grow with a pool (see pool_fill)
        self._seen: set[str] = set()
        # per (system, schema): its tokens, the leading text all its requests share, their input tokens
        self._prefixes: dict[str, list] = {}
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
        from ..providers.spec import estimate_input_tokens

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
        if n_in >= CACHE_MIN:
            self._shares_prefix(spec, n_in)
        self.tok_answer += answer_tokens(spec.schema, n_judgments)

    def _shares_prefix(self, spec, n_in: int) -> None:
        """Note a request of at least CACHE_MIN tokens under its stable prefix: the schema, the system
        prompt and the leading text of its user message that every request of that prefix shares."""
        import os

        from ..providers.spec import Text

        lead = spec.parts[0].text if spec.parts and isinstance(spec.parts[0], Text) else ""
        p = self._prefixes.setdefault(f"{spec.system}\x00{id(spec.schema)}", [_prefix_tokens(spec), lead, []])
        p[1] = os.path.commonprefix([p[1], lead])
        p[2].append(n_in)

    @property
    def tok_cached(self) -> int:
        """Input tokens billed at the cached rate: each request's shared prefix (when it reaches
        CACHE_MIN tokens) after the first request with that prefix, as the provider caches it (OpenAI in
        steps of CACHE_STEP tokens; Gemini's implicit cache has no documented step)."""
        step = CACHE_STEP if self.adapter == "openai" else 1
        total = 0
        for pre, lead, sizes in self._prefixes.values():
            pre += len(lead) // 4
            if pre >= CACHE_MIN:
                total += sum((min(pre, n) // step) * step for n in sizes[1:])
        return total

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
        effort = self.s.get("reasoning_effort")
        r = RANGE["reasoning"].get(effort, RANGE["reasoning"]["other"])
        # n draws of a per-request spread REQUEST_CV: their sum within RANGE_Z standard errors of n means
        draws = RANGE_Z * REQUEST_CV / math.sqrt(max(1, self.requests))
        lo, hi = allowance * r[0] * max(0.0, 1 - draws), allowance * r[1] * (1 + draws)
        f = {"input": (1.0, *RANGE["input"]), "answer": (1.0, *RANGE["answer"]),
             "reasoning": (float(allowance), lo, hi)}
        seen = (f"the models seen at {effort}" if effort in REASONING_SEEN
                else f"the models seen at {' and '.join(REASONING_SEEN)} (none seen at {effort})")
        source = (f"answer schema + reasoning allowance of {allowance} tokens for reasoning_effort {effort!s} "
                  "(assumed: the main uncertainty until answers are cached; `--pilot` measures it)")
        assumes = [f"input tokens x{RANGE['input'][0]}..{RANGE['input'][1]} of the 4-characters rule",
                   f"answers x{RANGE['answer'][0]}..{RANGE['answer'][1]} of the schema's typical size"]
        if not allowance:
            return f, source, [*assumes, f"no reasoning (reasoning_effort {effort!s})"]
        assumes.append(f"reasoning {lo:.0f}..{hi:.0f} tokens per request: a model reasoning {r[0]:.2f}..{r[1]:.2f}x "
                       f"the allowance of {allowance} for reasoning_effort {effort!s} on average ({seen}), "
                       f"+-{draws:.0%} for {self.requests} requests varying {REQUEST_CV:.0%} each (90 %)")
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
    from ..logs import get_logger
    from ..losses import Losses
    from ..providers.runners import provider_runner

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

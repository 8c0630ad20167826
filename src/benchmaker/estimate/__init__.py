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
* **prompt caching**: the stable prefix of a request (schema + system prompt + the leading text of
  the user message that every request with that schema and system prompt shares, when it reaches
  1,024 tokens) at the cached-input rate for every request after the first, as the provider bills.

Tokens: ~4 characters per text token, each provider's image rule; output = a schema-shaped answer of
typical size plus reasoning. Before any answer of the stage is cached, the reasoning is not known:
the estimate is a **range** (``low_usd`` .. ``high_usd``) whose assumptions are :data:`RANGE` and
``assumes`` says: a model whose mean reasoning per request lies between the least and the most of the
models seen at the request's ``reasoning_effort`` (:data:`REASONING_SEEN`), and the spread of the
stage's n requests around n such means (:data:`REQUEST_CV`, a 90 % interval); ``usd`` is the
allowance's figure (:data:`~benchmaker.providers.tokens.REASONING_OUTPUT`). Once at least
:data:`CALIBRATE_MIN` answers of the stage's current requests are cached, what they were billed
(input, output, reasoning) replaces the guesses and the range is their 95 % interval.

**Pilot** (``benchmaker estimate --pilot [N]``, :func:`run_pilot`): sends a stratified sample (by
request size) of each stage's real requests still to send, at least ``N`` (default
:data:`PILOT_MIN`) or :data:`PILOT_SHARE` of them, through the stage's own runner and response cache,
so the run reuses every answer; their cost rows go to ``estimate/pilot_costs.jsonl`` (the summary
counts them). ``--record`` (implied by ``--pilot``) writes the estimate to ``estimate/estimate.json``
(docs/formats.md ``estimate``), which the summary shows beside the bill.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..providers.tokens import REASONING_OUTPUT, out_tokens
from ..stages import ESTIMATE_FILE, PILOT_COSTS_FILE
from .core import (
    API_ADAPTERS,
    CACHE_MIN,
    CACHE_STEP,
    CALIBRATE_MAX,
    CALIBRATE_MIN,
    MEASURED_FLOOR,
    PILOT_MIN,
    PILOT_SHARE,
    RANGE,
    RANGE_Z,
    REASONING_SEEN,
    REQUEST_CV,
    _spent,
    _Stage,
    pilot_size,
    run_pilot,
)
from .entries import NOT_ESTIMATED, PAID, not_priced
from .record import append_pilot_costs, record
from .requests import Context, JudgeRequests, _images, _quota_pools, judge_requests

__all__ = ["API_ADAPTERS", "PAID", "NOT_ESTIMATED", "REASONING_OUTPUT", "RANGE", "REASONING_SEEN", "REQUEST_CV",
           "RANGE_Z", "CACHE_MIN", "CACHE_STEP", "CALIBRATE_MIN", "CALIBRATE_MAX", "MEASURED_FLOOR", "PILOT_MIN",
           "PILOT_SHARE", "Context", "JudgeRequests", "judge_requests", "estimate", "not_priced", "out_tokens",
           "pilot_size",
           "run_pilot", "record", "append_pilot_costs", "ESTIMATE_FILE", "PILOT_COSTS_FILE", "_Stage", "_images",
           "_quota_pools", "_context"]


def _context(cfg: Mapping[str, Any]) -> Context:
    from ..config import results_dir
    from ..formats import FacetModel

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

"""The Batch API lifecycle as three idempotent steps: build → submit → collect.

* **build** streams the requests that the cache cannot answer into ``requests.jsonl`` (one Batch API
  line each, ``custom_id = <stage>-<index>-a<attempt>``) and writes ``manifest.jsonl`` (index, item id,
  content key, whether the cache answered it).
* **submit** splits the requests into chunk files (at most ``max_requests_per_batch`` lines and
  ``max_bytes_per_batch`` bytes; content-addressed by sha256, so a rerun produces the same chunks) and
  creates one batch per chunk. Before any API call it appends its *intent* to a journal
  (``<state_dir>/journal.jsonl``, fsynced); after each call it records the file / batch id. On a rerun
  a chunk with a recorded batch is reused; a chunk with an intent but no batch id is first looked up
  on the server by its metadata (``bm_chunk``) and its uploaded file by name, and only then created.
  So interrupting at any moment never submits a request twice. The batch ids go to the rule's output.
* **collect** polls until every batch is terminal (``wait: false``: checks once and stops with
  :class:`BatchPending`; run again later), downloads output and error files into the state dir,
  parses and validates every answer, and sends the failures (failed rows, incomplete answers,
  invalid JSON, schema violations, requests of failed / expired batches) again as new retry batches,
  round after round, up to ``max_attempts``. Terminal statuses: ``completed``; ``failed`` (all its
  requests failed: retried); ``expired`` (the partial output is kept, the rest retried);
  ``cancelled`` (the partial output is kept, the rest is lost with reason ``batch_cancelled``: a
  person cancelled it). Everything downloaded stays in the state dir, so a rerun of collect re-reads
  it instead of paying again.

Each step has its module: ``batch_build``, ``batch_submit`` and ``batch_collect`` (what it knows of
each item in ``batch_answers``, its waits in ``batch_wait``); :func:`run_batch` runs all three in one call.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

from ..losses import Losses
from ..settings_schema import LLM, default
from .batch_build import build_requests
from .batch_collect import collect_results
from .batch_submit import submit_requests
from .engine import Item, Runner

__all__ = ["run_batch"]


# -- all three in one call (library use, and adapters whose plain rule runs in batch mode) -------------
def run_batch(runner: Runner, items: Sequence[Item], losses: Losses, *, state_dir: str,
              wait: bool = default(f"{LLM}.wait"),
              poll_seconds: float = default(f"{LLM}.poll_seconds"), benchmark: str = "benchmaker") -> dict[str, dict]:
    """build -> submit -> collect for ``items`` in ``<state_dir>/<digest of their keys>``: the same
    items (a rerun) resume the same batches; returns item_id -> answer."""
    items = runner.keyed(list(items))
    h = hashlib.sha256()
    for it in items:
        h.update(it.key.encode() + b"\n")
    tag = f"{runner.stage}-{h.hexdigest()[:16]}"
    d = Path(state_dir) / tag
    d.mkdir(parents=True, exist_ok=True)
    req, man, sub = d / "requests.jsonl", d / "manifest.jsonl", d / "submitted.json"
    md = {"benchmaker": benchmark, "bm_stage": runner.stage, "bm_shard": tag}
    if not man.exists():
        build_requests(runner, items, requests=str(req), manifest=str(man))
    if not sub.exists():
        submit_requests(runner, requests=str(req), submitted=str(sub), state_dir=str(d), metadata=md)
    own = runner.ledger is None
    if own:                  # paid rows on record in the state dir: a re-read after a rerun is not paid twice
        from .ledger import CostLedger

        runner.ledger = CostLedger(d / "ledger.jsonl")
    try:
        return collect_results(runner, items, manifest=str(man), submitted=str(sub), state_dir=str(d),
                               losses=losses, metadata=md, wait=wait, poll_seconds=poll_seconds)
    finally:
        if own:
            led, runner.ledger = runner.ledger, None
            led.close()
            runner.cost_rows.extend({k: v for k, v in r.items() if k not in ("rid", "run")}
                                    for r in led.rows() if r.get("run") == led.run)

"""Fault injection against the fake OpenAI server, which bills every answered model call: identical
images, 429 / 5xx on every Batch API call, a connection dropped after billing, ``kill -9`` during a
sync run and during collect. Checked: no content paid twice (except what the provider billed without
answering), the cost files equal the fake's bill, no abort on transient errors, and a permanent
error stops with what to do."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from openai_helpers import SETTINGS, SYNC_COST, images_frame, write_images
from support import TINY_FACETS

from benchmaker.formats import FacetModel
from benchmaker.io import iter_jsonl
from benchmaker.losses import Losses
from benchmaker.providers.retry import (
    PermanentAPIError,
    RetryPolicy,
    TransientExhausted,
)
from benchmaker.vision import openai as vo
from benchmaker.vision import run as vision_run

FM = FacetModel.from_config(TINY_FACETS)
SRC = str(Path(__file__).resolve().parents[1] / "src")
FAST_RETRY = {"retry_base_delay": 0.01, "retry_max_delay": 0.05}


@pytest.fixture()
def dup_corpus(tmp_path, tiny_corpus) -> Path:
    """Four images, two of them byte-identical copies under different folders."""
    root = tmp_path / "dup"
    files = [p for p in sorted(tiny_corpus.rglob("*.jpg")) if "broken" not in p.parts][:3]
    for sub, src in (("people", files[0]), ("military", files[0]), ("a", files[1]), ("b", files[2])):
        (root / sub).mkdir(parents=True, exist_ok=True)
        shutil.copy(src, root / sub / "x.jpg")
    return root


def _costs(path) -> list[dict]:
    return list(iter_jsonl(path))


def _paid(costs: list[dict]) -> float:
    return sum(c["cost_usd"] for c in costs)


class Shard:
    def __init__(self, tmp: Path, corpus: Path, fake, **settings):
        self.corpus = corpus
        self.images = write_images(images_frame(corpus), tmp / "images.jsonl")
        self.settings = {**SETTINGS, **FAST_RETRY, "mode": "batch", "base_url": fake.base_url, **settings}
        self.p = {k: str(tmp / f"{k}.jsonl") for k in ("requests", "manifest", "annotations", "losses", "costs")}
        self.p["submitted"] = str(tmp / "submitted.json")
        self.state, self.cache = str(tmp / "state"), str(tmp / "cache")

    def kw(self) -> dict:
        return {"images": self.images, "manifest": self.p["manifest"], "submitted": self.p["submitted"],
                    "annotations": self.p["annotations"], "losses": self.p["losses"], "costs": self.p["costs"],
                    "settings": self.settings, "facets": TINY_FACETS, "image_root": str(self.corpus), "columns": {},
                    "state_dir": self.state, "benchmark": "tiny", "shard": "00000", "cache_dir": self.cache}

    def run(self) -> None:
        vo.build(images=self.images, requests=self.p["requests"], manifest=self.p["manifest"],
                 settings=self.settings, facets=TINY_FACETS, image_root=str(self.corpus), columns={},
                 cache_dir=self.cache, threads=2)
        vo.submit(requests=self.p["requests"], submitted=self.p["submitted"], settings=self.settings,
                  state_dir=self.state, benchmark="tiny", shard="00000")
        vo.collect(**self.kw())


def test_identical_images_sent_once_batch(fake, tmp_path, dup_corpus):
    sh = Shard(tmp_path, dup_corpus, fake)
    sh.run()
    reqs = Path(sh.p["requests"]).read_text().splitlines()
    assert len(reqs) == 3                                   # 4 images, 3 distinct contents
    ann = list(iter_jsonl(sh.p["annotations"]))
    assert sorted(a["image_id"] for a in ann) == ["a/x.jpg", "b/x.jpg", "military/x.jpg", "people/x.jpg"]
    by_id = {a["image_id"]: a for a in ann}
    assert by_id["people/x.jpg"]["summary"] == by_id["military/x.jpg"]["summary"]
    costs = _costs(sh.p["costs"])
    assert len(fake.bill) == 3 and len(costs) == 3          # the shared content is paid (and recorded) once
    assert _paid(costs) == pytest.approx(fake.billed_usd())


def test_identical_images_sent_once_sync(fake, tmp_path, dup_corpus):
    imgs = images_frame(dup_corpus)
    a = vo.OpenAIAnnotator(facets=FM, settings={**SETTINGS, "base_url": fake.base_url}, image_root=str(dup_corpus),
                           cache_dir=str(tmp_path / "cache"))
    loss = Losses("vision")
    ann = a.annotate(imgs, loss)
    assert ann.height == 4 and len(loss) == 0
    assert fake.count("POST", "/v1/responses") == 3
    assert len(a.costs) == 3 and _paid(a.costs) == pytest.approx(fake.billed_usd())


def test_transient_errors_on_every_batch_call_do_not_abort(fake, tmp_path, tiny_corpus):
    fake.faults = [("POST", "/v1/files", 500), ("POST", "/v1/files", 429), ("POST", "/v1/batches", 429),
                   ("POST", "/v1/batches", 503), ("GET", r"/v1/batches/[^/]+", 502),
                   ("GET", r"/v1/batches/[^/]+", 429), ("GET", r"/v1/files/[^/]+/content", 500),
                   ("GET", r"/v1/files/[^/]+/content", 504)]
    sh = Shard(tmp_path, tiny_corpus, fake)
    sh.run()
    assert fake.faults == []                                # every fault was hit, and survived
    assert len(fake.batches) == 1 and len(fake.files) == 2  # one upload, one batch (plus its output)
    assert len(list(iter_jsonl(sh.p["annotations"]))) == len(images_frame(tiny_corpus))
    assert list(iter_jsonl(sh.p["losses"])) == []
    assert _paid(_costs(sh.p["costs"])) == pytest.approx(fake.billed_usd())


def test_transient_errors_in_sync_mode(fake, tmp_path, tiny_corpus):
    fake.faults = [("POST", "/v1/responses", 500), ("POST", "/v1/responses", 503), ("POST", "/v1/responses", 429)]
    imgs = images_frame(tiny_corpus, 4)
    a = vo.OpenAIAnnotator(facets=FM, settings={**SETTINGS, **FAST_RETRY, "base_url": fake.base_url},
                           image_root=str(tiny_corpus), cache_dir=None)
    loss = Losses("vision")
    assert a.annotate(imgs, loss).height == 4 and len(loss) == 0
    assert {c["attempt"] for c in a.costs} == {1}          # transport retries are not attempts
    assert _paid(a.costs) == pytest.approx(fake.billed_usd())


def test_dropped_after_billing_is_the_only_double_payment(fake, tmp_path, tiny_corpus):
    fake.drop_after_billing = 1
    imgs = images_frame(tiny_corpus, 3)
    a = vo.OpenAIAnnotator(facets=FM, settings={**SETTINGS, **FAST_RETRY, "base_url": fake.base_url,
                                                "concurrency": 1},
                           image_root=str(tiny_corpus), cache_dir=None)
    loss = Losses("vision")
    assert a.annotate(imgs, loss).height == 3 and len(loss) == 0
    assert len(fake.bill) == 4                              # the dropped answer was billed, then sent again
    assert _paid(a.costs) == pytest.approx(fake.billed_usd() - fake.bill[0]["usd"])


def test_retry_policy_budget_and_permanent_errors():
    import openai

    try:  # the openai SDK's HTTP library (httpx2 since openai 3)
        import httpx2 as httpx
    except ImportError:
        import httpx

    req = httpx.Request("POST", "http://x/v1/batches")
    waits: list[float] = []
    pol = RetryPolicy(max_tries=50, base_delay=1.0, max_delay=8.0, budget_seconds=20.0, sleep=waits.append)

    def busy():
        raise openai.RateLimitError("slow down", response=httpx.Response(429, request=req), body=None)

    with pytest.raises(TransientExhausted, match="run the workflow again"):
        pol.call(busy, "create batch")
    assert sum(waits) <= 20.0 and len(waits) >= 3
    assert all(0.5 * min(8.0, 2 ** i) <= w <= min(8.0, 2 ** i) for i, w in enumerate(waits))   # jitter
    hdr = httpx.Response(503, request=req, headers={"retry-after": "3"})
    w2: list[float] = []
    n = iter(range(3))

    def flaky():
        if next(n) < 2:
            raise openai.InternalServerError("down", response=hdr, body=None)
        return "ok"

    assert RetryPolicy(sleep=w2.append).call(flaky, "poll") == "ok" and w2 == [3.0, 3.0]   # Retry-After wins

    def denied():
        raise openai.AuthenticationError("bad key", response=httpx.Response(401, request=req), body=None)

    with pytest.raises(PermanentAPIError, match="api_key_env"):
        RetryPolicy(sleep=w2.append).call(denied, "create batch")


_SYNC_CHILD = """
import sys
sys.path.insert(0, {src!r})
from benchmaker.vision import run
run(**{kw!r})
"""


def _sync_kw(tmp: Path, corpus: Path, fake, images: str) -> dict:
    return {"images": images, "annotations": str(tmp / "ann.jsonl"), "losses": str(tmp / "loss.jsonl"),
                "costs": str(tmp / "costs.jsonl"), "adapter": "openai",
                "settings": {**SETTINGS, "base_url": fake.base_url, "concurrency": 1},
                "facets": TINY_FACETS, "image_root": str(corpus), "columns": {}, "cache_dir": str(tmp / "cache"),
                "ledger": str(tmp / "ledger" / "00000.jsonl")}


def _kill_when(proc: subprocess.Popen, cond, timeout: float = 60.0, grace: float = 0.0) -> None:
    t0 = time.monotonic()
    while not cond():
        assert proc.poll() is None, "the child finished before it could be killed"
        assert time.monotonic() - t0 < timeout
        time.sleep(0.02)
    time.sleep(grace)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def test_kill_9_during_sync_run_then_rerun_costs_equal_bill(fake, tmp_path, tiny_corpus):
    imgs = images_frame(tiny_corpus, 8)
    images = write_images(imgs, tmp_path / "images.jsonl")
    kw = _sync_kw(tmp_path, tiny_corpus, fake, images)
    fake.delay = 0.15
    env = {**os.environ, "OPENAI_API_KEY": "sk-test"}
    proc = subprocess.Popen([sys.executable, "-c", _SYNC_CHILD.format(src=SRC, kw=kw)], env=env)
    _kill_when(proc, lambda: len(fake.bill) >= 3)
    paid_before = len(fake.bill)
    assert paid_before < 8 and not Path(kw["costs"]).exists()
    fake.delay = 0.0
    vision_run(**kw)                                        # the rerun
    costs = _costs(kw["costs"])
    # nothing paid twice: the killed run's answers came from the cache, each image billed once at most
    # (one more if the kill hit a request in flight: billed, never answered)
    assert len(fake.bill) in (8, 9)
    assert len(list(iter_jsonl(kw["annotations"]))) == 8
    paid = [c for c in costs if not c["cached"]]
    in_flight = len(fake.bill) - 8                          # billed for the killed child, never answered
    assert len(paid) == 8 and in_flight in (0, 1)
    assert _paid(costs) == pytest.approx(fake.billed_usd() - sum(b["usd"] for b in fake.bill[paid_before - in_flight:
                                                                                            paid_before]))
    assert sum(not c["last_run"] for c in paid) >= 2        # the killed run's rows are on record
    assert sum(c["cost_usd"] for c in costs if c["last_run"]) < _paid(costs)
    # the summary (and so the card) reports the spend to date and the last run's
    from benchmaker.summary.inputs import read_costs
    from benchmaker.summary.stats import cost_summary

    t = cost_summary(read_costs([kw["costs"]]))
    assert t["cost_usd"].sum() == pytest.approx(_paid(costs))
    assert t["cost_usd_last_run"].sum() == pytest.approx(sum(c["cost_usd"] for c in costs if c["last_run"]))


def test_kill_9_sync_concurrency_8_loses_only_what_is_in_flight(fake, tmp_path, tiny_corpus):
    """Concurrency 8, killed after N billed answers: every answer that arrived is in the ledger and the
    cache (at most the requests in flight are missing), and the rerun pays again only for those."""
    imgs = images_frame(tiny_corpus)
    n = imgs.height
    images = write_images(imgs, tmp_path / "images.jsonl")
    kw = _sync_kw(tmp_path, tiny_corpus, fake, images)
    kw["settings"] = {**kw["settings"], "concurrency": 8}
    fake.delay = 0.05
    fake.hold_after = 13                                    # the 14th and later calls: billed, held
    env = {**os.environ, "OPENAI_API_KEY": "sk-test"}
    proc = subprocess.Popen([sys.executable, "-c", _SYNC_CHILD.format(src=SRC, kw=kw)], env=env)
    # all 8 workers wait on a billed request; a moment for the child to handle what it received
    _kill_when(proc, lambda: len(fake.bill) >= 13 + 8, grace=0.5)
    billed = len(fake.bill)
    assert billed == 21 < n
    on_record = [r for r in iter_jsonl(kw["ledger"]) if "rid" in r]
    cached = [p for p in (tmp_path / "cache").rglob("*.json") if "wire" not in p.parts]
    # every answer that arrived is on record and cached; missing: only the 8 requests in flight
    assert len(on_record) == len(cached) == 13, (billed, len(on_record), len(cached))
    missing = billed - len(on_record)
    fake.release.set()
    fake.hold_after = None
    fake.delay = 0.0
    vision_run(**kw)                                        # the README's resume: run again
    costs = _costs(kw["costs"])
    assert len(list(iter_jsonl(kw["annotations"]))) == n
    assert len(fake.bill) == n + missing                    # paid twice: only the ones in flight
    paid = [c for c in costs if not c["cached"]]
    assert len(paid) == n
    assert _paid(costs) == pytest.approx(SYNC_COST * n)


_COLLECT_CHILD = """
import sys
sys.path.insert(0, {src!r})
from benchmaker.vision import openai as vo
vo.collect(**{kw!r})
"""


def test_kill_9_during_collect_then_rerun_costs_equal_bill(fake, tmp_path, tiny_corpus):
    sh = Shard(tmp_path, tiny_corpus, fake, poll_seconds=0.05)
    vo.build(images=sh.images, requests=sh.p["requests"], manifest=sh.p["manifest"], settings=sh.settings,
             facets=TINY_FACETS, image_root=str(tiny_corpus), columns={}, cache_dir=sh.cache, threads=1)
    vo.submit(requests=sh.p["requests"], submitted=sh.p["submitted"], settings=sh.settings, state_dir=sh.state,
              benchmark="tiny", shard="00000")
    fake.fail = lambda cid, body: "http_500" if cid.endswith("-a1") and cid.split("-")[1] in ("0", "3") else None
    fake.steps = 30                                         # the retry round stays open: the child waits
    env = {**os.environ, "OPENAI_API_KEY": "sk-test"}
    proc = subprocess.Popen([sys.executable, "-c", _COLLECT_CHILD.format(src=SRC, kw=sh.kw())], env=env)
    _kill_when(proc, lambda: fake.count("POST", "/v1/batches") >= 2)   # round 1 settled, round 2 submitted
    assert not Path(sh.p["costs"]).exists()
    fake.steps = 1
    vo.collect(**sh.kw())
    costs = _costs(sh.p["costs"])
    assert len(fake.batches) == 2                           # the retry batch was found again, not resubmitted
    n = len(images_frame(tiny_corpus))
    assert len(list(iter_jsonl(sh.p["annotations"]))) == n
    assert _paid(costs) == pytest.approx(fake.billed_usd())
    assert len([c for c in costs if not c["cached"]]) == len(fake.bill) == n


def test_prompt_cache_layout_against_upstream(tmp_path):
    """benchmarks/prompt_cache.py at a small size: the fake counts cached prefixes as OpenAI does; the
    judge's stable prefix (schema, instructions, facet definitions) is cached for every query after
    the first, upstream's judge layout gets nothing cached, and the total costs less."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import prompt_cache as pc

    fm, vocab = pc.facet_model()
    imgs = pc.make_images(tmp_path, 6)
    res = {lay: pc.run_layout(lay, imgs, tmp_path, fm, vocab, 12, 13) for lay in ("upstream", "benchmaker")}
    ours, up = res["benchmaker"], res["upstream"]
    assert ours["judge"]["answered"] == up["judge"]["answered"] == 12
    assert up["judge"]["cached_pct"] == 0 and ours["judge"]["cached_pct"] >= 45
    assert ours["vision"]["cached_pct"] >= 70
    assert ours["judge"]["usd"] < 0.6 * up["judge"]["usd"]


def test_prompt_cache_key_sent_and_checked(fake, tmp_path, tiny_corpus):
    imgs = images_frame(tiny_corpus, 3)
    a = vo.OpenAIAnnotator(facets=FM, settings={**SETTINGS, "base_url": fake.base_url, "prompt_cache_key": True},
                           image_root=str(tiny_corpus), cache_dir=None)
    assert a.annotate(imgs, Losses("vision")).height == 3
    keys = {b["prompt_cache_key"] for m, p, b in fake.log if p == "/v1/responses"}
    assert len(keys) == 1 and len(next(iter(keys))) <= 64       # one key per stable prefix
    # off by default for a custom base_url (servers that may not know the field)
    b = vo.OpenAIAnnotator(facets=FM, settings={**SETTINGS, "base_url": fake.base_url}, image_root=str(tiny_corpus),
                           cache_dir=None)
    b.annotate(images_frame(tiny_corpus, 1), Losses("vision"))
    assert "prompt_cache_key" not in fake.log[-1][2]


@pytest.mark.slow
def test_estimate_within_10_percent_before_and_after_a_partial_run(fake, tmp_path, tiny_corpus, tiny_clip):
    """``benchmaker estimate`` against the fake in its token-counting mode, with a model whose lengths the
    estimator is not told (support.LengthModel: ~300 reasoning tokens a request at low): before the run
    (preprocess's inspection decides what is sent: the broken files are not counted) the bill is inside
    the range; after a partial run (part of the answers in the response cache, which the estimate
    measures) within 10 % of what the fake then bills."""
    from support import LengthModel, snakemake, tiny_config, write_config

    from benchmaker.config import load_config
    from benchmaker.estimate import estimate

    fake.count_tokens = True
    fake.lengths = LengthModel(3, means={"low": 300}, spread=0.2)
    llm = {"base_url": fake.base_url, "image_max_side": 64, "model": "gpt-5-mini", "mode": "sync", "concurrency": 2}
    # one shard: the estimate and the bill count requests per image, whatever the sharding
    config = write_config(tmp_path / "config.yaml", tiny_config(tmp_path, tiny_corpus, tiny_clip, n_shards=1,
                                                                vision={"adapter": "openai", "openai": llm}))
    cfg = load_config(str(config))
    before = estimate(cfg)[0]
    n_files = sum(1 for p in tiny_corpus.rglob("*") if p.is_file())
    assert before["quarantined"] >= 1 and before["items"] == n_files - before["quarantined"]
    assert before["cached"] == 0 and before["requests"] == before["items"] - before["duplicates"]
    res = tmp_path / "results" / "tiny"
    env = {"OPENAI_API_KEY": "sk-test"}
    r = snakemake(["--cores", "2", f"{res}/annotations.jsonl"], tmp_path, config, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    billed = fake.billed_usd()
    assert len(fake.bill) == before["requests"]
    print(f"estimate before {before['low_usd']:.6f}..{before['high_usd']:.6f} vs billed {billed:.6f}")
    assert before["low_usd"] <= billed <= before["high_usd"]
    # a partial run: drop a third of the cached answers, then the estimate prices only those
    cache = tmp_path / "results" / ".cache" / "vision"
    entries = sorted(p for p in cache.rglob("*.json") if "wire" not in p.parts)
    for p in entries[::3]:
        p.unlink()
    shutil.rmtree(cache / "wire")             # the answers by sent bytes too (providers/claims.py)
    after = estimate(load_config(str(config)))[0]
    assert after["requests"] == len(entries[::3]) and after["cached"] == len(entries) - len(entries[::3])
    r = snakemake(["--cores", "2", f"{res}/annotations.jsonl", "--forcerun", "vision"], tmp_path, config, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(fake.bill) == before["requests"] + after["requests"]
    print(f"estimate after a partial run {after['usd']:.6f} vs billed {fake.billed_usd() - billed:.6f}")
    assert after["usd"] == pytest.approx(fake.billed_usd() - billed, rel=0.10)


def test_cancel_retried_on_transient_errors(fake, tmp_path, tiny_corpus):
    from benchmaker.providers.openai.runner import OpenAIRunner

    sh = Shard(tmp_path, tiny_corpus, fake)
    vo.build(images=sh.images, requests=sh.p["requests"], manifest=sh.p["manifest"], settings=sh.settings,
             facets=TINY_FACETS, image_root=str(tiny_corpus), columns={}, cache_dir=sh.cache, threads=1)
    vo.submit(requests=sh.p["requests"], submitted=sh.p["submitted"], settings=sh.settings, state_dir=sh.state,
              benchmark="tiny", shard="00000")
    bid = next(iter(fake.batches))
    fake.faults = [("POST", r"/v1/batches/[^/]+/cancel", 503), ("POST", r"/v1/batches/[^/]+/cancel", 429)]
    OpenAIRunner(stage="vision", item_type="image", settings=sh.settings, cache_dir=None).batch_backend().cancel(bid)
    assert fake.faults == [] and fake.batches[bid]["status"] == "cancelling"


@pytest.mark.parametrize("end", ["expired", "cancelled"])
def test_expired_or_cancelled_batch_partial_rows_are_billed_and_recorded(fake, tmp_path, tiny_corpus, end):
    """What a batch that ends early returned (and the provider billed) is in the cost file; the rest
    is retried (expired) or lost (cancelled), and the cost file still equals the bill."""
    sh = Shard(tmp_path, tiny_corpus, fake)
    n = len(images_frame(tiny_corpus))
    if end == "expired":
        fake.expire_after = 5
    else:
        vo.build(images=sh.images, requests=sh.p["requests"], manifest=sh.p["manifest"], settings=sh.settings,
                 facets=TINY_FACETS, image_root=str(tiny_corpus), columns={}, cache_dir=sh.cache, threads=1)
        vo.submit(requests=sh.p["requests"], submitted=sh.p["submitted"], settings=sh.settings,
                  state_dir=sh.state, benchmark="tiny", shard="00000")
        fake.batches[next(iter(fake.batches))]["status"] = "cancelling"
    if end == "expired":
        sh.run()
    else:
        vo.collect(**sh.kw())
    costs = _costs(sh.p["costs"])
    assert 0 < len(fake.bill) and len([c for c in costs if not c["cached"]]) == len(fake.bill)
    assert _paid(costs) == pytest.approx(fake.billed_usd())
    losses = list(iter_jsonl(sh.p["losses"]))
    if end == "expired":
        assert losses == [] and len(fake.bill) == n            # 5 answered, the rest in a retry batch
    else:
        assert len(fake.bill) == n // 2 and {r["reason"] for r in losses} == {"batch_cancelled"}

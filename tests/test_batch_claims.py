"""Batch mode pays each distinct request content once per benchmark, keyed by the bytes actually sent,
across shards running at the same time (providers/claims.py, providers/batch.py): two shards whose
source files differ but become the same upload run build -> submit -> collect in two processes against
the strict fake OpenAI server; the bill has one row per distinct upload, every image is annotated,
the cost files together equal the bill, and no claim is left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from openai_helpers import SETTINGS, images_frame, write_images
from PIL import Image
from support import TINY_FACETS

from benchmaker.io import iter_jsonl

SRC = str(Path(__file__).resolve().parents[1] / "src")

_CHILD = """
import sys
sys.path.insert(0, {src!r})
from benchmaker.vision import openai as vo
kw = {kw!r}
common = dict(settings=kw["settings"], cache_dir=kw["cache_dir"], adapter=kw.get("adapter", "openai"))
vo.build(images=kw["images"], requests=kw["requests"], manifest=kw["manifest"], facets=kw["facets"],
         image_root=kw["image_root"], columns={{}}, threads=1, **common)
vo.submit(requests=kw["requests"], submitted=kw["submitted"], state_dir=kw["state_dir"], benchmark="tiny",
          shard=kw["shard"], **common)
vo.collect(images=kw["images"], manifest=kw["manifest"], submitted=kw["submitted"], annotations=kw["annotations"],
           losses=kw["losses"], costs=kw["costs"], facets=kw["facets"], image_root=kw["image_root"], columns={{}},
           state_dir=kw["state_dir"], benchmark="tiny", shard=kw["shard"], **common)
"""


def _corpus(root: Path, tiny_corpus: Path, n: int = 6) -> None:
    """Shard a and shard b hold the same pixels as different files: other PNG compression, or an
    opaque RGBA copy (composited onto white, the same upload)."""
    srcs = [p for p in sorted(tiny_corpus.rglob("*.jpg")) if "broken" not in p.parts][:n]
    for k, p in enumerate(srcs):
        im = Image.open(p).convert("RGB")
        for sub, level in (("a", 1), ("b", 9)):
            (root / sub).mkdir(parents=True, exist_ok=True)
            if sub == "b" and k % 2:
                im.convert("RGBA").save(root / sub / f"{k}.png")
            else:
                im.save(root / sub / f"{k}.png", compress_level=level)
    assert (root / "a" / "0.png").read_bytes() != (root / "b" / "0.png").read_bytes()


# fast polling and retries against the fake server
FAST = {"poll_seconds": 0.05, "retry_base_delay": 0.01, "retry_max_delay": 0.05}


def _shard(fake, tmp_path: Path, root: Path, shard: str, images, **settings) -> dict:
    """The arguments of one shard's build -> submit -> collect: its files under tmp_path/<shard>, the
    cache shared by every shard, batch mode against the fake server with ``settings``."""
    d = tmp_path / shard
    d.mkdir()
    return {"images": write_images(images, d / "images.jsonl"), "requests": str(d / "requests.jsonl"),
            "manifest": str(d / "manifest.jsonl"), "submitted": str(d / "submitted.json"),
            "annotations": str(d / "ann.jsonl"), "losses": str(d / "loss.jsonl"), "costs": str(d / "costs.jsonl"),
            "state_dir": str(d / "state"), "shard": shard, "facets": TINY_FACETS, "image_root": str(root),
            "cache_dir": str(tmp_path / "cache"),
            "settings": {**SETTINGS, "base_url": fake.base_url, "mode": "batch", **settings}}


def _run_two_shards(fake, tmp_path: Path, root: Path, adapter: str = "openai", env: dict | None = None,
                    **settings) -> list[dict]:
    frame = images_frame(root)
    procs, kws = [], []
    for sub in ("a", "b"):
        imgs = frame.filter(frame["image_id"].str.starts_with(sub + "/"))
        kw = {**_shard(fake, tmp_path, root, sub, imgs, **{**FAST, **settings}), "adapter": adapter}
        kws.append(kw)
        procs.append(subprocess.Popen([sys.executable, "-c", _CHILD.format(src=SRC, kw=kw)],
                                      env={**os.environ, **(env or {"OPENAI_API_KEY": "sk-test"})}))
    assert [p.wait(timeout=180) for p in procs] == [0, 0]
    return kws


def _check(fake, tmp_path: Path, kws: list[dict], n: int = 6) -> None:
    assert len(fake.bill) == n                                   # 2n images, n distinct uploads
    costs = [c for kw in kws for c in iter_jsonl(kw["costs"])]
    assert sum(not c["cached"] for c in costs) == n and len(costs) == 2 * n
    assert sum(c["cost_usd"] for c in costs) == pytest.approx(fake.billed_usd())
    for kw in kws:
        assert len(list(iter_jsonl(kw["annotations"]))) == n
        assert not list(iter_jsonl(kw["losses"]))
    sent = sum(len(Path(kw["requests"]).read_text().splitlines()) for kw in kws)
    assert sent == n                                             # each upload in one shard's batch only
    assert not [p for p in (tmp_path / "cache" / "claims").rglob("*") if p.is_file()]   # all released


def test_same_bytes_paid_once_across_concurrent_batch_shards(fake, tmp_path, tiny_corpus):
    root = tmp_path / "corpus"
    _corpus(root, tiny_corpus)
    _check(fake, tmp_path, _run_two_shards(fake, tmp_path, root))


def test_same_bytes_paid_once_across_concurrent_gemini_batch_shards(tmp_path, tiny_corpus):
    """The same with the Gemini adapter against the strict fake Gemini server (inline batch jobs)."""
    import fake_gemini

    fake = fake_gemini.start()
    try:
        root = tmp_path / "corpus"
        _corpus(root, tiny_corpus)
        kws = _run_two_shards(fake, tmp_path, root, adapter="gemini", env={"GEMINI_API_KEY": fake_gemini.KEY},
                              model="gemini-2.5-flash")
        _check(fake, tmp_path, kws)
    finally:
        fake_gemini.stop(fake)


def test_claiming_shards_batch_expires_retried_there_paid_once(fake, tmp_path, tiny_corpus):
    """The first batch to finish expires with nothing answered: its shard keeps its claims and sends
    them again in its next round; the other shard waits for those answers. Nothing is lost, nothing
    is paid twice."""
    root = tmp_path / "corpus"
    _corpus(root, tiny_corpus)
    fake.expire_after = 0
    _check(fake, tmp_path, _run_two_shards(fake, tmp_path, root))
    assert any(b["status"] == "expired" for b in fake.batches.values())


_STEPS = """
import sys
sys.path.insert(0, {src!r})
from benchmaker.vision import openai as vo
kw = {kw!r}
common = dict(settings=kw["settings"], cache_dir=kw["cache_dir"])
if "build" in {steps!r}:
    vo.build(images=kw["images"], requests=kw["requests"], manifest=kw["manifest"], facets=kw["facets"],
             image_root=kw["image_root"], columns={{}}, threads=1, **common)
    vo.submit(requests=kw["requests"], submitted=kw["submitted"], state_dir=kw["state_dir"], benchmark="tiny",
              shard=kw["shard"], **common)
if "collect" in {steps!r}:
    vo.collect(images=kw["images"], manifest=kw["manifest"], submitted=kw["submitted"],
               annotations=kw["annotations"], losses=kw["losses"], costs=kw["costs"], facets=kw["facets"],
               image_root=kw["image_root"], columns={{}}, state_dir=kw["state_dir"], benchmark="tiny",
               shard=kw["shard"], **common)
"""


def _two_shards(fake, tmp_path, tiny_corpus):
    """Shards ``a`` and ``b`` of the same corpus (identical images in both), and a function that runs
    steps of one shard in a child process of its own session (a kill -9 target)."""
    root = tmp_path / "corpus"
    _corpus(root, tiny_corpus)
    frame = images_frame(root)
    env = {**os.environ, "OPENAI_API_KEY": "sk-test"}
    kws = []
    for sub in ("a", "b"):
        imgs = frame.filter(frame["image_id"].str.starts_with(sub + "/"))
        kws.append(_shard(fake, tmp_path, root, sub, imgs, **FAST))

    def child(kw, steps):
        return subprocess.Popen([sys.executable, "-c", _STEPS.format(src=SRC, kw=kw, steps=steps)], env=env,
                                start_new_session=True)

    return kws, child


def test_claiming_shard_killed_then_resumed_the_other_waits_paid_once(fake, tmp_path, tiny_corpus):
    """Shard a builds and submits first (it claims every upload); shard b then finds them all claimed,
    sends nothing and waits. a's controller is killed (-9) while downloading its answers: its claims
    stay (they name its state folder, not the dead process), b keeps waiting rather than paying again;
    the README's resume (collect again) answers them, and b completes from those answers."""
    import signal

    kws, child = _two_shards(fake, tmp_path, tiny_corpus)

    assert child(kws[0], ["build"]).wait(timeout=120) == 0
    b = child(kws[1], ["build", "collect"])
    holder: list = []
    fake.kill_at = ("download", 1, lambda: os.killpg(holder[0].pid, signal.SIGKILL))
    holder.append(child(kws[0], ["collect"]))
    assert holder[0].wait(timeout=120) == -signal.SIGKILL and fake.killed == ["download"]
    assert b.poll() is None                                      # still waiting for a's answers
    assert len(Path(kws[1]["requests"]).read_text().splitlines()) == 0
    assert child(kws[0], ["collect"]).wait(timeout=120) == 0      # resume
    assert b.wait(timeout=120) == 0
    _check(fake, tmp_path, kws)


def test_same_bytes_in_one_batch_shard_sent_once(fake, tmp_path, tiny_corpus):
    """Within one shard too: two files that become the same upload are one request (the second is a
    duplicate of the first in the manifest and gets its answer)."""
    root = tmp_path / "corpus"
    _corpus(root, tiny_corpus)
    kw = _shard(fake, tmp_path, root, "all", images_frame(root), poll_seconds=0.05)
    p = subprocess.run([sys.executable, "-c", _CHILD.format(src=SRC, kw=kw)], timeout=120,
                       env={**os.environ, "OPENAI_API_KEY": "sk-test"})
    assert p.returncode == 0
    assert len(fake.bill) == 6 and len(Path(kw["requests"]).read_text().splitlines()) == 6
    assert len(list(iter_jsonl(kw["annotations"]))) == 12
    costs = list(iter_jsonl(kw["costs"]))
    assert sum(not c["cached"] for c in costs) == 6
    assert sum(c["cost_usd"] for c in costs) == pytest.approx(fake.billed_usd())
    assert not [p for p in (tmp_path / "cache" / "claims").rglob("*") if p.is_file()]


def test_shared_requests_with_wait_false_stop_then_complete(fake, tmp_path, tiny_corpus):
    """``wait: false``: a shard whose requests another shard is answering stops with a clear "run again
    later" (as for a running batch) instead of paying again, and completes on the next run."""
    from benchmaker.providers.batch_wait import BatchPending
    from benchmaker.vision import openai as vo

    root = tmp_path / "corpus"
    _corpus(root, tiny_corpus)
    frame = images_frame(root)
    kws = []
    for sub in ("a", "b"):
        imgs = frame.filter(frame["image_id"].str.starts_with(sub + "/"))
        kws.append({**_shard(fake, tmp_path, root, sub, imgs, wait=False), "columns": {}, "benchmark": "tiny"})
    for kw in kws:
        req = kw["requests"]
        vo.build(images=kw["images"], requests=req, manifest=kw["manifest"], settings=kw["settings"],
                 facets=TINY_FACETS, image_root=str(root), columns={}, cache_dir=kw["cache_dir"])
        vo.submit(requests=req, submitted=kw["submitted"], settings=kw["settings"], state_dir=kw["state_dir"],
                  benchmark="tiny", shard=kw["shard"], cache_dir=kw["cache_dir"])
    assert Path(kws[1]["requests"]).read_text() == ""                 # b sends nothing: a claimed it all
    coll = {k: v for k, v in kws[1].items() if k != "requests"}
    with pytest.raises(BatchPending, match="another shard"):
        vo.collect(**coll)
    for _ in range(10):                                              # a's batch: polled until done
        try:
            vo.collect(**{k: v for k, v in kws[0].items() if k != "requests"})
            break
        except BatchPending:
            continue
    vo.collect(**coll)
    _check(fake, tmp_path, kws)


def test_a_long_wait_on_another_shard_says_for_what_whom_and_until_when(tmp_path, caplog):
    """No silent wait (issue 32): after a minute, and each minute after, a collect waiting for requests
    another shard's batch answers logs how many, which shard holds them and when the claims expire."""
    import logging
    import time as _time

    from benchmaker.providers.batch_wait import WAIT_SAY_SECONDS, _say_shared_wait
    from benchmaker.providers.claims import BATCH_CLAIM_SECONDS, Claims

    other = Claims(tmp_path, stale_seconds=BATCH_CLAIM_SECONDS, owner="batch:/r/api/vision/00002")
    assert other.claim("ab" * 32)
    mine = Claims(tmp_path, stale_seconds=BATCH_CLAIM_SECONDS, owner="batch:/r/api/vision/00000")
    owner, until = mine.holder("ab" * 32)
    assert owner == "batch:/r/api/vision/00002" and abs(until - _time.time() - BATCH_CLAIM_SECONDS) < 60
    assert mine.holder("cd" * 32) is None
    clock = iter([0.0, 30.0, WAIT_SAY_SECONDS + 1, WAIT_SAY_SECONDS + 30, 2 * WAIT_SAY_SECONDS + 2])
    with caplog.at_level(logging.WARNING, logger="benchmaker.providers.batch"):
        waited = None
        said = []
        for _ in range(5):
            n = len(caplog.records)
            waited = _say_shared_wait("vision", {3: "ab" * 32, 4: "ab" * 32}, mine, waited, now=lambda: next(clock))
            said.append(len(caplog.records) > n)
    assert said == [False, False, True, False, True], said
    line = caplog.records[-1].getMessage()
    assert "2 request(s)" in line and "held by batch:/r/api/vision/00002 until " in line and "UTC" in line, line


def test_a_collect_waiting_on_a_killed_shard_takes_its_work_over(fake, tmp_path, tiny_corpus):
    """The resume of issue 32 with one core: shard a claimed every upload and its collect was killed
    (-9) while downloading; shard b's collect then runs alone (a's cannot start while b's runs). b
    does not wait for ever: a's collect is not running, so b reads the answers from a's batches
    (nothing sent, nothing paid) and finishes; a's own collect, run after it, finishes too. Each
    upload paid once, every image annotated in both shards, the cost files equal the bill."""
    import signal

    kws, child = _two_shards(fake, tmp_path, tiny_corpus)

    assert child(kws[0], ["build"]).wait(timeout=120) == 0
    holder: list = []
    fake.kill_at = ("download", 1, lambda: os.killpg(holder[0].pid, signal.SIGKILL))
    holder.append(child(kws[0], ["collect"]))
    assert holder[0].wait(timeout=120) == -signal.SIGKILL and fake.killed == ["download"]
    n_paid = len(fake.bill)
    # one core: b alone (build, submit: everything claimed by a, nothing sent; collect: takes a's over)
    assert child(kws[1], ["build", "collect"]).wait(timeout=120) == 0
    assert len(Path(kws[1]["requests"]).read_text().splitlines()) == 0 and len(fake.bill) == n_paid
    assert [c for c in iter_jsonl(kws[1]["costs"]) if not c["cached"]] == []
    assert list((Path(kws[1]["state_dir"]) / "taken-over").rglob("*.jsonl*"))  # a's results, downloaded by b
    assert child(kws[0], ["collect"]).wait(timeout=120) == 0      # then a's resume
    _check(fake, tmp_path, kws)

"""Pool deepening (docs/deepen.md): which pairs each system brings in, leave-one-system-out worked by
hand, and the deepen_system stage through the real OpenAI SDK against the strict fake server (sync and
batch, rerun and kill -9 + resume pay nothing twice)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fake_openai
import polars as pl
import pytest
from openai_helpers import SETTINGS, SYNC_COST, images_frame, write_images
from support import TINY_FACETS

from benchmaker.deepen import label
from benchmaker.deepen.pairs import assign, cap_by_cost
from benchmaker.deepen.reusability import kendall_tau, leave_one_out
from benchmaker.evaluate.runs import write_run
from benchmaker.evaluate_settings import deepen_systems
from benchmaker.formats import read_table, write_table
from benchmaker.io import iter_jsonl

SRC = str(Path(__file__).resolve().parents[1] / "src")


# -- which pairs ---------------------------------------------------------------------------------------
def _tops(rows):
    return pl.DataFrame(rows, schema={"system": pl.String, "order": pl.Int64, "query_id": pl.String,
                                      "image_id": pl.String, "depth": pl.Int64}, orient="row")


def test_assign_owner_contributors_budget_order():
    tops = _tops([("A", 0, "q1", "j", 1), ("A", 0, "q1", "x", 2), ("A", 0, "q1", "y", 3),
                  ("B", 1, "q1", "x", 1), ("B", 1, "q1", "z", 2), ("B", 1, "q2", "y", 1),
                  ("A", 0, "q2", "y", 1)])
    judged = pl.DataFrame({"query_id": ["q1"], "image_id": ["j"]})
    a = assign(tops, judged)
    # j is judged: never again; x: B ranks it higher (depth 1) than A (2): B owns it, both contributed;
    # (q2, y): both at depth 1: the earlier system in config order (A) owns it
    got = {(r["query_id"], r["image_id"]): (r["system"], r["depth"], r["systems"]) for r in a.iter_rows(named=True)}
    assert got == {("q1", "x"): ("B", 1, ["A", "B"]), ("q1", "y"): ("A", 3, ["A"]),
                   ("q1", "z"): ("B", 2, ["B"]), ("q2", "y"): ("A", 1, ["A", "B"])}
    # the budget order: shallowest first, then config order, query, image
    assert [(r[0], r[1]) for r in a.select("query_id", "image_id").iter_rows()] == [
        ("q2", "y"), ("q1", "x"), ("q1", "z"), ("q1", "y")]
    assert assign(tops, judged, max_pairs=2)["image_id"].to_list() == ["y", "x"]
    usd = pl.DataFrame({"query_id": ["q2", "q1", "q1", "q1"], "image_id": ["y", "x", "z", "y"],
                        "usd": [0.4, 0.4, 0.4, 0.1]})
    assert cap_by_cost(a, usd, 1.0)["image_id"].to_list() == ["y", "x"]
    assert cap_by_cost(a, usd, None).height == 4


def test_deepen_systems_checked_with_the_key():
    from benchmaker.config import ConfigError

    systems = [{"name": "clip", "kind": "clip"}, {"name": "ext", "kind": "trec_run", "scope": "pool", "path": "x"},
               {"name": "bm25", "kind": "bm25"}]
    assert deepen_systems({"enabled": False}, systems) == []
    assert deepen_systems({"enabled": True}, systems) == ["clip", "bm25"]
    assert deepen_systems({"enabled": True, "systems": ["bm25"]}, systems) == ["bm25"]
    with pytest.raises(ConfigError, match=r"deepen.systems\[0\].*ranks only the judged pools"):
        deepen_systems({"enabled": True, "systems": ["ext"]}, systems)
    with pytest.raises(ConfigError, match=r"deepen.systems\[1\].*'nope' is not an evaluate system"):
        deepen_systems({"enabled": True, "systems": ["clip", "nope"]}, systems)
    with pytest.raises(ConfigError, match="deepen.enabled"):
        deepen_systems({"enabled": True}, [])


# -- leave-one-system-out, worked by hand ----------------------------------------------------------------
def test_card_says_why_duplicate_members_stay_unjudged(tmp_path):
    from benchmaker.deepen.report import card_markdown

    rep = {"k": 10, "systems": ["a"], "pairs_added": 5, "relevant_share": 0.4, "cost_usd": 0.0, "metric": "ndcg@10",
           "duplicate_members_skipped": 3, "per_system": [], "leave_one_out": {}}
    (tmp_path / "report.json").write_text(json.dumps(rep))
    assert ("3 image(s) in a top k were not judged: another member of their duplicate group is judged for that "
            "query (a group counts once)") in card_markdown(tmp_path / "report.json")
    (tmp_path / "report.json").write_text(json.dumps({**rep, "duplicate_members_skipped": 0}))
    assert "duplicate group" not in card_markdown(tmp_path / "report.json")


def test_leave_one_out_hand_worked():
    """One query; x planner-judged relevant, n planner-judged not relevant; a brought in by A alone,
    s by A and B (both relevant). nDCG@2, ideal = two relevant at ranks 1-2 = 1 + 1/log2(3) = 1.6309.

    full:  A [a, x] -> (1 + 0.6309) / 1.6309 = 1.0;  B [s, n] -> 1 / 1.6309 = 0.6131;
           C [n, x] -> 0.6309 / 1.6309 = 0.3869 (C ranks but did not deepen)
    A out: a removed (only A brought it): A [a=unjudged, x] -> 0.3869, tied with C, below B:
           pairs (A,B) discordant, (A,C) tied in the left-out ranking, (B,C) concordant:
           tau-b = (1 - 1) / sqrt(3 * 2) = 0
    B out: s was also A's: nothing removed, B keeps 0.6131, tau = 1
    """
    rows = [("q1", "x", 1, False, []), ("q1", "n", 0, False, []), ("q1", "a", 1, True, ["A"]),
            ("q1", "s", 1, True, ["A", "B"])]
    q = pl.DataFrame([{"query_id": r[0], "image_id": r[1], "relevance_label": r[2], "deepened": r[3],
                       "deepen_systems": r[4]} for r in rows],
                     schema={"query_id": pl.String, "image_id": pl.String, "relevance_label": pl.Int64,
                             "deepened": pl.Boolean, "deepen_systems": pl.List(pl.String)})

    def run(*ids):
        return pl.DataFrame({"query_id": ["q1"] * len(ids), "image_id": list(ids),
                             "score": [float(len(ids) - i) for i in range(len(ids))]})

    runs = {"A": run("a", "x"), "B": run("s", "n"), "C": run("n", "x")}
    df, tot = leave_one_out(q, runs, "ndcg@2", ["q1"], ["A", "B"])
    g = 1 / 1.6309297535714575
    a, b = df.row(0, named=True), df.row(1, named=True)
    assert tot["full_scores"] == pytest.approx({"A": 1.0, "B": g, "C": 0.6309297535714575 * g})
    assert a["pairs_only_it_contributed"] == 1 and a["relevant_only_it_contributed"] == 1
    assert a["score_left_out"] == pytest.approx(0.6309297535714575 * g)
    assert a["score_change"] == pytest.approx(0.6309297535714575 * g - 1.0)
    assert (a["rank_full"], a["rank_left_out"]) == (1, 2)
    assert a["kendall_tau"] == pytest.approx(0.0)
    assert b["pairs_only_it_contributed"] == 0 and b["score_change"] == 0.0 and b["kendall_tau"] == pytest.approx(1.0)
    assert tot["systems_ranked"] == 3 and tot["min_kendall_tau"] == pytest.approx(0.0) and tot["reusable"] is False
    assert kendall_tau([1.0], [2.0]) is None


# -- the deepen_system stage through the fake OpenAI server ----------------------------------------------
def _inputs(tmp: Path, corpus: Path) -> dict:
    """10 images; 2 planned queries (judged pools of 3); runs of systems A and B over the corpus."""
    imgs = images_frame(corpus, 10)
    ids = imgs["image_id"].to_list()
    ann = pl.DataFrame([{"image_id": i, "summary": f"a {i.split('/')[0]} shape", "tags": ["red", "circle"],
                         "confidence": {"color": 0.9, "shape": 0.8, "is_bright": 0.5}, "annotator": "t",
                         "color": i.split("/")[0], "shape": "circle", "is_bright": True} for i in ids])
    pools = {"q1": ids[0:3], "q2": ids[5:8]}
    plan = pl.DataFrame([
        {"query_id": q, "seed_image_ids": [p[0]], "candidate_image_ids": p,
         "candidates": [{"image_id": p[0], "pool": "seed", "reason": "seed"}]
         + [{"image_id": i, "pool": "hard", "reason": "x"} for i in p[1:]], "difficulty": 0.5, "shortfall": []}
        for q, p in pools.items()],
        schema_overrides={"shortfall": pl.List(pl.Struct({"pool": pl.String, "wanted": pl.Int64, "got": pl.Int64,
                                                           "reason": pl.String}))})
    qrels = pl.DataFrame([{"query_id": q, "query_text": f"text of {q}", "image_id": i, "relevance_label": int(n < 2),
                           "pool": "seed" if n == 0 else "hard", "is_seed": n == 0, "seed_not_relevant": False,
                           "judge": "openai:gpt-5-mini", "narrative": f"what {q} needs"}
                          for q, p in pools.items() for n, i in enumerate(p)])
    p = {k: str(tmp / f"{k}.jsonl") for k in ("images", "annotations", "plan", "qrels")}
    write_images(imgs, Path(p["images"]))
    write_table(ann, "annotations", p["annotations"], facets=None)
    write_table(plan, "query_plan", p["plan"])
    write_table(qrels, "qrels", p["qrels"])
    # A ranks the corpus in id order, B in reverse: top 4 of each hold judged and unjudged images
    for name, order in (("A", ids), ("B", ids[::-1])):
        rows = [(q, i, float(10 - n)) for q in pools for n, i in enumerate(order)]
        write_run(pl.DataFrame(rows, schema=["query_id", "image_id", "score"], orient="row"),
                  tmp / "runs" / f"{name}.trec", name)
    p["runs"] = [str(tmp / "runs" / "A.trec"), str(tmp / "runs" / "B.trec")]
    p["ids"] = ids
    p["pools"] = pools
    return p


def _kw(p: dict, tmp: Path, corpus: Path, fake, system: str, **settings) -> dict:
    s = {**SETTINGS, "base_url": fake.base_url, "concurrency": 1, **settings}
    return {"qrels": p["qrels"], "plan": p["plan"], "annotations": p["annotations"], "images": p["images"],
            "runs": p["runs"], "system": system, "labels": str(tmp / "out" / f"{system}.jsonl"),
            "losses": str(tmp / "out" / f"losses-{system}.jsonl"), "costs": str(tmp / "out" / f"costs-{system}.jsonl"),
            "adapter": "openai", "settings": {"labels": "binary", "rationale": False, "adapter_settings": s},
            "deepen": {"systems": ["A", "B"], "k": 4, "max_pairs": None, "max_usd": None},
            "facets": TINY_FACETS, "image_root": str(corpus), "columns": {}, "cache_dir": str(tmp / "cache"),
            "ledger": str(tmp / "ledger" / f"{system}.jsonl"), "batch_dir": str(tmp / "batches" / system),
            "benchmark": "tiny"}


def _sent_pairs(fake) -> list[tuple[str, tuple[str, ...]]]:
    """(query text given, candidate keys) of every model call the fake answered."""
    out = []
    for m, path, body in fake.log:
        if m == "POST" and path == "/v1/responses":
            text = fake_openai.request_text(body)
            given = text.split("\nQUERY: ", 1)[1].split("\n", 1)[0]
            out.append((given, tuple(fake_openai.data_keys(text))))
    return out


def test_sync_judges_only_new_pairs_once_and_rerun_pays_nothing(fake, tmp_path, tiny_corpus):
    p = _inputs(tmp_path, tiny_corpus)
    ids, pools = p["ids"], p["pools"]
    # expected holes: top 4 minus the judged pools; A's top 4 = ids[0:4], B's = ids[9:5:-1]
    a_new = {("q1", ids[3]), ("q2", ids[0]), ("q2", ids[1]), ("q2", ids[2]), ("q2", ids[3])}
    b_new = {("q1", i) for i in ids[6:10]} | {("q2", ids[9]), ("q2", ids[8])}
    assert not (a_new | b_new) & {(q, i) for q, pool in pools.items() for i in pool}
    for system in ("A", "B"):
        label.run(**_kw(p, tmp_path, tiny_corpus, fake, system))
    got = {s: {(r["query_id"], r["image_id"]) for r in iter_jsonl(tmp_path / "out" / f"{s}.jsonl")} for s in "AB"}
    assert got == {"A": a_new, "B": b_new}
    # one request per (query, system), holding only that system's new pairs; the published text given
    sent = _sent_pairs(fake)
    assert len(sent) == 4 and sum(len(k) for _, k in sent) == len(a_new) + len(b_new)
    assert {t for t, _ in sent} == {"text of q1", "text of q2"}
    body = json.dumps([b for _, _, b in fake.log])
    # the published query and its narrative, as the judge labelled the pools under them; no seed row
    assert "NARRATIVE: what q1 needs" in body and "SEEDS" not in body and "tiny_q" not in body
    labels = read_table("deepen_labels", tmp_path / "out" / "A.jsonl")
    assert set(labels["depth"].to_list()) <= {1, 2, 3, 4} and set(labels["system"]) == {"A"}
    costs = list(iter_jsonl(tmp_path / "out" / "costs-A.jsonl")) + list(iter_jsonl(tmp_path / "out" / "costs-B.jsonl"))
    assert {c["stage"] for c in costs} == {"deepen"}
    assert sum(c["cost_usd"] for c in costs) == pytest.approx(4 * SYNC_COST) == pytest.approx(fake.billed_usd())
    # a rerun (same runs, same qrels): zero requests, the same labels
    before = (tmp_path / "out" / "A.jsonl").read_bytes()
    n = len(fake.bill)
    for system in ("A", "B"):
        label.run(**_kw(p, tmp_path, tiny_corpus, fake, system))
    assert len(fake.bill) == n and (tmp_path / "out" / "A.jsonl").read_bytes() == before
    # a pair budget: the shallowest pairs first over both systems
    kw = _kw(p, tmp_path / "b", tiny_corpus, fake, "A")
    kw["deepen"] = {**kw["deepen"], "max_pairs": 4}
    label.run(**kw)
    assert {r["depth"] for r in iter_jsonl(kw["labels"])} <= {1, 2}



def test_dollar_cap_prices_pairs_with_the_judges_provider(fake, tmp_path, tiny_corpus):
    """deepen.max_usd (set in the shipped config/deepen.yaml) with an API judge: each pair is priced by
    the judge's provider runner (an ImportError stopped every deepen job before); a cap no pair fits
    sends nothing, a roomy one keeps every pair."""
    p = _inputs(tmp_path, tiny_corpus)
    kw = _kw(p, tmp_path / "none", tiny_corpus, fake, "A")
    kw["deepen"] = {**kw["deepen"], "max_usd": 0.0}
    label.run(**kw)
    assert not list(iter_jsonl(kw["labels"])) and not fake.bill
    kw = _kw(p, tmp_path / "all", tiny_corpus, fake, "A")
    kw["deepen"] = {**kw["deepen"], "max_usd": 100.0}
    label.run(**kw)
    assert len(list(iter_jsonl(kw["labels"]))) == 5

def test_batch_mode_one_job_resumable(fake, tmp_path, tiny_corpus):
    p = _inputs(tmp_path, tiny_corpus)
    kw = _kw(p, tmp_path, tiny_corpus, fake, "B", mode="batch", poll_seconds=0)
    label.run(**kw)
    assert fake.count("POST", "/v1/batches") == 1
    assert len(list(iter_jsonl(kw["labels"]))) == 6
    paid = [c for c in iter_jsonl(kw["costs"]) if not c["cached"]]
    assert len(paid) == 2 and {c["mode"] for c in paid} == {"batch"}
    label.run(**kw)                        # a rerun: answered from the cache, no new batch
    assert fake.count("POST", "/v1/batches") == 1


_CHILD = """
import sys
sys.path.insert(0, {src!r})
from benchmaker.deepen import label
label.run(**{kw!r})
"""


def test_kill_9_then_resume_pays_nothing_twice(fake, tmp_path, tiny_corpus):
    p = _inputs(tmp_path, tiny_corpus)
    kw = _kw(p, tmp_path, tiny_corpus, fake, "A")
    kw["deepen"] = {**kw["deepen"], "k": 8}          # more queries' requests: q1 and q2, one each
    kw["deepen"]["systems"] = ["A"]
    kw["runs"] = [p["runs"][0]]
    fake.delay = 0.6
    proc = subprocess.Popen([sys.executable, "-c", _CHILD.format(src=SRC, kw=kw)],
                            env={**os.environ, "OPENAI_API_KEY": "sk-test"})
    t0 = time.monotonic()
    ledger = Path(kw["ledger"])
    while not (ledger.exists() and ledger.read_text().count("\n") >= 1):   # one answer on record
        assert proc.poll() is None and time.monotonic() - t0 < 60
        time.sleep(0.02)
    time.sleep(0.15)        # the answer cached after its ledger row (the next request takes 0.6 s)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not Path(kw["labels"]).exists()
    first = len(fake.bill)
    fake.delay = 0.0
    label.run(**kw)                                   # the resume
    # two requests in all, each billed once (one more only if the kill hit a request in flight)
    assert len(fake.bill) in (2, 3) and first >= 1
    costs = list(iter_jsonl(kw["costs"]))
    paid = [c for c in costs if not c["cached"]]
    assert len(paid) == 2                                       # every answered request on record once
    assert sum(not c["last_run"] for c in paid) >= 1            # the killed run's row, from the ledger
    assert len(list(iter_jsonl(kw["labels"]))) == 10     # top 8 minus the 3 judged, per query


def test_estimate_prices_deepening_and_checks_the_budget(tmp_path, tiny_corpus, tiny_clip):
    import shutil

    import support

    from benchmaker.config import results_dir, validate_config
    from benchmaker.estimate import estimate

    cfg = support.tiny_config(tmp_path, tiny_corpus, tiny_clip)
    cfg["judge"] = {"adapter": "openai", "openai": {"model": "gpt-5-mini", "mode": "batch"}}
    cfg["evaluate"] = {"systems": [{"name": n, "kind": "trec_run", "path": str(tmp_path / f"{n}.trec")}
                                   for n in ("A", "B")]}
    cfg["deepen"] = {"enabled": True, "k": 4, "max_pairs": 10}
    for n in ("A", "B"):
        (tmp_path / f"{n}.trec").write_text("")
    cfg = validate_config(cfg)
    # before the runs exist: an upper bound (systems x queries x k)
    ln = [x for x in estimate(cfg) if x["stage"] == "deepen"][0]
    assert ln["pairs"] == 2 * 4 * 4 and ln["requests"] == 8 and ln["usd"] > 0 and ln["within_budget"] is False
    # with the real runs and qrels: the exact requests (2 per system), the same pairs as the run judges
    p = _inputs(tmp_path / "in", tiny_corpus)
    res = Path(results_dir(cfg))
    (res / "evaluate" / "runs").mkdir(parents=True)
    for k in ("qrels", "plan", "annotations", "images"):
        shutil.copy(p[k], res / ("query_plan.jsonl" if k == "plan" else f"{k}.jsonl"))
    for r in p["runs"]:
        shutil.copy(r, res / "evaluate" / "runs" / Path(r).name)
    cfg["deepen"]["max_pairs"] = 11
    ln = [x for x in estimate(cfg) if x["stage"] == "deepen"][0]
    assert ln["pairs"] == 11 and ln["requests"] == 4 and ln["within_budget"] is True
    assert ln["source"].startswith("evaluate/runs")

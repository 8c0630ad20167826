"""The leaderboard as people see it: the report's table fits a 1280 px window (headless Chromium), the
quality-vs-compute chart separates a sub-millisecond system from a multi-second one (log axis)."""

from __future__ import annotations

import json
import re

import polars as pl
from test_audit_page import FLAGS, _chromium

from benchmaker.evaluate.report import quality_vs_compute_chart, summary_section

# the systems of docs/evaluate.md's example config, with latencies from 0.7 ms to 4 s
SYSTEMS = (("vit-b-32", "clip", 12.0), ("siglip-so400m-patch14-384-webli", "clip", 85.0), ("bm25", "bm25", 0.7),
           ("rrf", "hybrid", 13.0), ("wsum", "hybrid", 13.0), ("gpt-rerank", "rerank", 4000.0),
           ("vllm-rerank", "rerank", 2500.0), ("prod", "trec_run", 1.0))


def _board() -> pl.DataFrame:
    rows = []
    for n, (name, kind, ms) in enumerate(SYSTEMS):
        for scope in ("pool", "corpus", "condensed"):
            rows.append({"system": name, "kind": kind, "scope": scope, "sees_judge_text": kind in ("hybrid",),
                         "queries": 120, "ndcg@10": 0.412345 + n / 50, "precision@10": 0.3125, "recall@10": 0.6789,
                         "hit_rate@10": 0.875, "map": 0.3456789, "mrr": 0.56789, "diversity@10": 0.123456,
                         "images_per_s": 1234.56, "query_latency_ms": ms, "seconds": 12.3456, "cost_usd": 0.0123,
                         "judged@10": None if scope == "pool" else 0.85})
    return pl.DataFrame(rows)


def test_quality_vs_compute_reads_at_every_scale():
    import vl_convert as vlc

    chart = quality_vs_compute_chart(_board())
    spec = chart.to_dict()
    assert spec["layer"][0]["encoding"]["x"]["scale"]["type"] == "log"
    svg = vlc.vegalite_to_svg(chart.to_json())
    xs = {}
    for label, x in re.findall(r'aria-label="([^"]*)"[^>]*role="graphics-symbol"[^>]*transform="translate\(([-\d.]+),',
                               svg):
        ms = re.search(r"query_latency_ms: ([\d.,]+)", label)
        if ms:
            xs[float(ms.group(1).replace(",", ""))] = float(x)
    assert {0.7, 1.0, 4000.0} <= set(xs), xs
    assert xs[1.0] - xs[0.7] > 8   # 0.7 ms and 1 ms apart although a 4 s system shares the axis
    assert 0 <= min(xs.values()) and max(xs.values()) <= 420


def test_leaderboard_fits_a_1280px_window(tmp_path):
    from playwright.sync_api import sync_playwright

    from benchmaker.pages.report import write_report

    src = tmp_path / "evaluate"
    src.mkdir()
    _board().write_csv(src / "leaderboard.csv")
    (src / "leaderboard.json").write_text(json.dumps({"systems": [
        {"name": "bm25", "seconds": 1.5, "timing": {"query_latency_ms": 0.7},
         "results": {"pool": {"ndcg@10": 0.5, "query_latency_ms": 0.7, "images_per_s": 9.5, "seconds": 1.5}}}],
        "sage": {"seconds": 0.2}}))
    for name in ("drilldown.csv", "significance.csv", "sage_leaderboard.csv"):  # the leaderboard's siblings
        (src / name).write_text("")
    out = tmp_path / "summary"
    out.mkdir()
    section = summary_section(src / "leaderboard.csv", out, 0.5)
    assert "query_latency_ms" not in section.table.columns  # timings are run facts, shown in the chart only
    # ... and left out of the copies (the published ones are copies of these)
    copied = (out / "evaluate" / "leaderboard.json").read_text() + (out / "evaluate" / "leaderboard.csv").read_text()
    assert not re.search(r"seconds|latency|images_per_s|timing", copied), copied
    assert json.loads((out / "evaluate" / "leaderboard.json").read_text())["systems"][0]["results"]["pool"] == {
        "ndcg@10": 0.5}
    write_report(out, "bench", "intro", [section])
    exe = _chromium()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto((out / "report.html").as_uri())
        width = page.evaluate("document.documentElement.scrollWidth")
        right = page.evaluate("Math.max(...[...document.querySelectorAll('table')]"
                              ".map(t => t.getBoundingClientRect().right))")
        page.screenshot(path=str(tmp_path / "leaderboard.png"), full_page=True)
        browser.close()
    assert width <= 1280 and right <= 1280, (width, right)

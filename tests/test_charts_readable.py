"""Charts stay readable with many systems: in headless Chromium (the Debian package, as
tests/test_audit_page.py) the quality-vs-compute chart of six systems, two of them at the same quality and
latency, names every system with no label over another label or a point; and across the whole report
(summary charts and leaderboard charts) each colour means one thing."""

from __future__ import annotations

import json

import polars as pl
from test_audit_page import FLAGS, _chromium

from benchmaker.evaluate.report import label_rows, quality_vs_compute_chart, write_charts

# (system, kind, pool nDCG@10, latency ms, sees what the judge saw): my-search and tiny-clip tie exactly
SIX = (("my-search", "http", 0.7187, 40.0, False), ("tiny-clip", "clip", 0.7187, 40.0, False),
       ("bm25", "bm25", 0.61, 0.8, True), ("fused", "hybrid", 0.7241, 41.0, True),
       ("siglip-so400m", "clip", 0.69, 90.0, False), ("gpt-rerank", "rerank", 0.80, 3000.0, False))


def six_board() -> pl.DataFrame:
    rows = []
    for name, kind, v, ms, sees in SIX:
        for n, scope in enumerate(("pool", "corpus", "condensed", "exported")):
            rows.append({"system": name, "kind": kind, "scope": scope, "sees_judge_text": sees, "queries": 30,
                         "ndcg@10": round(v - n / 20, 6), "map": 0.5, "mrr": 0.6, "images_per_s": 10.0,
                         "query_latency_ms": ms, "seconds": 1.0, "cost_usd": 0.0})
    return pl.DataFrame(rows)


def test_label_rows_keep_their_distance():
    ys = label_rows([100.0, 100.0, 101.0, 250.0, 255.0, 0.0], 260)
    assert sorted(ys) == sorted(set(ys)) and all(b - a >= 15 for a, b in zip(sorted(ys), sorted(ys)[1:]))
    assert 0 <= min(ys) and max(ys) <= 260
    assert ys[5] == 0.0 and ys[0] == 100.0  # a label stays at its point's height when it can


def _boxes(page, selector: str) -> list[dict]:
    return page.evaluate(f"""[...document.querySelectorAll({json.dumps(selector)})].map(e => {{
        const r = e.getBoundingClientRect();
        return {{text: e.textContent, x: r.left, y: r.top, w: r.width, h: r.height}}; }})""")


def _overlap(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


def test_six_systems_every_label_readable_in_chromium(tmp_path):
    import vl_convert as vlc
    from playwright.sync_api import sync_playwright

    from benchmaker.pages.charts import VL_VERSION, spec

    board = six_board()
    assert write_charts(board, tmp_path, 1.0) == ["leaderboard.png", "quality_vs_latency.png"]
    svg = vlc.vegalite_to_svg(spec(quality_vs_compute_chart(board)), vl_version=VL_VERSION)
    (tmp_path / "chart.html").write_text(
        f"<!doctype html><html><body style='margin:0'><div id='svg'>{svg}</div>"
        "<img id='png' src='quality_vs_latency.png'><img id='bars' src='leaderboard.png'></body></html>")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1000, "height": 1400})
        page.goto((tmp_path / "chart.html").as_uri())
        labels = _boxes(page, "#svg g.mark-text.role-mark text")
        points = _boxes(page, "#svg g.mark-symbol.role-mark path")
        frame = _boxes(page, "#svg svg")[0]
        shown = page.evaluate("[...document.images].map(i => i.complete && i.naturalWidth > 0)")
        page.screenshot(path=str(tmp_path / "six-systems.png"), full_page=True)
        browser.close()
    assert shown == [True, True]  # the report's PNGs load
    assert sorted(x["text"] for x in labels) == sorted(s[0] for s in SIX)
    assert len(points) == len(SIX)
    for i, a in enumerate(labels):
        assert a["w"] > 0 and a["h"] > 0 and a["x"] + a["w"] <= frame["x"] + frame["w"], (a, frame)  # not cut off
        for b in labels[i + 1:]:
            assert not _overlap(a, b), (a, b)
        for p in points:
            assert not _overlap(a, p), (a, p)
    # the two systems at equal quality and latency: both named, apart
    tie = [x for x in labels if x["text"] in ("my-search", "tiny-clip")]
    assert abs(tie[0]["y"] - tie[1]["y"]) >= tie[0]["h"]


def _colour_meanings(node, out: dict[str, set[str]], where: str = "") -> None:
    """hex colour -> the meanings it has in a Vega-Lite spec: ``field=value`` of a colour scale, a
    mark's fixed colour, the configured default colour of bars and points."""
    if isinstance(node, list):
        for x in node:
            _colour_meanings(x, out, where)
        return
    if not isinstance(node, dict):
        return
    title = node.get("title")
    where = (title.get("text") if isinstance(title, dict) else title) or where
    color = (node.get("encoding") or {}).get("color")
    if isinstance(color, dict) and "field" in color:
        scale = color.get("scale") or {}
        assert "range" in scale and "domain" in scale, f"{where}: colour by {color['field']} without explicit colours"
        for value, hex_ in zip(scale["domain"], scale["range"]):
            out.setdefault(hex_.lower(), set()).add(f"{color['field']}={value}")
    mark = node.get("mark")
    if isinstance(mark, dict) and mark.get("type") in ("bar", "point", "circle", "square", "area", "rect", "arc") \
            and "color" in mark:
        out.setdefault(mark["color"].lower(), set()).add(f"{where}: {mark['type']}")
    for kind in ("bar", "point"):
        c = ((node.get("config") or {}).get(kind) or {}).get("color")
        if c:
            out.setdefault(c.lower(), set()).add("no meaning (neutral)")
    for k, v in node.items():
        if k not in ("encoding", "config", "data", "datasets"):
            _colour_meanings(v, out, where)


def test_one_meaning_per_colour_across_the_report(tmp_path, tiny_corpus, monkeypatch):
    from test_summary import build_inputs

    from benchmaker.pages import charts
    from benchmaker.summary.stage import run

    specs = []
    real = charts.save

    def capture(chart, path, scale_factor, png=None):
        specs.append((path.name, charts.spec(chart)))
        return real(chart, path, scale_factor, png)

    monkeypatch.setattr(charts, "save", capture)
    kw = build_inputs(tmp_path, tiny_corpus)
    kw.pop("_truth")
    ev = tmp_path / "evaluate"
    ev.mkdir()
    six_board().write_csv(ev / "leaderboard.csv")
    (ev / "leaderboard.json").write_text(json.dumps({"systems": []}))
    for name in ("drilldown.csv", "significance.csv", "sage_leaderboard.csv"):  # the leaderboard's siblings
        (ev / name).write_text("")
    run(summary=str(tmp_path / "summary"), settings={"sample_grid": 4, "scale_factor": 0.5},
        evaluation=str(ev / "leaderboard.csv"), **kw)
    names = {n for n, _ in specs}
    assert {"leaderboard.png", "quality_vs_latency.png", "relevance_overview.png", "losses.png"} <= names, names
    meanings: dict[str, set[str]] = {}
    for name, sp in specs:
        _colour_meanings(sp, meanings, name)
    several = {c: m for c, m in meanings.items() if len(m) > 1}
    assert several == {}, several
    # the leaderboard's bars and its scatter: one colour meaning, sees what the judge saw
    judge = {c for c, m in meanings.items() if any(x.startswith("sees_judge_text=") for x in m)}
    assert len(judge) == 2

"""The labelling page (audit/labelling/label.html) driven in headless Chromium through Playwright.

Label with the keyboard, reload, close the browser and come back (resume), export JSON and CSV and
import both through the real importer; no console error, no page error, no network request (only the
page's own file:// URL; its images are data URIs). Uses the system Chromium (`apt-get install chromium`,
done by .ci/run), never `playwright install`. Where Chromium or Playwright is missing the test FAILS,
unless BENCHMAKER_ALLOW_NO_CHROMIUM=1 says a skip is acceptable on this machine.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import audit_support
import pytest

from benchmaker.audit import labelling as L
from benchmaker.audit.files import Scale, read_sample
from benchmaker.audit.labels import import_labels

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


def _chromium() -> str:
    exe = os.environ.get("BENCHMAKER_CHROMIUM") or next((c for c in CHROMIUM_CANDIDATES if Path(c).exists()), None)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        problem = f"Python playwright is not installed ({exc}); pip install -e '.[test]'"
    else:
        problem = None if exe else f"no Chromium at {CHROMIUM_CANDIDATES} (apt-get install chromium; .ci/run does)"
    if problem:
        if os.environ.get("BENCHMAKER_ALLOW_NO_CHROMIUM") == "1":
            pytest.skip(problem + " (allowed by BENCHMAKER_ALLOW_NO_CHROMIUM=1)")
        pytest.fail(problem + "; set BENCHMAKER_ALLOW_NO_CHROMIUM=1 to allow skipping this test")
    return exe


def _wait_local_storage_written(profile: Path, quiet_s: float = 3.0, limit_s: float = 30.0) -> None:
    import time

    folder = profile / "Default" / "Local Storage"
    t0 = time.time()
    while time.time() - t0 < limit_s:
        mtimes = [p.stat().st_mtime for p in folder.rglob("*") if p.is_file()] if folder.exists() else []
        if mtimes and time.time() - max(mtimes) >= quiet_s:
            return
        time.sleep(0.5)


class Browser:
    """One Chromium with a persistent profile; records console messages, page errors and requests."""

    def __init__(self, pw, exe: str, profile: Path, downloads: Path):
        self.ctx = pw.chromium.launch_persistent_context(
            str(profile), executable_path=exe, headless=True, args=FLAGS, accept_downloads=True,
            downloads_path=str(downloads))
        self.console: list[str] = []
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.ctx.on("request", lambda r: self.requests.append(r.url))
        self.page = self.ctx.pages[0] if self.ctx.pages else self.ctx.new_page()
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, url: str) -> None:
        self.page.goto(url)
        self.page.wait_for_selector("body[data-labelled]")

    def state(self) -> tuple[int, int]:
        b = self.page.locator("body")
        return int(b.get_attribute("data-labelled")), int(b.get_attribute("data-pos"))

    def close(self) -> None:
        self.ctx.close()


@pytest.fixture()
def page_dir(tmp_path):
    paths = audit_support.make_bench(tmp_path / "bench")
    sample, meta = audit_support.draw(paths, tmp_path / "bench" / "audit", sample_size=12)
    out = tmp_path / "bench" / "audit" / "labelling"
    L.run(sample=str(sample), sample_meta=str(meta), images=str(paths["images"]), labelling=str(out),
          settings={"thumbnail_max_side": 96}, image_root=str(paths["image_root"]))
    return out, sample


def _assert_offline(b: Browser, page_url: str) -> None:
    others = [u for u in b.requests if u != page_url and not u.startswith(("data:", "blob:"))]
    assert not others, f"the page made requests: {others}"
    bad = [m for m in b.console if m.startswith(("error", "warning"))]
    assert not bad and not b.errors, (bad, b.errors)


def test_label_reload_resume_export(page_dir, tmp_path):
    exe = _chromium()
    from playwright.sync_api import sync_playwright

    out, sample_path = page_dir
    sample = read_sample(sample_path)
    n = sample.height
    url = (out / "label.html").as_uri()
    html = (out / "label.html").read_text()
    assert '"j":' not in html and "judge_label" not in html  # blind: the judge's labels are not in the file
    profile, downloads = tmp_path / "profile", tmp_path / "downloads"
    pressed: dict[int, int] = {}
    with sync_playwright() as pw:
        b = Browser(pw, exe, profile, downloads)
        b.open(url)
        assert b.state() == (0, 0)
        assert b.page.locator("#count").inner_text() == f"0 / {n} labelled"
        b.page.fill("#rater", "alice")
        b.page.keyboard.press("1")  # typed into the name field, not a label
        assert b.state() == (0, 0) and b.page.input_value("#rater") == "alice1"
        b.page.keyboard.press("Backspace")
        b.page.keyboard.press("Enter")  # leave the name field: digits label again
        for k, key in enumerate("101"):
            b.page.keyboard.press(key)
            pressed[k] = int(key)
        assert b.state() == (3, 3)
        b.page.keyboard.press("7")  # not on the binary scale: ignored
        assert b.state() == (3, 3)
        b.page.reload()
        b.page.wait_for_selector("body[data-labelled]")
        assert b.state() == (3, 3), "labels and position survive a reload"
        assert b.page.input_value("#rater") == "alice"
        b.page.keyboard.press("ArrowLeft")
        b.page.keyboard.press("Backspace")  # clear the label of pair 3 ...
        assert b.state() == (2, 2)
        b.page.keyboard.press("0")  # ... and give it another one
        pressed[2] = 0
        assert b.state() == (3, 3)
        _assert_offline(b, url)
        # Chromium writes localStorage to disk in batches a few seconds apart (so does a person's browser):
        # give it that time before closing, as a person who closes the window does; on a busy machine
        # the write can come later, so wait until the profile's Local Storage has been quiet for 3 s
        b.page.wait_for_timeout(6000)
        _wait_local_storage_written(profile)
        b.close()

        # close the browser, come back later with the same profile: resume where we were
        b = Browser(pw, exe, profile, downloads)
        b.open(url)
        assert b.state() == (3, 3), "progress survives closing the browser"
        b.page.keyboard.press("ArrowRight")
        b.page.keyboard.press("n")  # next unlabelled from pair 5 is pair 6 ... and wraps around
        assert b.state() == (3, 5)
        b.page.keyboard.press("ArrowLeft")
        b.page.keyboard.press("ArrowLeft")
        for k in range(3, n):
            key = "1" if k % 2 else "0"
            b.page.keyboard.press(key)
            pressed[k] = int(key)
        assert b.state()[0] == n
        assert b.page.locator("#done").is_visible()
        assert b.page.locator("#count").inner_text() == f"{n} / {n} labelled"
        with b.page.expect_download() as dl:
            b.page.click("#export-json")
        json_file = tmp_path / "labels.json"
        dl.value.save_as(json_file)
        with b.page.expect_download() as dl:
            b.page.click("#export-csv")
        csv_file = tmp_path / "labels.csv"
        dl.value.save_as(csv_file)
        _assert_offline(b, url)
        b.close()

    doc = json.loads(json_file.read_text())
    assert doc["format"] == "benchmaker-audit-labels" and doc["rater"] == "alice" and len(doc["labels"]) == n
    order = sample["item_id"].to_list()
    want = {order[k]: v for k, v in pressed.items()}
    for f in (json_file, csv_file):
        got = import_labels([{"path": str(f)}], sample, Scale("binary"), require_complete=True)
        assert got["rater"].unique().to_list() == ["alice"]
        assert dict(got.select("item_id", "label").iter_rows()) == want


def test_graded_keys_and_visible_judge(tmp_path):
    exe = _chromium()
    from playwright.sync_api import sync_playwright

    paths = audit_support.make_bench(tmp_path / "bench", graded=True)
    sample, meta = audit_support.draw(paths, tmp_path / "bench" / "audit", sample_size=8, strata=["pool"])
    out = tmp_path / "bench" / "audit" / "labelling"
    L.run(sample=str(sample), sample_meta=str(meta), images=str(paths["images"]), labelling=str(out),
          settings={"thumbnail_max_side": 64, "show_judge_label": True}, image_root=str(paths["image_root"]),
          labels="graded")
    # the page works when opened from a copy elsewhere (self-contained)
    copy = tmp_path / "elsewhere" / "label.html"
    copy.parent.mkdir()
    shutil.copyfile(out / "label.html", copy)
    url = copy.as_uri()
    first = read_sample(sample).row(0, named=True)
    with sync_playwright() as pw:
        b = Browser(pw, exe, tmp_path / "profile", tmp_path / "dl")
        b.open(url)
        assert b.page.locator("#choices button").count() == 4
        assert b.page.locator("#judge").inner_text() == (
            f"The judge said: {first['judge_label']} ({Scale('graded').names[first['judge_label']]})")
        assert b.page.locator("#img").get_attribute("src").startswith("data:image/jpeg;base64,")
        b.page.keyboard.press("3")
        b.page.keyboard.press("4")  # off the 0..3 scale
        assert b.state() == (1, 1)
        text = b.page.evaluate("window.benchmakerAudit.exportText('json')")
        assert json.loads(text)["labels"][0]["label"] == 3
        _assert_offline(b, url)
        b.close()


def test_the_checks_can_fail(tmp_path):
    """The listeners used above do see requests and console errors (on a page that makes them)."""
    exe = _chromium()
    from playwright.sync_api import sync_playwright

    bad = tmp_path / "bad.html"
    bad.write_text('<!doctype html><body data-labelled="0" data-pos="0"><img src="http://127.0.0.1:9/x.png">'
                   '<script>console.error("boom")</script></body>')
    with sync_playwright() as pw:
        b = Browser(pw, exe, tmp_path / "profile", tmp_path / "dl")
        b.open(bad.as_uri())
        b.page.wait_for_timeout(500)
        with pytest.raises(AssertionError):
            _assert_offline(b, bad.as_uri())
        assert any(u.startswith("http://127.0.0.1:9/") for u in b.requests)
        assert any("boom" in m for m in b.console)
        b.close()

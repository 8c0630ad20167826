"""Stage logging: the terminal gets progress once per stage, each warning once, no third-party chatter;
the log file gets everything; BENCHMAKER_VERBOSE=1 shows it all."""

from __future__ import annotations

import io
import logging
import sys
import warnings
from pathlib import Path

import pytest

from benchmaker import logs
from benchmaker.errors import UserError


@pytest.fixture()
def term(monkeypatch):
    buf = io.StringIO()
    monkeypatch.setattr(sys, "__stderr__", buf)
    monkeypatch.delenv("BENCHMAKER_VERBOSE", raising=False)
    return buf


def _stage(log_path):
    with logs.stage_logging(str(log_path)) as logger:
        with logs.progress(range(50), desc="embed", unit="img", mininterval=0) as bar:
            for _ in bar:
                pass
        for q in range(30):
            logging.getLogger("benchmaker.plan").warning("query %s: pool neg got %d of %d", q, 1, 3)
        logging.getLogger("benchmaker.plan").warning("a different warning")
        logging.getLogger("httpcore.connection").debug("connect_tcp.started host='x'")
        logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 1s [Retry 1/5].")
        logging.getLogger("benchmaker.plan").info("planned 30 queries")
        # open_clip logs INFO on the root logger from its own modules
        rec = logging.LogRecord("root", logging.INFO, "/x/site-packages/open_clip/factory.py", 1,
                                "Loaded ViT-B-32 model config.", None, None)
        logging.getLogger().handle(rec)
        warnings.warn("a python warning", UserWarning, stacklevel=1)
        logger.debug("detail")


def test_terminal_is_short_and_log_is_complete(tmp_path, term):
    log_path = tmp_path / "stage.log"
    _stage(log_path)
    out = term.getvalue().splitlines()
    progress = [ln for ln in out if "embed:" in ln]
    assert len(progress) == 1 and "50/50 img done" in progress[0] and "img/s" in progress[0]
    assert sum("pool neg got" in ln for ln in out) == 1
    assert any("a different warning" in ln for ln in out)
    assert any("a python warning" in ln for ln in out)
    assert any("repeated or third-party warning(s) not shown" in ln for ln in out)
    assert not any("Retry" in ln or "httpcore" in ln or "Loaded ViT" in ln or "planned 30" in ln for ln in out)
    text = log_path.read_text()
    assert text.count("pool neg got") == 30
    assert "planned 30 queries" in text and "detail" in text and "Retrying in 1s" in text
    assert "Loaded ViT" not in text and "connect_tcp" not in text


def test_verbose_shows_everything(tmp_path, term, monkeypatch):
    monkeypatch.setenv("BENCHMAKER_VERBOSE", "1")
    _stage(tmp_path / "stage.log")
    out = term.getvalue()
    assert out.count("pool neg got") == 30 and "planned 30 queries" in out and "detail" in out


def test_long_stage_reports_eta_on_the_terminal(tmp_path, term, monkeypatch):
    monkeypatch.setenv("BENCHMAKER_PROGRESS_SECONDS", "0")
    with logs.stage_logging(str(tmp_path / "s.log")):
        with logs.progress(total=4, desc="judge", unit="query", mininterval=0) as bar:
            for _ in range(4):
                bar.update(1)
    lines = [ln for ln in term.getvalue().splitlines() if "judge:" in ln]
    assert any("ETA" in ln for ln in lines) and "4/4 query done" in lines[-1]


def test_tqdm_disable_turns_progress_off_without_failing(tmp_path):
    """TQDM_DISABLE=1 (tqdm's own switch, read when tqdm is imported) used to crash a stage whose
    progress ran past the terminal interval: '_Progress' object has no attribute 'desc'."""
    import os
    import subprocess
    from pathlib import Path

    code = ("from benchmaker import logs\n"
            "with logs.stage_logging(None):\n"
            "    with logs.progress(total=4, desc='judge', unit='query', mininterval=0) as bar:\n"
            "        for _ in range(4):\n"
            "            bar.update(1)\n"
            "    assert list(logs.progress(range(3), desc='embed')) == [0, 1, 2]\n"
            "print('ok')\n")
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = dict(os.environ, TQDM_DISABLE="1", BENCHMAKER_PROGRESS_SECONDS="0", PYTHONPATH=src)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
    assert "judge:" not in r.stderr


def test_failure_block_and_error_file(tmp_path, term):
    log_path = tmp_path / "logs" / "vision" / "00000.log"
    with pytest.raises(UserError):
        with logs.stage_logging(str(log_path), rule="vision"):
            raise UserError("paths.image_root: folder 'x' does not exist; fix the path")
    out = term.getvalue()
    assert "Traceback" not in out
    assert "benchmaker: rule vision failed:" in out and "fix the path" in out and str(log_path) in out
    assert "Traceback" in log_path.read_text()
    err = log_path.with_name("00000.log.error").read_text()
    assert "fix the path" in err
    # a second shard failing the same way is told once, with both logs counted
    log2 = tmp_path / "logs" / "vision" / "00001.log"
    with pytest.raises(UserError):
        with logs.stage_logging(str(log2), rule="vision"):
            raise UserError("paths.image_root: folder 'x' does not exist; fix the path")
    summary = logs.failure_summary(tmp_path / "logs", since=0)
    assert summary.count("fix the path") == 1 and "(in 2 jobs)" in summary
    # a later successful run of the stage removes its stale error file
    with logs.stage_logging(str(log_path), rule="vision"):
        pass
    assert not log_path.with_name("00000.log.error").exists()


def test_unexpected_error_says_so(tmp_path, term):
    with pytest.raises(ZeroDivisionError):
        with logs.stage_logging(str(tmp_path / "s.log"), rule="score"):
            raise ZeroDivisionError("division by zero")
    out = term.getvalue()
    assert "ZeroDivisionError" in out and "unexpected error" in out and "Traceback" not in out


def test_empty_progress_says_nothing_to_do(tmp_path, term):
    with logs.stage_logging(str(tmp_path / "s.log")):
        with logs.progress(total=0, desc="embed 00000", unit="img"):
            pass
    assert "embed 00000: nothing to do (0 img)" in term.getvalue()


def test_every_error_written_for_the_user_gets_the_short_block():
    """An exception class documented as carrying the fix in its message is a user error: its block has no
    "unexpected error: please report it" (an audit label file with a wrong id used to get that line)."""
    import ast
    import re

    from benchmaker.audit.labels import LabelImportError
    from benchmaker.logs import USER_ERROR_NAMES, error_block

    says_fix = re.compile(r"message (says|names)|says how to fix|names the (file|key)")
    missing = []
    for f in sorted((Path(__file__).resolve().parents[1] / "src" / "benchmaker").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and says_fix.search(ast.get_docstring(node) or "") \
                    and node.name.endswith("Error") and node.name not in USER_ERROR_NAMES:
                missing.append(f"{f.name}:{node.name}")
    assert not missing, missing
    block = error_block(LabelImportError("bob.csv: row 6: item 'ffff' is not in the audit sample"), rule="audit_report")
    assert "unexpected" not in block and "bob.csv: row 6" in block

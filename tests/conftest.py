"""Shared fixtures. Everything runs offline: HF_HUB_OFFLINE=1, tiny random CLIP checkpoints."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmaker import _tvshim  # noqa: E402

_tvshim.install()

import support  # noqa: E402


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory) -> Path:
    """A tiny random open_clip model as a local-dir: folder (use model=f'local-dir:{path}')."""
    return support.make_tiny_clip(tmp_path_factory.mktemp("tiny_clip"))


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """30 small generated images in 5 colour folders + 3 bad files in broken/ (read-only use)."""
    return support.make_corpus(tmp_path_factory.mktemp("corpus") / "images")


@pytest.fixture()
def fake(monkeypatch):
    """The strict fake OpenAI server (tests/fake_openai.py), answering after 2 polls, with a fast
    Retry-After and a test key in OPENAI_API_KEY. A test file may define its own ``fake``."""
    import fake_openai

    f = fake_openai.start(steps=2)
    f.retry_after = "0.01"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    yield f
    fake_openai.stop(f)


@pytest.fixture()
def tiny_cfg(tmp_path, tiny_corpus, tiny_clip) -> dict:
    return support.tiny_config(tmp_path, tiny_corpus, tiny_clip)


# In CI the real-SLURM tests must run: a skip (no root, no apt, no package source, ...) fails the
# test there unless BENCHMAKER_ALLOW_SLURM_SKIP=1 says that this CI machine cannot run them.
def _slurm_skip_allowed() -> bool:
    return os.environ.get("CI", "").lower() != "true" or os.environ.get("BENCHMAKER_ALLOW_SLURM_SKIP") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.get_closest_marker("slurm") is not None and not _slurm_skip_allowed():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"SLURM test skipped in CI ({reason}); fix the CI machine, or set "
                           "BENCHMAKER_ALLOW_SLURM_SKIP=1 to allow the skip explicitly")

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
def tiny_cfg(tmp_path, tiny_corpus, tiny_clip) -> dict:
    return support.tiny_config(tmp_path, tiny_corpus, tiny_clip)

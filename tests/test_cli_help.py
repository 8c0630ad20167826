"""The benchmaker command's help and exit codes (0 success, 1 failure, 2 usage)."""

from __future__ import annotations

import argparse

import pytest
from support import tiny_config, write_config

from benchmaker.cli import _parser, main
from benchmaker.urlcheck import UrlResult


def _subparsers(ap: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in ap._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_every_command_and_option_has_help_with_defaults():
    ap = _parser()
    subs = _subparsers(ap)
    assert {"validate-config", "estimate", "batches", "check-urls", "install-profiles", "import-upstream"} <= set(subs)
    for name, p in subs.items():
        text = p.format_help()
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"{name} {action.dest}: no help"
            if action.option_strings:
                shown = p._get_formatter()._get_help_string(action)
                assert "default" in shown, f"{name} {action.option_strings}: no default shown"
        assert text.strip()
    assert "Exit status: 0 success" in ap.format_help()


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["no-such-command"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["validate-config"])               # CONFIG missing
    assert e.value.code == 2


def test_batches_list_with_nothing_to_list_exits_0(tmp_path, tiny_corpus, tiny_clip, capsys):
    path = write_config(tmp_path / "c.yaml", tiny_config(tmp_path, tiny_corpus, tiny_clip))
    assert main(["batches", "list", str(path)]) == 0
    assert "no batches" in capsys.readouterr().out
    assert main(["batches", "cancel", str(path)]) == 0


def test_missing_images_jsonl_is_a_failure_not_usage(tmp_path, tiny_corpus, tiny_clip, capsys):
    path = write_config(tmp_path / "c.yaml", tiny_config(tmp_path, tiny_corpus, tiny_clip))
    assert main(["check-urls", str(path)]) == 1
    assert "snakemake" in capsys.readouterr().err


def test_check_urls_never_prints_none(tmp_path, tiny_corpus, tiny_clip, capsys, monkeypatch):
    import polars as pl

    from benchmaker import urlcheck
    from benchmaker.formats import write_table

    cfg = tiny_config(tmp_path, tiny_corpus, tiny_clip)
    path = write_config(tmp_path / "c.yaml", cfg)
    df = pl.DataFrame({"image_id": ["a.jpg", "b.jpg"], "image_url": [None, "http://x/b.jpg"],
                       "mime_type": ["image/jpeg"] * 2, "width": [1] * 2, "height": [1] * 2, "file_size": [1] * 2,
                       "sha256": ["x"] * 2, "phash": [None] * 2, "license": [None] * 2, "doi": [None] * 2,
                       "original_dataset_name": ["d"] * 2}, schema_overrides={"image_url": pl.String})
    write_table(df, "images", tmp_path / "results" / "tiny" / "images.jsonl")
    monkeypatch.setattr(urlcheck, "check_urls", lambda items, **kw: [
        UrlResult("a.jpg", None, False, None, "no image_url (set preprocess.image_base_url)"),
        UrlResult("b.jpg", "http://x/b.jpg", False, 500, None)])
    assert main(["check-urls", str(path)]) == 1
    out = capsys.readouterr().out
    assert "None" not in out
    assert "a.jpg: no image_url" in out and "b.jpg: HTTP 500 (http://x/b.jpg)" in out

"""Reading and writing the audit's own files (docs/formats.md, section "Judge audit")."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import polars as pl

from ..formats import FormatError, read_table, write_table

__all__ = ["write_sample", "read_sample", "read_sample_meta", "Scale", "scale_for"]


def write_sample(df: pl.DataFrame, path: str | os.PathLike) -> int:
    return write_table(df, "audit_sample", path)


def read_sample(path: str | os.PathLike) -> pl.DataFrame:
    df = read_table("audit_sample", path)
    if not df.height:
        raise FormatError(f"{path}: the audit sample is empty")
    return df.sort("order")


def read_sample_meta(path: str | os.PathLike) -> dict[str, Any]:
    try:
        meta = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FormatError(f"{path}: file not found (the audit sample's metadata)") from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path}: not valid JSON: {exc}") from None
    for key in ("sample_id", "labels", "sample_pairs"):
        if key not in meta:
            raise FormatError(f"{path}: missing key {key!r} (audit sample metadata)")
    return meta


class Scale:
    """The label scale of the benchmark (``judge.labels``): values, names and keyboard keys."""

    def __init__(self, kind: str):
        if kind not in ("binary", "graded"):
            raise ValueError(f"judge.labels: unknown scale {kind!r} (binary or graded)")
        self.kind = kind
        if kind == "binary":
            self.names = {0: "not relevant", 1: "relevant"}
        else:
            self.names = {0: "not relevant", 1: "partly relevant", 2: "relevant", 3: "highly relevant"}

    @property
    def values(self) -> list[int]:
        return list(self.names)

    @property
    def max(self) -> int:
        return max(self.names)

    def choice(self, value: int) -> str:
        """The Label Studio choice text of a label, e.g. ``relevant (1)``."""
        return f"{self.names[value]} ({value})"

    def parse(self, raw: Any) -> int | None:
        """A label from a file: an int, a digit string, a choice text or a label name; None if empty.
        Raises ValueError (with the allowed values) for anything else or a value outside the scale."""
        if raw is None or (isinstance(raw, float) and raw != raw) or (isinstance(raw, str) and not raw.strip()):
            return None
        if isinstance(raw, bool):
            raise ValueError(f"label {raw!r} is not on the {self.kind} scale {self.values}")
        value: int | None = None
        if isinstance(raw, (int, float)) and float(raw).is_integer():
            value = int(raw)
        elif isinstance(raw, str):
            text = raw.strip()
            by_name = {n: v for v, n in self.names.items()} | {self.choice(v): v for v in self.names}
            if text.lstrip("-").isdigit():
                value = int(text)
            elif text in by_name:
                value = by_name[text]
        if value is None or value not in self.names:
            allowed = ", ".join(f"{v} ({n})" for v, n in self.names.items())
            raise ValueError(f"label {raw!r} is not on the {self.kind} scale: {allowed}")
        return value


def scale_for(kind: str) -> Scale:
    return Scale(kind)

"""The losses file: every permanent loss of a stage (an image, a query or a pair) with its reason.

Format (docs/formats.md, kind ``losses``): one JSON object per line with
``stage, item_type (image|query|pair), item_id, reason, detail, attempts`` and, for pairs, ``query_id``.
The summary and the dataset card report these files; nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import polars as pl

from .formats import empty_table, read_table, write_table

__all__ = ["Losses", "read_losses", "merge_losses", "nothing_to_do"]


@dataclass
class Losses:
    stage: str
    rows: list[dict] = field(default_factory=list)

    def add(self, item_type: str, item_id: str, reason: str, detail: str | None = None,
            attempts: int = 1, query_id: str | None = None) -> None:
        if item_type not in ("image", "query", "pair"):
            raise ValueError(f"item_type must be image, query or pair, not {item_type!r}")
        self.rows.append({
            "stage": self.stage, "item_type": item_type, "item_id": str(item_id), "reason": reason,
            "detail": None if detail is None else str(detail)[:2000], "attempts": int(attempts),
            "query_id": query_id,
        })

    def __len__(self) -> int:
        return len(self.rows)

    def to_frame(self) -> pl.DataFrame:
        if not self.rows:
            return empty_table("losses").with_columns(pl.lit(None, pl.String).alias("query_id"))
        return pl.DataFrame(self.rows, schema={
            "stage": pl.String, "item_type": pl.String, "item_id": pl.String, "reason": pl.String,
            "detail": pl.String, "attempts": pl.Int64, "query_id": pl.String,
        })

    def write(self, path: str | Path) -> int:
        return write_table(self.to_frame(), "losses", path)


def read_losses(path: str | Path) -> pl.DataFrame:
    df = read_table("losses", path)
    if "query_id" not in df.columns:
        df = df.with_columns(pl.lit(None, pl.String).alias("query_id"))
    return df.select("stage", "item_type", "item_id", "reason", "detail", "attempts",
                     pl.col("query_id").cast(pl.String))


def merge_losses(paths: Iterable[str | Path], out: str | Path) -> int:
    frames = [read_losses(p) for p in paths]
    frames = [f for f in frames if f.height]
    df = pl.concat(frames) if frames else Losses("merged").to_frame()
    return write_table(df, "losses", out)


_FIXES = {
    "api_error": "the API's message is in the detail column (quota, model name, base_url, a server outage)",
    "key_rejected": "check the API key in the environment variable named by <stage>.<adapter>.api_key_env",
    "bad_input": "the images named there cannot be read: replace or remove them",
    "schema_violation": "the model's answers did not follow the schema: try another model or raise max_attempts",
    "incomplete": "answers were cut off: raise max_output_tokens",
    "refusal": "the model refused: check the prompts and images named there",
    "missing_annotation": "the images were lost in the vision stage: see losses/vision.jsonl",
}


def nothing_to_do(stage: str, what: str, losses_dir: str | Path):
    """The error a stage raises when its input is empty because everything upstream was lost: it
    names each losses file with its counts and top reasons, and what to do (a
    :class:`~benchmaker.errors.UserError`: one short block, no traceback)."""
    from .errors import NothingToDo

    d = Path(losses_dir)
    lines = [f"{stage}: nothing to do: {what}.", "Everything upstream was lost; the losses files say why:"]
    reasons: dict[str, int] = {}
    for p in sorted(d.glob("*.jsonl")) if d.is_dir() else []:
        try:
            df = read_losses(p)
        except Exception:  # noqa: BLE001 - a damaged file is named, not a second crash
            lines.append(f"  {p}: unreadable")
            continue
        if not df.height:
            continue
        top = df.group_by("reason").len().sort(["len", "reason"], descending=[True, False])
        for r, n in top.iter_rows():
            reasons[r] = reasons.get(r, 0) + n
        lines.append(f"  {p}: {df.height} lost ({', '.join(f'{r}: {n}' for r, n in top.head(3).iter_rows())})")
    if not reasons:
        lines.append(f"  (no losses file under {d} names a loss: check the earlier stages' logs)")
    fixes = [f"  - {r}: {_FIXES[r]}" for r in sorted(reasons, key=lambda r: -reasons[r]) if r in _FIXES]
    lines += ["Fix:", *fixes[:3],
              "  then rerun the same command: answers already paid for are in the response cache and are "
              "not paid again."]
    return NothingToDo("\n".join(lines))

"""report.md and report.html: a stage's charts and tables in one page (no extra dependencies)."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ..io import atomic_write_text

__all__ = ["Section", "write_report", "md_table"]


@dataclass
class Section:
    title: str
    text: str = ""
    images: list[str] = field(default_factory=list)
    table: pl.DataFrame | None = None
    files: list[str] = field(default_factory=list)
    max_rows: int = 30
    empty: str = ""  # said instead of the table when it has no rows (a header-only table says nothing)


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return ", ".join(map(str, v))
    return str(v)


def md_table(df: pl.DataFrame, max_rows: int = 30) -> str:
    if not df.width:
        return ""
    head = "| " + " | ".join(df.columns) + " |\n| " + " | ".join("---" for _ in df.columns) + " |\n"
    body = "".join("| " + " | ".join(_fmt(v).replace("|", "\\|").replace("\n", " ") for v in row) + " |\n"
                   for row in df.head(max_rows).iter_rows())
    more = f"\n({df.height - max_rows} more rows in the CSV)\n" if df.height > max_rows else ""
    return head + body + more


def _html_table(df: pl.DataFrame, max_rows: int) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
                   for row in df.head(max_rows).iter_rows())
    more = f"<p class=more>{df.height - max_rows} more rows in the CSV.</p>" if df.height > max_rows else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{more}"


CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:left}th{background:#f3f3f3}img{max-width:100%;border:1px solid #eee;margin:.5em 0}
.more,.files{color:#666;font-size:13px}"""


def write_report(out_dir: Path, title: str, intro: str, sections: list[Section]) -> None:
    md = [f"# {title}\n", intro, ""]
    body = [f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(intro)}</p>"]
    toc = []
    for i, s in enumerate(sections):
        anchor = f"s{i}"
        toc.append(f'<li><a href="#{anchor}">{html.escape(s.title)}</a></li>')
        md.append(f"## {s.title}\n")
        body.append(f'<h2 id="{anchor}">{html.escape(s.title)}</h2>')
        if s.text:
            md.append(s.text + "\n")
            body.append("".join(f"<p>{html.escape(p)}</p>" for p in s.text.split("\n\n")))
        for img in s.images:
            md.append(f"![{s.title}]({img})\n")
            body.append(f'<img src="{html.escape(img)}" alt="{html.escape(s.title)}">')
        if s.table is not None and s.table.width and (s.table.height or not s.empty):
            md.append(md_table(s.table, s.max_rows))
            body.append(_html_table(s.table, s.max_rows))
        elif s.table is not None and s.empty:
            md.append(s.empty + "\n")
            body.append(f"<p>{html.escape(s.empty)}</p>")
        if s.files:
            md.append("Files: " + ", ".join(f"[{f}]({f})" for f in s.files) + "\n")
            body.append('<p class=files>Files: ' + ", ".join(
                f'<a href="{html.escape(f)}">{html.escape(f)}</a>' for f in s.files) + "</p>")
    page = (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>{body[0]}{body[1]}<ul>{''.join(toc)}</ul>{''.join(body[2:])}"
            "</body></html>\n")
    atomic_write_text(out_dir / "report.md", "\n".join(md))
    atomic_write_text(out_dir / "report.html", page)

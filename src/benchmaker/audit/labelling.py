"""Everything a person needs to label the audit sample (rule ``audit_labelling``, folder ``audit/labelling/``).

* ``label.html``: one self-contained page (inline CSS and JavaScript, images embedded as JPEG data-URI
  thumbnails): it works from ``file://`` with no network and no server, can be copied or mailed alone,
  keeps progress in the browser's localStorage under the sample id, and exports the labels as JSON or CSV.
* ``label_studio_tasks.json`` (the judge's label as a prediction), ``label_studio_tasks_blind.json``
  (without), ``label_studio_config.xml`` (the labelling interface for the benchmark's scale).
* ``sample.csv``: one row per pair with an empty ``label`` column to fill in.

The judge's label is left out of the page and the CSV unless ``audit.show_judge_label`` is true (blind
labelling): hidden means absent from the file, not merely invisible.
"""

from __future__ import annotations

import base64
import io
import json
from importlib import resources
from pathlib import Path
from typing import Any, Mapping
from xml.sax.saxutils import quoteattr

import polars as pl

from ..formats import read_table
from ..io import atomic_path, atomic_write_text
from ..logs import get_logger
from ..pages.outdir import staged_dir
from ..settings_schema import default
from .files import Scale, read_sample, read_sample_meta

__all__ = ["run", "render_page", "thumbnail_data_uri", "label_studio_config", "label_studio_tasks",
           "MARKER", "LS_FROM", "LS_TO"]

log = get_logger("audit")
MARKER = "labelling.json"
LS_FROM, LS_TO = "relevance", "image"


def thumbnail_data_uri(path: Path, max_side: int, quality: int = 82) -> str | None:
    """A JPEG data URI of the image downscaled to ``max_side``; None when it cannot be read."""
    from ..imaging import decode  # the one decoder: EXIF, 16-bit, CMYK, palette, transparency

    try:
        with decode(path, draft_size=(max_side, max_side)) as im:
            im.thumbnail((max_side, max_side))
            buf = io.BytesIO()
            im.save(buf, format="JPEG", quality=quality, optimize=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file becomes a visible placeholder
        log.warning("audit: image %s cannot be read for the labelling page: %s", path, exc)
        return None
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _json_for_script(obj: Any) -> str:
    """JSON safe inside <script>: no '</' or '<!--' can end or comment the element."""
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render_page(sample: pl.DataFrame, meta: Mapping[str, Any], scale: Scale, *, image_root: str, max_side: int,
                show_judge_label: bool, title: str) -> str:
    items = []
    for r in sample.iter_rows(named=True):
        item = {"id": r["item_id"], "q": r["query_id"], "t": r["query_text"], "i": r["image_id"],
                "src": thumbnail_data_uri(Path(image_root) / r["image_id"], max_side)}
        if show_judge_label:
            item["j"] = r["judge_label"]
        items.append(item)
    data = {
        "sample_id": meta["sample_id"], "benchmark": meta.get("benchmark"), "title": title,
        "scale": [{"value": v, "name": n} for v, n in scale.names.items()], "scale_kind": scale.kind,
        "show_judge": bool(show_judge_label), "items": items,
    }
    template = resources.files("benchmaker.audit").joinpath("page.html").read_text(encoding="utf-8")
    return (template.replace("__TITLE__", _html_escape(title))
            .replace("/*__DATA__*/null", _json_for_script(data)))


def _html_escape(s: str) -> str:
    import html

    return html.escape(s, quote=True)


def label_studio_config(scale: Scale) -> str:
    """The Label Studio labelling interface: query text, image, one choice per label (hotkeys = digits)."""
    choices = "\n".join(f'    <Choice value={quoteattr(scale.choice(v))} hotkey="{v}"/>' for v in scale.values)
    return ("<View>\n"
            '  <Header value="$query_text"/>\n'
            f'  <Image name="{LS_TO}" value="$image" maxWidth="640px"/>\n'
            f'  <Choices name="{LS_FROM}" toName="{LS_TO}" choice="single" required="true" showInLine="true">\n'
            f"{choices}\n"
            "  </Choices>\n"
            "</View>\n")


def _image_ref(image_id: str, url: str | None, prefix: str) -> str:
    if url:
        return url
    from urllib.parse import quote

    return prefix + quote(image_id, safe="/")


def label_studio_tasks(sample: pl.DataFrame, meta: Mapping[str, Any], scale: Scale, urls: Mapping[str, str | None],
                       *, prefix: str, predictions: bool) -> list[dict]:
    tasks = []
    for r in sample.iter_rows(named=True):
        task: dict[str, Any] = {"data": {
            "image": _image_ref(r["image_id"], urls.get(r["image_id"]), prefix),
            "query_text": r["query_text"], "item_id": r["item_id"], "query_id": r["query_id"],
            "image_id": r["image_id"], "sample_id": meta["sample_id"]}}
        if predictions:
            task["predictions"] = [{"model_version": r["judge"], "result": [{
                "from_name": LS_FROM, "to_name": LS_TO, "type": "choices",
                "value": {"choices": [scale.choice(int(r["judge_label"]))]}}]}]
        tasks.append(task)
    return tasks


def run(*, sample: str, sample_meta: str, images: str, labelling: str, settings: Mapping[str, Any],
        image_root: str, columns: Mapping[str, str] | None = None, labels: str = default("judge.labels"),
        benchmark_meta: Mapping[str, Any] | None = None, version: str | None = None) -> dict[str, Any]:
    s = read_sample(sample)
    meta = read_sample_meta(sample_meta)
    scale = Scale(labels)
    from ..settings_schema import filled

    settings = filled("audit", settings)
    show = bool(settings["show_judge_label"])
    max_side = int(settings["thumbnail_max_side"])
    prefix = str(settings["label_studio_image_prefix"])
    bm = dict(benchmark_meta or {})
    title = f"{bm.get('title') or bm.get('name') or 'benchmark'}: judge audit"
    imgs = read_table("images", images, columns=columns)
    urls = dict(imgs.filter(pl.col("image_id").is_in(s["image_id"].unique().to_list()))
                .select("image_id", "image_url").iter_rows())
    page = render_page(s, meta, scale, image_root=image_root, max_side=max_side, show_judge_label=show, title=title)
    with staged_dir(labelling, MARKER) as out:
        atomic_write_text(out / "label.html", page)
        atomic_write_text(out / "label_studio_config.xml", label_studio_config(scale))
        for name, pred in (("label_studio_tasks.json", True), ("label_studio_tasks_blind.json", False)):
            tasks = label_studio_tasks(s, meta, scale, urls, prefix=prefix, predictions=pred)
            atomic_write_text(out / name, json.dumps(tasks, indent=1, ensure_ascii=False) + "\n")
        csv = s.select("item_id", "query_id", "query_text", "image_id",
                       *(["judge_label"] if show else []), pl.lit("").alias("label"), pl.lit("").alias("rater"))
        with atomic_path(out / "sample.csv", suffix=".csv") as tmp:
            csv.write_csv(tmp)
        info = {"sample_id": meta["sample_id"], "items": s.height, "labels": labels,
                "show_judge_label": show, "thumbnail_max_side": max_side, "stage_version": version,
                "page_bytes": len(page.encode())}
        atomic_write_text(out / MARKER, json.dumps(info, indent=2) + "\n")
    log.info("audit labelling: %d pairs -> %s (label.html %.1f MB)", s.height, labelling,
             info["page_bytes"] / 1e6)
    return info

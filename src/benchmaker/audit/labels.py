"""Import of human labels: the page's JSON or CSV export, a filled-in ``sample.csv``, a Label Studio JSON,
JSON-MIN or CSV export.

Every file is checked against the audit sample; a problem raises :class:`LabelImportError` naming the
file, the row (1-based; CSV rows count the header as row 1) and what to do:

* a pair that is not in the sample (unknown item id, or query/image ids that were never drawn);
* a query text that differs from the sample's (the label was given to another query: re-judged?);
* a label outside the benchmark's scale (``judge.labels``);
* the same pair labelled twice by the same person;
* pairs of the sample without a label, when ``audit.require_complete`` is true (the default).

The result is one long table: ``rater, item_id, label, source``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import polars as pl

from ..logs import get_logger
from ..settings_schema import default
from .files import Scale

__all__ = ["LabelImportError", "read_label_file", "import_labels", "LABELS_SCHEMA"]

log = get_logger("audit")
LABELS_SCHEMA = {"rater": pl.String, "item_id": pl.String, "label": pl.Int64, "source": pl.String}


class LabelImportError(ValueError):
    """A human label file does not match the audit sample; the message names the file and row."""


def _records_page(path: Path, doc: Mapping[str, Any]) -> Iterable[tuple[str, dict]]:
    rater = str(doc.get("rater") or "").strip()
    labels = doc.get("labels")
    if not isinstance(labels, list):
        raise LabelImportError(f"{path}: key 'labels' must be a list (a benchmaker labelling page export)")
    for i, r in enumerate(labels, start=1):
        if not isinstance(r, Mapping):
            raise LabelImportError(f"{path}: labels[{i - 1}] is not an object")
        yield f"labels[{i - 1}]", {**r, "rater": r.get("rater") or rater}


def _completed_by(ann: Mapping[str, Any]) -> str:
    who = ann.get("completed_by")
    if isinstance(who, Mapping):
        who = who.get("email") or who.get("username") or who.get("id")
    return "" if who is None else str(who)


def _records_label_studio(path: Path, tasks: list) -> Iterable[tuple[str, dict]]:
    from .labelling import LS_FROM

    for t_i, task in enumerate(tasks):
        if not isinstance(task, Mapping) or not isinstance(task.get("data"), Mapping):
            raise LabelImportError(f"{path}: task [{t_i}] has no 'data' object (not a Label Studio JSON export; "
                                   "a JSON-MIN export's records each have 'annotator')")
        data = task["data"]
        for a_i, ann in enumerate(task.get("annotations") or []):
            if ann.get("was_cancelled"):
                continue
            choices = [r for r in ann.get("result") or []
                       if r.get("from_name") == LS_FROM and r.get("type", "choices") == "choices"]
            if not choices:
                continue
            picked = (choices[0].get("value") or {}).get("choices") or []
            if len(picked) != 1:
                raise LabelImportError(f"{path}: task [{t_i}] annotation [{a_i}]: expected one choice, got {picked}")
            yield f"task [{t_i}] annotation [{a_i}]", {
                "item_id": data.get("item_id"), "query_id": data.get("query_id"), "image_id": data.get("image_id"),
                "query_text": data.get("query_text"), "label": picked[0], "rater_ls": _completed_by(ann)}


def _records_label_studio_min(path: Path, records: list) -> Iterable[tuple[str, dict]]:
    """Label Studio's JSON-MIN export (label-studio-sdk's ``Converter.convert_to_json_min``): one flat object
    per annotation that was not cancelled: the task's data fields, ``id`` (the task's), the choice under the
    Choices name (a string; an object ``{"choices": [...]}`` when several were picked), ``annotator`` (the
    user's email or id), ``annotation_id``, ``created_at``, ``updated_at``, ``lead_time``; a task without
    annotations is one object without a choice (not labelled)."""
    from .labelling import LS_FROM

    for i, r in enumerate(records):
        where = f"record [{i}]"
        if not isinstance(r, Mapping):
            raise LabelImportError(f"{path}: {where} is not an object (a Label Studio JSON-MIN export is a list of "
                                   "objects)")
        if _clean(r.get("item_id")) is None and not (_clean(r.get("query_id")) and _clean(r.get("image_id"))):
            raise LabelImportError(f"{path}: {where}: needs the task's item_id (or query_id and image_id): import "
                                   "the tasks from audit/labelling/label_studio_tasks*.json into Label Studio")
        choice = r.get(LS_FROM)
        if choice is None:
            if r.get("annotation_id") is not None:
                raise LabelImportError(f"{path}: {where}: annotation {r['annotation_id']} has no '{LS_FROM}' choice "
                                       "(label with the project's interface audit/labelling/label_studio_config.xml)")
            continue  # a task not labelled yet
        if not isinstance(choice, (str, int)) or isinstance(choice, bool):
            raise LabelImportError(f"{path}: {where}: expected one choice under '{LS_FROM}', got {choice!r}")
        who = r.get("annotator")
        yield where, {"item_id": r.get("item_id"), "query_id": r.get("query_id"), "image_id": r.get("image_id"),
                      "query_text": r.get("query_text"), "label": choice, "rater_ls": "" if who is None else str(who)}


def _records_csv(path: Path) -> tuple[str, list[tuple[str, dict]]]:
    """A filled ``sample.csv`` or the page's CSV export (a ``label`` column), or Label Studio's CSV export of
    the project's labelling config (the choice in a ``relevance`` column, the annotator in ``annotator``, one
    row per annotation, the task's data fields as columns: label-studio-converter's ``csv2`` export)."""
    from .labelling import LS_FROM

    try:
        df = pl.read_csv(path, infer_schema=False)
    except Exception as exc:  # noqa: BLE001
        raise LabelImportError(f"{path}: not a readable CSV file: {exc}") from None
    studio = "label" not in df.columns and LS_FROM in df.columns
    if "label" not in df.columns and not studio:
        raise LabelImportError(f"{path}: no 'label' column (columns: {df.columns}); fill in the label column of "
                               f"audit/labelling/sample.csv (a Label Studio CSV export has a '{LS_FROM}' column "
                               "when made with audit/labelling/label_studio_config.xml; else use Export → JSON)")
    if "item_id" not in df.columns and not {"query_id", "image_id"} <= set(df.columns):
        raise LabelImportError(f"{path}: needs an 'item_id' column or both 'query_id' and 'image_id'"
                               + ("; a Label Studio export has them when the tasks came from "
                                  "audit/labelling/label_studio_tasks*.json (or use Export → JSON)" if studio else ""))
    if not studio:
        return "csv", [(f"row {i}", r) for i, r in enumerate(df.iter_rows(named=True), start=2)]
    out = []
    for i, r in enumerate(df.iter_rows(named=True), start=2):
        if str(r.get("was_cancelled") or "").strip().lower() in ("true", "1"):
            continue
        out.append((f"row {i}", {**r, "label": r[LS_FROM], "rater_ls": _clean(r.get("annotator")) or ""}))
    return "label-studio-csv", out


def read_label_file(path: str | Path) -> tuple[str, list[tuple[str, dict]]]:
    """(format, [(where, record)]) for one file; the format is recognised from the content."""
    path = Path(path)
    if not path.is_file():
        raise LabelImportError(f"{path}: human label file not found (audit.human_labels)")
    if path.suffix.lower() == ".csv":
        return _records_csv(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LabelImportError(f"{path}: neither CSV (by its name) nor valid JSON: {exc}") from None
    if isinstance(doc, Mapping) and doc.get("format") == "benchmaker-audit-labels":
        return "page", list(_records_page(path, doc))
    if isinstance(doc, list) and doc and isinstance(doc[0], Mapping) and "data" not in doc[0] \
            and "annotator" in doc[0]:  # JSON-MIN: flat records, each with its annotator; full JSON: tasks
        return "label-studio-json-min", list(_records_label_studio_min(path, doc))
    if isinstance(doc, list):
        return "label-studio", list(_records_label_studio(path, doc))
    raise LabelImportError(f"{path}: unknown JSON label file (expected the labelling page's export, "
                           "format 'benchmaker-audit-labels', or a Label Studio JSON or JSON-MIN export, a list)")


def _clean(v: Any) -> str | None:
    if v is None:
        return None
    s = str(v).strip()
    return s or None


def import_labels(files: Sequence[Mapping[str, Any]], sample: pl.DataFrame, scale: Scale, *,
                  require_complete: bool = default("audit.require_complete"),
                  sample_id: str | None = None, counts: list[dict[str, Any]] | None = None) -> pl.DataFrame:
    """All human labels of ``files`` (each ``{path, rater}``), validated against ``sample``. ``counts``, when
    given, receives one ``{path, format, labels, pairs}`` per file (``labels``: the pairs it labels; ``path`` as
    listed, its name when absolute)."""
    by_item = {r["item_id"]: r for r in sample.select("item_id", "query_id", "image_id", "query_text")
               .iter_rows(named=True)}
    by_pair = {(r["query_id"], r["image_id"]): r["item_id"] for r in by_item.values()}
    rows: list[dict] = []
    seen: dict[tuple[str, str], str] = {}
    for spec in files:
        path = Path(spec["path"])
        fmt, records = read_label_file(path)
        cfg_rater = _clean(spec.get("rater"))
        if fmt == "page" and sample_id:
            doc_sid = json.loads(path.read_text(encoding="utf-8")).get("sample_id")
            if doc_sid and doc_sid != sample_id:
                log.warning("%s: exported from sample %s, the current sample is %s (pairs are checked one by one)",
                            path, doc_sid, sample_id)
        n_file = 0
        multi = fmt.startswith("label-studio") and _multi_ls(records)
        for where, r in records:
            at = f"{path}: {where}"
            try:
                label = scale.parse(r.get("label"))
            except ValueError as exc:
                raise LabelImportError(f"{at}: {exc}") from None
            if label is None:
                continue  # not labelled (yet)
            iid, qid, img = _clean(r.get("item_id")), _clean(r.get("query_id")), _clean(r.get("image_id"))
            if iid is None:
                iid = by_pair.get((qid, img))
                if iid is None:
                    raise LabelImportError(f"{at}: pair (query {qid!r}, image {img!r}) is not in the audit sample "
                                           "(audit/sample.jsonl); was the file made for another sample?")
            elif iid not in by_item:
                raise LabelImportError(f"{at}: item {iid!r} is not in the audit sample (audit/sample.jsonl); "
                                       "was the file made for another sample?")
            ref = by_item[iid]
            if (qid and qid != ref["query_id"]) or (img and img != ref["image_id"]):
                raise LabelImportError(f"{at}: item {iid!r} is (query {ref['query_id']!r}, image "
                                       f"{ref['image_id']!r}) in the sample, the file says ({qid!r}, {img!r})")
            text = _clean(r.get("query_text"))
            if text is not None and text != ref["query_text"].strip():
                raise LabelImportError(f"{at}: the query text {text!r} differs from the sample's "
                                       f"{ref['query_text']!r} (query {ref['query_id']}): the judge wrote a new "
                                       "query since this file was made; label the new sample")
            if fmt.startswith("label-studio"):
                who = r.get("rater_ls") or ""
                rater = (f"{cfg_rater}:{who}" if cfg_rater and who and multi else cfg_rater) \
                    or (f"labelstudio:{who}" if who else path.stem)
            else:
                rater = cfg_rater or _clean(r.get("rater")) or path.stem
            key = (rater, iid)
            if key in seen:
                raise LabelImportError(f"{at}: rater {rater!r} labelled item {iid!r} (query {ref['query_id']}, "
                                       f"image {ref['image_id']}) twice (first at {seen[key]})")
            seen[key] = at
            rows.append({"rater": rater, "item_id": iid, "label": label, "source": at})
            n_file += 1
        _file_counted(path, fmt, n_file, sample.height, require_complete)
        if counts is not None:
            # the path as listed; its name when absolute (audit.json: the same bytes from any folder)
            counts.append({"path": path.name if path.is_absolute() else str(path), "format": fmt, "labels": n_file,
                           "pairs": sample.height})
    out = pl.DataFrame(rows, schema=LABELS_SCHEMA)
    if "judge" in out["rater"].unique().to_list():
        raise LabelImportError("a human rater is called 'judge', the name of the judge's labels; set "
                               "audit.human_labels[].rater to another name")
    if require_complete:
        _check_complete(out, sample, by_item)
    return out


def _file_counted(path: Path, fmt: str, n: int, pairs: int, require_complete: bool) -> None:
    """Log a file's count; a listed file that labels nothing is an error (``require_complete``) or a warning,
    never an INFO line: the audit would otherwise say "not audited yet" with the labels seemingly given."""
    if n:
        log.info("audit: %s (%s): %d labels", path, fmt, n)
        return
    what = (f"{path}: no labels (0 of {pairs} sample pairs labelled; every label cell is empty or every "
            "annotation cancelled)")
    if require_complete:
        raise LabelImportError(f"{what}: label the pairs and export again (audit/labelling/label.html, Label "
                               "Studio, or the label column of audit/labelling/sample.csv), remove the file from "
                               "audit.human_labels, or set audit.require_complete: false")
    log.warning("audit: %s; listed under audit.human_labels, it adds nothing to the audit", what)


def _check_complete(out: pl.DataFrame, sample: pl.DataFrame, by_item: Mapping[str, Mapping[str, Any]]) -> None:
    """Every rater labelled every sample pair (``audit.require_complete``), else the first gap, named."""
    for rater in out["rater"].unique(maintain_order=True).to_list():
        have = set(out.filter(pl.col("rater") == rater)["item_id"].to_list())
        missing = [iid for iid in sample["item_id"].to_list() if iid not in have]
        if missing:
            ref = by_item[missing[0]]
            src = out.filter(pl.col("rater") == rater)["source"][0].split(": ")[0]
            raise LabelImportError(
                f"{src}: rater {rater!r} has no label for {len(missing)} of {sample.height} sample pair(s), "
                f"first: item {missing[0]} (query {ref['query_id']}, image {ref['image_id']}); label them "
                "or set audit.require_complete: false to report on the labelled pairs only")


def _multi_ls(records: list[tuple[str, dict]]) -> bool:
    return len({r.get("rater_ls") for _, r in records}) > 1

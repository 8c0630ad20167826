"""The ``metadata`` vision adapter: annotations from labels the collection already has.

For already-labelled collections (camera-trap species, curated categories, a previous annotation run)
no model is needed: the labels arrive through ``paths.metadata_jsonl`` (merged into images.jsonl by
preprocess) and this adapter turns them into annotations under the configured facet model. It is
deterministic, offline and free, and pairs naturally with the ``rules`` judge.

Settings (config ``vision.metadata``):

* ``facet_columns``: facet -> images.jsonl column holding its label (default: the facet's own name);
* ``tags_column``: a column with a list of tags or a comma/semicolon-separated string, e.g. ``label_tags``
  (default ``null`` = no tags; built-in names such as ``tags`` or ``summary`` are kept out of
  images.jsonl by preprocess, so the labels need their own names);
* ``summary_column``: a column with a description, e.g. ``label_summary`` (``null`` = a summary
  templated from the labels);
* ``unknown_value``: what a taxonomy label outside the facet's allowed values becomes, when the facet
  allows it (default ``unknown``); otherwise the image is written to the losses file
  (``invalid_label``), as is an image with a missing label and no ``unknown`` value to fall back on.

Confidence is 1.0 for a label taken from the metadata and 0.0 for a fallback. Tags outside the
vocabulary (when one is configured) are dropped; more than ``tags.max`` are cut in the given order.
A configured column that does not exist at all is a configuration error naming the key.
"""

from __future__ import annotations

from typing import Any, Mapping

import polars as pl

from ..formats import FacetModel, empty_table
from ..logs import get_logger
from ..losses import Losses

__all__ = ["MetadataAnnotator"]

log = get_logger("vision.metadata")

_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f", ""}


class MetadataAnnotator:
    name = "metadata"

    def __init__(self, *, facets: FacetModel, settings: Mapping[str, Any] | None = None, image_root: str = ".",
                 cache_dir: str | None = None, threads: int = 1) -> None:
        from ..settings_schema import filled

        s = filled("vision.metadata", settings)
        self.fm = facets
        self.facet_columns: dict[str, str] = {f: (s.get("facet_columns") or {}).get(f, f) for f in facets.names}
        unknown_facets = sorted(set(s.get("facet_columns") or {}) - set(facets.names))
        if unknown_facets:
            raise ValueError(f"vision.metadata.facet_columns: {unknown_facets} are not facets "
                             f"(known: {', '.join(facets.names)})")
        self.tags_column = s.get("tags_column")
        self.summary_column = s.get("summary_column")
        self.unknown_value = s["unknown_value"]

    def _check_columns(self, images: pl.DataFrame) -> None:
        missing = [f"vision.metadata.facet_columns.{f} -> '{c}'" for f, c in self.facet_columns.items()
                   if c not in images.columns]
        for key, col in (("tags_column", self.tags_column), ("summary_column", self.summary_column)):
            if col and col not in images.columns:
                missing.append(f"vision.metadata.{key} -> '{col}'")
        if missing:
            raise ValueError("vision adapter 'metadata': images.jsonl has no column for "
                             + "; ".join(missing) + " (labels come from paths.metadata_jsonl, merged by preprocess)")

    def _taxonomy(self, facet: str, raw: Any) -> tuple[str | None, float, str | None]:
        allowed = self.fm.taxonomy[facet]
        if raw is not None and str(raw) in allowed:
            return str(raw), 1.0, None
        if raw is not None:
            lowered = {a.lower(): a for a in allowed}
            hit = lowered.get(str(raw).strip().lower().replace(" ", "_")) or lowered.get(str(raw).strip().lower())
            if hit:
                return hit, 1.0, None
        if self.unknown_value in allowed:
            return self.unknown_value, 0.0, None
        why = "missing" if raw is None else f"{raw!r} is not one of {allowed}"
        return None, 0.0, f"{facet}: {why}"

    @staticmethod
    def _boolean(facet: str, raw: Any) -> tuple[bool | None, str | None]:
        if isinstance(raw, bool):
            return raw, None
        if raw is None:
            return None, f"{facet}: missing"
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True, None
        if text in _FALSE:
            return False, None
        return None, f"{facet}: {raw!r} is not a boolean"

    def _tags(self, raw: Any) -> list[str]:
        if raw is None:
            return []
        items = raw if isinstance(raw, (list, tuple)) else str(raw).replace(";", ",").split(",")
        vocab = set(self.fm.vocabulary)
        out: list[str] = []
        for t in items:
            t = str(t).strip()
            if t and (not vocab or t in vocab) and t not in out:
                out.append(t)
        return out[: self.fm.max_tags]

    def annotate(self, images: pl.DataFrame, losses: Losses) -> pl.DataFrame:
        self._check_columns(images)
        rows: list[dict[str, Any]] = []
        short_tags = 0
        use_tags = self.tags_column
        for rec in images.iter_rows(named=True):
            row: dict[str, Any] = {"image_id": rec["image_id"], "annotator": "metadata"}
            conf: dict[str, float] = {}
            problems: list[str] = []
            for facet in self.fm.taxonomy:
                value, c, err = self._taxonomy(facet, rec.get(self.facet_columns[facet]))
                row[facet], conf[facet] = value, c
                if err:
                    problems.append(err)
            for facet in self.fm.boolean:
                value, err = self._boolean(facet, rec.get(self.facet_columns[facet]))
                row[facet], conf[facet] = value, (1.0 if err is None else 0.0)
                if err:
                    problems.append(err)
            if problems:
                losses.add("image", rec["image_id"], "invalid_label", "; ".join(problems))
                continue
            tags = self._tags(rec.get(use_tags)) if use_tags else []
            short_tags += len(tags) < self.fm.min_tags
            row["tags"] = tags
            row["confidence"] = conf
            summary = rec.get(self.summary_column) if self.summary_column else None
            if not summary:
                parts = [str(row[f]).replace("_", " ") for f in self.fm.taxonomy
                         if row[f] not in ("unknown", "other")]
                parts += [f.replace("_", " ") for f in self.fm.boolean if row[f]]
                summary = ", ".join(parts + tags[:3]) or "an image"
            row["summary"] = str(summary)
            rows.append(row)
        if short_tags:
            log.warning("%d images have fewer than tags.min=%d tags in their metadata", short_tags, self.fm.min_tags)
        log.info("metadata: %d annotated, %d lost (invalid or missing labels)", len(rows),
                 images.height - len(rows))
        if not rows:
            return empty_table("annotations", self.fm)
        schema = {"image_id": pl.String, "annotator": pl.String, "summary": pl.String,
                  "tags": pl.List(pl.String), "confidence": self.fm.confidence_dtype()}
        schema |= {f: pl.String for f in self.fm.taxonomy} | {f: pl.Boolean for f in self.fm.boolean}
        return pl.DataFrame(rows, schema=schema)

"""The rights map: license, DOI and dataset name per image.

Format (JSON)::

    {
      "default":  {"license": "CC0-1.0", "doi": null, "dataset_name": "My photos"},
      "prefixes": [{"prefix": "sage/", "license": "CC-BY-4.0", "doi": "10.1109/...", "dataset_name": "Sage"}],
      "files":    {"sage/cam1/0001.jpg": {"license": "CC-BY-SA-4.0"}}
    }

Resolution, per key (license, doi, dataset_name), first non-empty value wins:
exact ``files`` entry -> the longest ``prefix`` that the image_id starts with -> ``default``.
A dataset name that is still empty (or "UNKNOWN") becomes the first path component of the image_id,
or the image_root folder name for files at the root. Keys starting with "_" are comments.
Resolution is vectorised with polars (one ``when/then`` chain over the prefixes, longest first).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import polars as pl

__all__ = ["RightsMap", "RightsMapError", "load_rights_map", "RIGHTS_KEYS"]

RIGHTS_KEYS = ("license", "doi", "dataset_name")
_OUT_COLUMN = {"license": "license", "doi": "doi", "dataset_name": "original_dataset_name"}
_UNSET_NAME = {"", "unknown"}  # a dataset name of "UNKNOWN" means "derive it from the path" (upstream)


class RightsMapError(ValueError):
    """The rights map is not valid; the message names the file and the offending key."""


@dataclass(frozen=True)
class RightsMap:
    default: dict[str, str | None] = field(default_factory=dict)
    files: dict[str, dict[str, str | None]] = field(default_factory=dict)
    prefixes: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)  # longest first

    @classmethod
    def from_dict(cls, data: Any, source: str = "rights map") -> "RightsMap":
        if not isinstance(data, Mapping):
            raise RightsMapError(f"{source}: the top level must be a JSON object, got {type(data).__name__}")
        allowed_top = {"default", "files", "prefixes"}
        for key in data:
            if key not in allowed_top and not str(key).startswith("_"):
                raise RightsMapError(
                    f"{source}: unknown top-level key {key!r} (allowed: default, files, prefixes)"
                )
        default = _entry(data.get("default") or {}, f"{source}: default", allow_prefix=False)
        files_raw = data.get("files") or {}
        if not isinstance(files_raw, Mapping):
            raise RightsMapError(f"{source}: 'files' must be an object {{image_id: {{...}}}}, "
                                 f"got {type(files_raw).__name__}")
        files = {}
        for image_id, entry in files_raw.items():
            if str(image_id).startswith("_"):
                continue
            if not isinstance(image_id, str) or not image_id or image_id.startswith("/") or "\\" in image_id:
                raise RightsMapError(
                    f"{source}: files key {image_id!r} must be an image_id (a POSIX path relative to image_root)"
                )
            files[image_id] = _entry(entry, f"{source}: files[{image_id!r}]", allow_prefix=False)
        prefixes_raw = data.get("prefixes") or []
        if not isinstance(prefixes_raw, list):
            raise RightsMapError(f"{source}: 'prefixes' must be a list of objects, got {type(prefixes_raw).__name__}")
        prefixes: dict[str, dict[str, str | None]] = {}
        for i, entry in enumerate(prefixes_raw):
            where = f"{source}: prefixes[{i}]"
            values = _entry(entry, where, allow_prefix=True)
            prefix = entry.get("prefix")
            if not isinstance(prefix, str) or not prefix:
                raise RightsMapError(f"{where}: key 'prefix' is required and must be a non-empty string")
            if prefix.startswith("/") or "\\" in prefix:
                raise RightsMapError(f"{where}: prefix {prefix!r} must be relative to image_root, with '/' separators")
            if prefix in prefixes:
                raise RightsMapError(f"{where}: prefix {prefix!r} is listed twice")
            prefixes[prefix] = values
        ordered = sorted(prefixes.items(), key=lambda kv: (-len(kv[0]), kv[0]))
        return cls(default=default, files=files, prefixes=ordered)

    def resolve(self, image_id: str, root_name: str) -> dict[str, str | None]:
        """Rights of one image (the scalar reference of ``apply``; used in tests and for one-offs)."""
        entries = []
        if image_id in self.files:
            entries.append(self.files[image_id])
        for prefix, values in self.prefixes:
            if image_id.startswith(prefix):
                entries.append(values)
                break
        entries.append(self.default)
        out: dict[str, str | None] = {}
        for key in RIGHTS_KEYS:
            out[key] = next((e[key] for e in entries if _is_set(e.get(key), key)), None)
        if not _is_set(out["dataset_name"], "dataset_name"):
            out["dataset_name"] = image_id.split("/", 1)[0] if "/" in image_id else root_name
        return out

    def apply(self, df: pl.DataFrame, root_name: str) -> pl.DataFrame:
        """Add license, doi and original_dataset_name columns to a frame with an image_id column."""
        ids = pl.col("image_id")
        exprs: list[pl.Expr] = []
        files_df = None
        if self.files:
            files_df = pl.DataFrame(
                {"image_id": list(self.files)}
                | {f"__file_{k}": [v.get(k) for v in self.files.values()] for k in RIGHTS_KEYS},
                schema={"image_id": pl.String} | {f"__file_{k}": pl.String for k in RIGHTS_KEYS},
            ).with_columns([_clean(pl.col(f"__file_{k}"), k).alias(f"__file_{k}") for k in RIGHTS_KEYS])
            df = df.join(files_df, on="image_id", how="left", maintain_order="left")
        for key in RIGHTS_KEYS:
            default = self.default.get(key) if _is_set(self.default.get(key), key) else None
            chain = self._prefix_expr(key, default)
            expr = chain
            if files_df is not None:
                expr = pl.coalesce(pl.col(f"__file_{key}"), expr)
            exprs.append(expr.cast(pl.String).alias(_OUT_COLUMN[key]))
        df = df.with_columns(exprs)
        if files_df is not None:
            df = df.drop([f"__file_{k}" for k in RIGHTS_KEYS])
        first = ids.str.split("/").list.first()
        fallback = pl.when(ids.str.contains("/", literal=True)).then(first).otherwise(pl.lit(root_name))
        return df.with_columns(pl.coalesce(pl.col("original_dataset_name"), fallback).alias("original_dataset_name"))

    def _prefix_expr(self, key: str, default: str | None) -> pl.Expr:
        """Value of ``key`` from the longest matching prefix, else ``default`` (the per-key fallback)."""
        ids = pl.col("image_id")
        if not self.prefixes:
            return pl.lit(default, dtype=pl.String)
        chain = None
        for prefix, values in self.prefixes:  # longest first: the first matching branch wins
            value = values.get(key) if _is_set(values.get(key), key) else default
            cond = ids.str.starts_with(prefix)
            lit = pl.lit(value, dtype=pl.String)
            chain = pl.when(cond).then(lit) if chain is None else chain.when(cond).then(lit)
        return chain.otherwise(pl.lit(default, dtype=pl.String))

    def unmatched_files(self, image_ids: pl.Series) -> list[str]:
        """``files`` keys that are not among the images (typos, moved files)."""
        if not self.files:
            return []
        known = set(image_ids.to_list()) if image_ids.len() < 5_000_000 else None
        if known is None:
            s = pl.Series(list(self.files))
            return sorted(s.filter(~s.is_in(image_ids.implode())).to_list())
        return sorted(k for k in self.files if k not in known)


def _is_set(value: Any, key: str = "license") -> bool:
    if value is None:
        return False
    text = str(value).strip().lower()
    return text not in _UNSET_NAME if key == "dataset_name" else text != ""


def _clean(expr: pl.Expr, key: str) -> pl.Expr:
    unset = list(_UNSET_NAME) if key == "dataset_name" else [""]
    return pl.when(expr.str.strip_chars().str.to_lowercase().is_in(unset)).then(None).otherwise(expr)


def _entry(entry: Any, where: str, *, allow_prefix: bool) -> dict[str, str | None]:
    if not isinstance(entry, Mapping):
        raise RightsMapError(f"{where}: must be an object with keys {', '.join(RIGHTS_KEYS)}, "
                             f"got {type(entry).__name__}")
    allowed = set(RIGHTS_KEYS) | ({"prefix"} if allow_prefix else set())
    out: dict[str, str | None] = {}
    for key, value in entry.items():
        if str(key).startswith("_"):
            continue
        if key not in allowed:
            hint = " (did you mean 'license'?)" if str(key).lower() in ("licence", "licenses", "license_name") else ""
            raise RightsMapError(f"{where}: unknown key {key!r}{hint} (allowed: {', '.join(sorted(allowed))})")
        if key == "prefix":
            continue
        if value is not None and not isinstance(value, str):
            raise RightsMapError(f"{where}: key {key!r} must be a string or null, got {type(value).__name__} {value!r}")
        out[key] = value.strip() if isinstance(value, str) else None
    return out


def load_rights_map(path: str | os.PathLike | None) -> RightsMap:
    """Load and validate a rights map file; ``None`` gives an empty map (no license, dataset from path)."""
    if path is None:
        return RightsMap()
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RightsMapError(f"rights map {p}: file not found (paths.rights_map)") from None
    except json.JSONDecodeError as exc:
        raise RightsMapError(f"rights map {p}: not valid JSON: {exc.msg} "
                             f"at line {exc.lineno} column {exc.colno}") from None
    return RightsMap.from_dict(data, source=f"rights map {p}")

"""The ``clip`` vision adapter: deterministic zero-shot annotation with an open_clip model, offline.

For every image (embedded with the same code and the same embedding cache as ``embed_images``, so the
two stages share work when they use the same model) and the configured facet model:

* **taxonomy facet**: one prompt per allowed value (``prompt_template`` filled with the value, ``_``
  read as a space; ``{facet}`` in the template is replaced by the facet name). The value is the
  argmax of ``softmax(logit_scale * cosine)`` over the prompts, ``confidence[facet]`` its probability.
  Catch-all values (``unknown``, ``other``) get no prompt: they are chosen when no real value is
  clearly preferred (best probability < 1.5 / number of real values, with at least two real values),
  with confidence ``1 - p_best``;
  a facet whose only values are catch-alls gets its first one with confidence 1.
* **boolean facet**: a positive prompt ("bright" for ``is_bright``, "flame visible" for
  ``flame_visible``) against a negative one ("not bright", "no flame visible"); the winner is the
  value, its probability the confidence.
* **tags**: the vocabulary ranked by softmax probability; the top ``tags.min`` always, then more (up to
  ``tags.max``) while ``p_tag / p_top1 >= vision.clip.tag_threshold``.
* **summary**: a short template over the chosen values and tags.  ``annotator`` = ``clip:<model_id>``.

Under the workflow the images come from the shard's pixel store (rule ``decode_images``, a CPU job;
``similarity.pixels``): the model job opens no image file (``stores``); without one (library use) the
files are decoded here. Undecodable images go to the losses (item_type image), with the reason the
store recorded. Settings (config ``vision.clip``): model,
pretrained, device, batch_size, prompt_template, tag_threshold; optional ``precision``, ``num_workers``
and ``embedding_cache_dir`` (default: the ``embeddings`` folder beside the vision ``cache_dir``,
which is where ``embed_images`` caches by default).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import polars as pl

from ..formats import FacetModel, empty_table
from ..logs import get_logger
from ..losses import Losses

__all__ = ["ClipAnnotator", "FALLBACK_VALUES"]

log = get_logger("vision.clip")

FALLBACK_VALUES = ("unknown", "other")
UNKNOWN_MARGIN = 1.5


def _human(text: str) -> str:
    return str(text).replace("_", " ").strip()


def _bool_phrases(name: str) -> tuple[str, str]:
    h = _human(name)
    for prefix, neg in (("is ", "not "), ("has ", "no "), ("contains ", "no ")):
        if h.startswith(prefix):
            core = h[len(prefix):]
            return core, f"{neg}{core}"
    return h, f"no {h}"


def _row_dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b.T`` in float64, each entry summed on its own (no BLAS): an image's logits are then the
    same bits whatever other images share its shard (a BLAS matmul blocks by the number of rows)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    out = np.empty((a.shape[0], b.shape[0]), dtype=np.float64)
    chunk = max(1, (4 << 20) // max(1, b.shape[0] * b.shape[1]))  # 32 MB of float64 products at a time
    for s in range(0, a.shape[0], chunk):
        out[s:s + chunk] = (a64[s:s + chunk, None, :] * b64[None, :, :]).sum(axis=-1)
    return out


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class ClipAnnotator:
    """Zero-shot CLIP annotator (see module doc)."""

    name = "clip"

    def __init__(self, *, facets: FacetModel, settings: Mapping[str, Any], image_root: str,
                 cache_dir: str | None = None, threads: int = 1):
        self.facets = facets
        from ..settings_schema import filled

        self.settings = filled("vision.clip", settings)
        self.image_root = image_root
        self.threads = max(1, int(threads or 1))
        self.model_name = self.settings["model"]
        self.pretrained = self.settings.get("pretrained")
        self.device = self.settings["device"]
        self.precision = self.settings["precision"]
        self.batch_size = int(self.settings["batch_size"])
        nw = self.settings.get("num_workers")
        self.num_workers = int(nw) if nw is not None else min(4, self.threads - 1)
        self.template = self.settings["prompt_template"]
        self.tag_threshold = float(self.settings["tag_threshold"])
        emb_dir = self.settings.get("embedding_cache_dir")
        if not emb_dir and cache_dir:
            emb_dir = str(Path(cache_dir).parent / "embeddings")
        self.embedding_cache_dir = emb_dir
        try:
            self._prompt("x", "facet")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"vision.clip.prompt_template {self.template!r} is not a valid template "
                             f"(use '{{}}' for the value, optionally '{{facet}}'): {exc}") from None
        self._clip = None
        # the shard's pixel stores (similarity.pixels), set by the vision stage: then no file is opened
        self.stores = None

    # ------------------------------------------------------------------------------------------ prompts
    def _prompt(self, value: str, facet: str | None = None) -> str:
        return self.template.format(value, value=value, facet=_human(facet or ""))

    def _plan_prompts(self) -> tuple[list[str], dict[str, Any]]:
        """All prompt texts (encoded in one call) and, per facet, which slice belongs to it."""
        texts: list[str] = []
        plan: dict[str, Any] = {"taxonomy": {}, "boolean": {}, "tags": None}

        def add(items: list[str]) -> slice:
            start = len(texts)
            texts.extend(items)
            return slice(start, len(texts))

        for facet, values in self.facets.taxonomy.items():
            real = [v for v in values if str(v).lower() not in FALLBACK_VALUES]
            fallback = [v for v in values if str(v).lower() in FALLBACK_VALUES]
            sl = add([self._prompt(_human(v), facet) for v in real])
            plan["taxonomy"][facet] = (real, fallback, sl)
        for facet in self.facets.boolean:
            pos, neg = _bool_phrases(facet)
            plan["boolean"][facet] = add([self._prompt(pos, facet), self._prompt(neg, facet)])
        if self.facets.vocabulary:
            plan["tags"] = add([self._prompt(_human(t), "tag") for t in self.facets.vocabulary])
        return texts, plan

    # ------------------------------------------------------------------------------------------- model
    def _model(self):
        if self._clip is None:
            from ..similarity.loads import load_counted

            self._clip = load_counted(self.model_name, self.pretrained, device=self.device,
                                      precision=self.precision, purpose="vision")
            if self._clip.device == "cpu":
                import torch

                torch.set_num_threads(self.threads)
        return self._clip

    # ---------------------------------------------------------------------------------------- annotate
    def annotate(self, images: pl.DataFrame, losses: Losses) -> pl.DataFrame:
        from ..similarity.cache import EmbeddingCache
        from ..similarity.embed import embed_image_table

        fm = self.facets
        if images.height == 0:
            return empty_table("annotations", fm)
        clip = self._model()
        cache = EmbeddingCache.for_model(self.embedding_cache_dir, clip) if self.embedding_cache_dir else None
        table = embed_image_table(images, clip, image_root=self.image_root, cache=cache, losses=losses,
                                  batch_size=self.batch_size, num_workers=self.num_workers, desc="clip vision",
                                  stores=self.stores)
        if table.height == 0:
            return empty_table("annotations", fm)
        emb = np.asarray(table["embedding"].to_numpy(), dtype=np.float32)
        texts, plan = self._plan_prompts()
        t0, c0 = time.perf_counter(), time.process_time()
        temb, _ = clip.encode_texts(texts) if texts else (None, None)
        log.info("clip vision: encoded %d texts in %.2f s (%.2f s CPU)", len(texts), time.perf_counter() - t0,
                 time.process_time() - c0)
        logits_all = clip.logit_scale * _row_dots(emb, temb) if texts else None
        n = table.height
        cols: dict[str, Any] = {"image_id": table["image_id"].to_list()}
        conf: dict[str, np.ndarray] = {}
        chosen: dict[str, list] = {}

        for facet, (real, fallback, sl) in plan["taxonomy"].items():
            if not real:
                chosen[facet] = [fallback[0]] * n
                conf[facet] = np.ones(n)
                continue
            p = _softmax(logits_all[:, sl])
            best = p.argmax(axis=1)
            pbest = p[np.arange(n), best]
            vals = [real[i] for i in best]
            c = pbest.copy()
            if fallback and len(real) > 1:
                unsure = pbest < UNKNOWN_MARGIN / len(real)
                vals = [fallback[0] if u else v for v, u in zip(vals, unsure)]
                c = np.where(unsure, 1.0 - pbest, pbest)
            chosen[facet], conf[facet] = vals, c
        for facet, sl in plan["boolean"].items():
            p = _softmax(logits_all[:, sl])
            chosen[facet] = (p[:, 0] > p[:, 1]).tolist()
            conf[facet] = p.max(axis=1)

        tags: list[list[str]] = [[] for _ in range(n)]
        if plan["tags"] is not None:
            vocab = fm.vocabulary
            p = _softmax(logits_all[:, plan["tags"]])
            order = np.argsort(-p, axis=1, kind="stable")
            n_min, n_max = min(fm.min_tags, len(vocab)), min(max(fm.max_tags, fm.min_tags), len(vocab))
            for r in range(n):
                top = p[r, order[r, 0]]
                keep = [vocab[j] for j in order[r, :n_min]]
                for j in order[r, n_min:n_max]:
                    if p[r, j] / top < self.tag_threshold:
                        break
                    keep.append(vocab[j])
                tags[r] = keep

        summaries = []
        for r in range(n):
            parts = [f"{_human(f)}: {_human(chosen[f][r])}" for f in fm.taxonomy]
            for f in fm.boolean:
                pos, neg = _bool_phrases(f)
                parts.append(pos if chosen[f][r] else neg)
            s = "Zero-shot CLIP: " + ("; ".join(parts) if parts else "image")
            if tags[r]:
                s += ". Tags: " + ", ".join(_human(t) for t in tags[r][:5])
            summaries.append(s + ".")

        cols["summary"] = summaries
        cols["tags"] = pl.Series("tags", tags, dtype=pl.List(pl.String))
        conf_dtype = fm.confidence_dtype() if fm.names else pl.Struct({})
        conf_rows = [{k: float(round(conf[k][r], 6)) for k in fm.names} for r in range(n)]
        cols["confidence"] = pl.Series("confidence", conf_rows, dtype=conf_dtype) if fm.names else \
            pl.Series("confidence", [{}] * n, dtype=pl.Struct({}))
        cols["annotator"] = [f"clip:{clip.model_id}"] * n
        for f in fm.taxonomy:
            cols[f] = pl.Series(f, chosen[f], dtype=pl.String)
        for f in fm.boolean:
            cols[f] = pl.Series(f, chosen[f], dtype=pl.Boolean)
        out = pl.DataFrame(cols)
        log.info("clip vision: annotated %d of %d images with %s", out.height, images.height, clip.model_id)
        return out

"""Evaluate a model on an exported benchmark with mteb's own evaluation (``benchmaker mteb``).

The task is the one docs/evaluate.md defines (``Any2AnyRetrieval``, text→image, subset ``mteb``: the
``mteb-corpus`` / ``mteb-queries`` / ``mteb-qrels`` configs of the dataset card), pointed at a local
``hf_dataset`` folder or a Hub repository, and run with ``mteb.evaluate``. The model is either one of
mteb's registered models (``mteb_model``, e.g. ``openai/clip-vit-base-patch32``) or any open_clip model
as the ``clip`` evaluate system loads it (``model`` / ``pretrained``: architecture + tag, ``hf-hub:``,
``local-dir:``), wrapped in :class:`ClipEncoder`: images are decoded from the exported bytes exactly as
every stage decodes image files (``benchmaker.imaging``, JPEG draft mode included) and encoded in the
project's fixed-size passes, so mteb's nDCG@10 is the leaderboard's ``exported`` nDCG@10 of the same model
(tests/test_export_publish.py). mteb needs ``sentence-transformers`` importable (``mteb.evaluate``
imports it for every model): the ``mteb`` extra installs both (``pip install 'benchmaker[mteb]'``).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from ..settings_schema import default

__all__ = ["ClipEncoder", "check_export", "clip_encoder", "make_task", "run", "write_trec_run"]

TASK_NAME = "BenchmakerT2IRetrieval"


def make_task(dataset: str, split: str = default("export.split"), revision: str | None = None, name: str = TASK_NAME):
    """The retrieval task of docs/evaluate.md over ``dataset`` (a folder or ``org/name`` on the Hub)."""
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.task_metadata import TaskMetadata

    meta = TaskMetadata(
        name=name, description="Text-to-image retrieval on a benchmark built with benchmaker.", reference=None,
        dataset={"path": str(dataset), "revision": revision or "local"}, type="Any2AnyRetrieval", category="t2i",
        modalities=["text", "image"], eval_splits=[split], eval_langs={"mteb": ["eng-Latn"]},
        main_score="ndcg_at_10")
    return type(name, (AbsTaskRetrieval,), {"metadata": meta})()


def _encoder_base():
    from mteb.models.abs_encoder import AbsEncoder

    return AbsEncoder


class ClipEncoder:
    """Marks the mteb encoders of :func:`clip_encoder` (an open_clip model loaded by benchmaker)."""


def clip_encoder(model: str, pretrained: str | None = None, device: str = default("similarity.device"),
                 precision: str = default("similarity.precision"),
                 batch_size: int = default("vision.clip.batch_size")):
    """An mteb encoder (``AbsEncoder``) for an open_clip model loaded as the ``clip`` system loads it."""
    import numpy as np
    from mteb.models.model_meta import ModelMeta

    from ..similarity.embed import _split_preprocess
    from ..similarity.model import load_clip

    clip = load_clip(model, pretrained, device=device, precision=precision)
    pil_part, mean, std = _split_preprocess(clip.preprocess)

    class _Encoder(_encoder_base(), ClipEncoder):
        def __init__(self):
            self.model = clip
            self.mteb_model_meta = ModelMeta.create_empty({
                "name": f"benchmaker/{clip.arch}", "revision": clip.cache_key, "modalities": ["text", "image"],
                "embed_dim": clip.embed_dim, "similarity_fn_name": "cosine", "framework": ["PyTorch"]})

        def _pixels(self, image: Any):
            """One image as the embedding stage prepares it: decoded from its bytes by benchmaker.imaging
            (JPEG draft mode at the model's input size), then open_clip's transform."""
            import torch

            from ..imaging import decode

            if isinstance(image, dict) and image.get("bytes") is not None:
                # open_clip sizes are (height, width), PIL's draft() takes (width, height) (embed.iter_image_batches)
                img = decode(io.BytesIO(image["bytes"]), draft_size=(clip.image_size[1], clip.image_size[0]))
            else:  # a decoded PIL image (a dataset without bytes)
                img = image.convert("RGB")
            out = pil_part(img)
            if mean is None:
                return out
            arr = np.asarray(out, dtype=np.uint8)
            if arr.ndim == 2:
                arr = np.repeat(arr[:, :, None], 3, axis=2)
            x = torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1))).float().div_(255)
            return (x - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]

        def _images(self, inputs) -> np.ndarray:
            import torch
            from datasets import Image

            ds = inputs.dataset
            col = "image"
            if hasattr(ds, "cast_column") and isinstance(ds.features.get(col), Image):
                raw = ds.cast_column(col, Image(decode=False))  # the exported bytes, decoded here
                items = (raw[i][col] for i in range(len(raw)))
            else:
                items = (img for batch in inputs for img in batch[col])
            out, chunk = [], []
            for item in items:
                chunk.append(self._pixels(item))
                if len(chunk) == batch_size:
                    out.append(clip.encode_images(torch.stack(chunk)))
                    chunk = []
            if chunk:
                out.append(clip.encode_images(torch.stack(chunk)))
            return torch.cat(out).numpy() if out else np.zeros((0, clip.embed_dim), np.float32)

        def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None, **kwargs):
            features = inputs.dataset.features
            if "image" in features:
                return self._images(inputs)
            texts = [t for batch in inputs for t in batch["text"]]
            return clip.encode_texts(texts)[0]

        def similarity(self, a, b):
            import torch

            return torch.as_tensor(a) @ torch.as_tensor(b).T

        def similarity_pairwise(self, a, b):
            import torch

            return (torch.as_tensor(a) * torch.as_tensor(b)).sum(-1)

    return _Encoder()


def write_trec_run(predictions: dict[str, dict[str, float]], path: str | Path, name: str) -> int:
    """mteb's ranking (query id -> {corpus id: score}, the export's TREC ids) as a TREC run file, best
    first per query (ties by corpus id descending, as trec_eval orders them); returns its lines."""
    lines = []
    for qid in sorted(predictions):
        by_id = sorted(predictions[qid].items(), key=lambda kv: kv[0], reverse=True)
        ranked = sorted(by_id, key=lambda kv: -kv[1])  # stable: ties keep the id order
        lines += [f"{qid} Q0 {doc} {n} {score!r} {name}" for n, (doc, score) in enumerate(ranked, 1)]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return len(lines)


# the mteb view of an export (docs/export.md): per config, its columns and their kinds
MTEB_VIEW = {"corpus": {"id": "string", "image": "struct"}, "queries": {"id": "string", "text": "string"},
             "qrels": {"query-id": "string", "corpus-id": "string", "score": "integer"}}
_KIND = {"string": ("is_string", "is_large_string"), "integer": ("is_integer",), "struct": ("is_struct",)}


def check_export(folder: str | Path, split: str = default("export.split")) -> None:
    """Check a local export's mteb view before mteb reads it (mteb's own errors do not say what is wrong):
    ``mteb/{corpus,queries,qrels}/<split>-*.parquet`` present with the documented columns and kinds, and
    every qrels id a query and an image of the view. ValueError naming the file and the fix."""
    import pyarrow.compute as pc
    import pyarrow.dataset as pads
    import pyarrow.types as pat

    folder = Path(folder)
    fix = ("benchmaker's export writes it (docs/export.md); run `snakemake --configfile <your config> export` "
           "with this benchmaker, or give a folder or Hub revision that has it")
    tables = {}
    for name, cols in MTEB_VIEW.items():
        files = sorted((folder / "mteb" / name).glob(f"{split}-*.parquet"))
        if not files:
            have = sorted({f.name.split("-")[0] for f in (folder / "mteb" / name).glob("*.parquet")})
            if have:
                raise ValueError(f"{folder}: mteb/{name} has no split {split!r} (it has {', '.join(map(repr, have))})"
                                 f": give --split {have[0]}")
            raise ValueError(f"{folder}: mteb/{name}/{split}-*.parquet is missing, so mteb cannot read the "
                             f"benchmark: {fix}")
        data = pads.dataset([str(f) for f in files], format="parquet")
        for col, kind in cols.items():
            field = data.schema.field(col) if col in data.schema.names else None
            if field is None or not any(getattr(pat, t)(field.type) for t in _KIND[kind]):
                got = "absent" if field is None else f"of type {field.type}"
                raise ValueError(f"{folder}: mteb/{name} column {col!r} is {got}; the mteb view has {col!r} as "
                                 f"{kind} (docs/export.md): {fix}")
        tables[name] = data.to_table(columns=[c for c in cols if c != "image"])
    for col, name in (("query-id", "queries"), ("corpus-id", "corpus")):
        unknown = pc.filter(tables["qrels"][col], pc.invert(pc.is_in(tables["qrels"][col],
                                                                        value_set=tables[name]["id"])))
        if len(unknown):
            raise ValueError(f"{folder}: mteb/qrels names {unknown[0].as_py()!r}, which is not in mteb/{name} "
                             f"({len(unknown)} such rows): the view's files come from different exports; {fix}")


def _predictions(folder: Path, task: str, split: str) -> dict[str, dict[str, float]]:
    doc = json.loads((folder / f"{task}_predictions.json").read_text(encoding="utf-8"))
    return doc["mteb"][split]


def run(*, dataset: str, model: str | None = None, pretrained: str | None = None, mteb_model: str | None = None,
        split: str = default("export.split"), revision: str | None = None, output: str | None = None,
        trec_run: str | None = None, device: str = default("similarity.device"),
        precision: str = default("similarity.precision"),
        batch_size: int = default("vision.clip.batch_size")) -> dict[str, Any]:
    """Evaluate one model with ``mteb.evaluate`` on the export; returns mteb's scores of the split (mteb
    rounds them to 5 decimals). ``trec_run``: also write mteb's ranking there as a TREC run file, so
    ``trec_eval hf_dataset/trec/qrels.txt FILE`` (or pytrec_eval) gives the unrounded values."""
    import tempfile

    if bool(model) == bool(mteb_model):
        raise ValueError("give either an open_clip model (--model, as an evaluate system's `model`) or an mteb "
                         "model name (--mteb-model)")
    if not revision and not Path(dataset).is_dir():
        raise ValueError(f"{dataset}: not a folder; for a Hub dataset give --revision (a commit sha)")
    if Path(dataset).is_dir():
        check_export(dataset, split)
    import mteb

    task = make_task(dataset, split, revision)
    encoder = mteb.get_model(mteb_model) if mteb_model else clip_encoder(
        model, pretrained, device=device, precision=precision, batch_size=batch_size)
    with tempfile.TemporaryDirectory() as tmp:
        result = mteb.evaluate(encoder, tasks=[task], cache=None, show_progress_bar=False,
                               prediction_folder=tmp if trec_run else None)
        if trec_run:
            write_trec_run(_predictions(Path(tmp), task.metadata.name, split), trec_run, "mteb")
    scores = result.task_results[0].scores[split][0]
    out = {"task": task.metadata.name, "dataset": str(dataset), "split": split,
           "model": mteb_model or model, "pretrained": pretrained, "main_score": scores.get("main_score"),
           "scores": {k: v for k, v in scores.items() if isinstance(v, (int, float))}}
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(json.dumps(out, indent=2) + "\n")
    return out

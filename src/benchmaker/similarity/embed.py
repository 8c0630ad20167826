"""Image and text embedding: the ``embed_images`` and ``embed_queries`` stages.

The ``embed_images`` rule and the clip vision adapter's ``vision`` rule (shared with the embeddings
or not) read their shards' **pixel stores** (rule ``decode_images``, ``similarity.pixels``): no file
is opened there; the rows to encode are read from memory maps one pass ahead of the model
(:func:`iter_store_batches`). Without stores (the evaluate clip systems, library use) images are
decoded by a torch ``DataLoader`` whose
worker processes open each file with PIL (JPEG *draft mode* lets libjpeg decode at 1/2, 1/4 or 1/8
scale when the image is much larger than the model input), apply EXIF orientation, convert to RGB
and run open_clip's resize/crop; they hand **uint8** tensors to the main process. Either way the
main process converts to float, normalises on the device (bit-identical to open_clip's
``ToTensor`` + ``Normalize``) and encodes fixed-size passes under fp16/bf16 autocast on GPU.
Images whose sha256 is already in the embedding cache are never decoded nor encoded; each distinct
sha256 is encoded once per job; new embeddings are added to the cache every ``flush_every`` images,
so an interrupted job resumes where it stopped.

Output formats are in docs/similarity.md. torch is imported lazily (only inside functions).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import polars as pl

from ..formats import FormatError, read_table, to_canonical_names, to_disk_names
from ..io import atomic_path
from ..logs import get_logger, progress
from ..losses import Losses
from ..settings_schema import default
from .cache import EmbeddingCache

__all__ = [
    "run_images", "run_queries", "embed_image_table", "iter_image_batches", "load_image", "ImageFiles",
    "write_embeddings", "read_embeddings", "image_paths", "EMBEDDINGS_FORMAT",
]

log = get_logger("similarity.embed")
EMBEDDINGS_FORMAT = 1
DEFAULT_BATCH_SIZE = 128


# --------------------------------------------------------------------------------------------- decoding
def load_image(path: str, draft_size: tuple[int, int] | None):
    """Open an image file as an RGB PIL image (``benchmaker.imaging.decode``: upright, first frame, 16-bit
    scaled, transparency on white); JPEGs are decoded in draft mode at >= ``draft_size``."""
    from ..imaging import decode

    return decode(path, draft_size=draft_size)


def _split_preprocess(preprocess) -> tuple[Any, tuple[float, ...] | None, tuple[float, ...] | None]:
    """Split open_clip's eval transform into (PIL part, mean, std) when it ends in ToTensor + Normalize."""
    tfs = list(getattr(preprocess, "transforms", []) or [])
    if (len(tfs) >= 2 and type(tfs[-2]).__name__ in ("ToTensor", "MaybeToTensor")
            and type(tfs[-1]).__name__ == "Normalize"):
        from torchvision import transforms as T

        norm = tfs[-1]
        return T.Compose(tfs[:-2]), tuple(float(v) for v in norm.mean), tuple(float(v) for v in norm.std)
    return preprocess, None, None  # unknown layout: workers run the whole transform (float tensors)


class ImageFiles:
    """Map-style dataset: index → (index, uint8/float tensor or None, reason, detail). Picklable."""

    def __init__(self, paths: Sequence[str], transform, draft_size: tuple[int, int] | None, to_uint8: bool):
        self.paths = list(paths)
        self.transform = transform
        self.draft_size = draft_size
        self.to_uint8 = to_uint8

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        import torch

        path = self.paths[i]
        try:
            img = load_image(path, self.draft_size)
        except FileNotFoundError as exc:
            return i, None, "image_missing", str(exc)
        except Exception as exc:  # PIL raises UnidentifiedImageError, OSError (truncated), DecompressionBomb...
            return i, None, "image_decode_error", f"{type(exc).__name__}: {exc}"
        try:
            out = self.transform(img)
            if self.to_uint8:
                arr = np.asarray(out, dtype=np.uint8)
                if arr.ndim == 2:
                    arr = np.repeat(arr[:, :, None], 3, axis=2)
                out = torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))
        except Exception as exc:
            return i, None, "image_preprocess_error", f"{type(exc).__name__}: {exc}"
        return i, out, None, None


def _collate(items):
    import torch

    ok = [it for it in items if it[1] is not None]
    idx = torch.tensor([it[0] for it in ok], dtype=torch.long)
    pixels = torch.stack([it[1] for it in ok]) if ok else None
    failed = [(it[0], it[2], it[3]) for it in items if it[1] is None]
    return idx, pixels, failed


def _shm_free() -> int | None:
    """Free bytes in /dev/shm (where DataLoader workers put their batches); None if there is none."""
    import shutil

    try:
        return shutil.disk_usage("/dev/shm").free
    except OSError:
        return None


def fit_loader_to_shm(workers: int, prefetch: int, batch_bytes: int) -> tuple[int, int]:
    """(workers, prefetch_factor) whose in-flight batches fit in /dev/shm.

    Each worker keeps up to ``prefetch`` finished batches in shared memory; a container's default
    /dev/shm (64 MB in Kubernetes pods) holds fewer than the defaults ask for, and a full /dev/shm
    kills the workers with SIGBUS. Lower the prefetch first, then the workers (0 = decode in the
    main process), with a warning naming the fix.
    """
    free = _shm_free()
    if workers <= 0 or free is None or batch_bytes <= 0:
        return workers, prefetch
    fits = int(free * 0.8) // batch_bytes  # batches that fit, with headroom for the queues
    if fits >= workers * prefetch:
        return workers, prefetch
    if fits >= workers:
        new = (workers, max(1, fits // workers))
    else:
        new = (fits, 1)  # fits may be 0: decode in the main process
    log.warning("/dev/shm has %.0f MB free, too little for %d loader workers x %d prefetched batches of "
                "%.0f MB: using %d workers x %d. Give the job a larger /dev/shm (Kubernetes: an emptyDir "
                "with medium: Memory at /dev/shm; docker: --shm-size) or lower similarity.batch_size.",
                free / 1e6, workers, prefetch, batch_bytes / 1e6, *new)
    return new


def iter_image_batches(clip, paths: Sequence[str], *, batch_size: int = DEFAULT_BATCH_SIZE,
                       num_workers: int = default("similarity.num_workers"), draft: bool = True
                       ) -> Iterator[tuple[np.ndarray, np.ndarray, list[tuple[int, str, str]]]]:
    """Encode image files in batches: yields (indices, embeddings float32 [k, d], failures)."""
    import torch

    if not paths:
        return
    pil_tf, mean, std = _split_preprocess(clip.preprocess)
    to_uint8 = mean is not None
    # open_clip sizes are (height, width); PIL's draft() takes (width, height)
    draft_size = (clip.image_size[1], clip.image_size[0]) if draft else None
    ds = ImageFiles(paths, pil_tf, draft_size, to_uint8)
    batch_size = max(1, min(int(batch_size), len(paths)))
    h, w = clip.image_size
    workers, prefetch = fit_loader_to_shm(max(0, int(num_workers)), 4,
                                          batch_size * 3 * h * w * (1 if to_uint8 else 4))
    loader = torch.utils.data.DataLoader(
        ds, batch_size=batch_size, shuffle=False, num_workers=workers, collate_fn=_collate,
        pin_memory=clip.device.startswith("cuda"), prefetch_factor=prefetch if workers else None,
        persistent_workers=False,
    )
    if to_uint8:
        mean_t = torch.tensor(mean, dtype=torch.float32, device=clip.device).view(1, -1, 1, 1)
        std_t = torch.tensor(std, dtype=torch.float32, device=clip.device).view(1, -1, 1, 1)
    # decoded rows wait here until a pass's worth (clip.encode_batch) is ready: every forward pass
    # but the last is full (encode_images pads the last one), whatever batch_size and the failures leave
    size = clip.encode_batch
    pend_idx: list = []
    pend_x: list = []

    def encode(n: int):
        idx_all, x_all = torch.cat(pend_idx), torch.cat(pend_x)
        pend_idx[:], pend_x[:] = [idx_all[n:]], [x_all[n:]]
        emb = clip.encode_images(x_all[:n])
        return idx_all[:n].numpy(), emb.numpy().astype(np.float32, copy=False)

    for idx, pixels, failed in loader:
        if failed:
            yield np.zeros(0, dtype=np.int64), np.zeros((0, clip.embed_dim), np.float32), failed
        if pixels is None:
            continue
        if to_uint8:
            x = pixels.to(clip.device, non_blocking=True).float().div_(255.0).sub_(mean_t).div_(std_t)
        else:
            x = pixels
        pend_idx.append(idx)
        pend_x.append(x)
        ready = sum(int(t.shape[0]) for t in pend_idx) // size * size
        if ready:
            yield (*encode(ready), [])
    left = sum(int(t.shape[0]) for t in pend_idx)
    if left:
        yield (*encode(left), [])


def _store_chunks(stores, where: list[tuple[int, int, int]], size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(positions, uint8 pixels [k,3,H,W]) in chunks of ``size`` rows of ``where`` (position, store, row),
    each chunk read from the memory maps while the previous one is encoded (one reader thread)."""
    from concurrent.futures import ThreadPoolExecutor

    def read(part):
        pos = np.array([p for p, _, _ in part], dtype=np.int64)
        pieces, k0 = [], 0
        while k0 < len(part):  # consecutive runs of one store: one fancy-index read each
            k1 = k0
            while k1 < len(part) and part[k1][1] == part[k0][1]:
                k1 += 1
            rows = np.array([r for _, _, r in part[k0:k1]], dtype=np.int64)
            pieces.append(np.asarray(stores[part[k0][1]].pixels[rows]))
            k0 = k1
        return pos, np.concatenate(pieces)

    parts = [where[s:s + size] for s in range(0, len(where), size)]
    with ThreadPoolExecutor(1) as pool:
        nxt = pool.submit(read, parts[0]) if parts else None
        for j in range(len(parts)):
            cur = nxt.result()
            nxt = pool.submit(read, parts[j + 1]) if j + 1 < len(parts) else None
            yield cur


def iter_store_batches(clip, stores, shas: Sequence[str]
                       ) -> Iterator[tuple[np.ndarray, np.ndarray, list[tuple[int, str, str]]]]:
    """Encode images from pixel stores (``similarity.pixels``): yields (indices into ``shas``,
    embeddings float32 [k, d], failures) as :func:`iter_image_batches` does, with no file opened."""
    import torch

    from .pixels import check_spec, store_rows

    for st in stores:
        check_spec(clip, st.spec_id, str(st.index_path))
    where, failed = store_rows(stores, shas)
    if failed:
        yield (np.zeros(0, dtype=np.int64), np.zeros((0, clip.embed_dim), np.float32),
               [(i, r, d) for i, (r, d) in sorted(failed.items())])
    _, mean, std = _split_preprocess(clip.preprocess)
    if mean is None:  # pragma: no cover - a transform that does not end in ToTensor + Normalize
        raise FormatError(f"{clip.model_id}: its transform cannot take stored pixels (no ToTensor + Normalize)")
    mean_t = torch.tensor(mean, dtype=torch.float32, device=clip.device).view(1, -1, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32, device=clip.device).view(1, -1, 1, 1)
    pin = clip.device.startswith("cuda")
    for pos, px in _store_chunks(stores, where, clip.encode_batch):
        t = torch.from_numpy(px)
        if pin:
            t = t.pin_memory()
        # the same operations, in the same order, as the file path (iter_image_batches): the same bits
        x = t.to(clip.device, non_blocking=True).float().div_(255.0).sub_(mean_t).div_(std_t)
        yield pos, clip.encode_images(x).numpy().astype(np.float32, copy=False), []


# ----------------------------------------------------------------------------------------- images table
def image_paths(images: pl.DataFrame, image_root: str | os.PathLike | None) -> list[str]:
    """Absolute file path of each image row: ``image_root / image_id`` (or a ``path`` column if present)."""
    root = Path(image_root) if image_root else Path(".")
    col = "path" if "path" in images.columns else "image_id"
    out = []
    for rel in images[col].to_list():
        p = Path(rel)
        out.append(str(p if p.is_absolute() else root / p))
    return out


def embed_image_table(images: pl.DataFrame, clip, *, image_root: str | os.PathLike | None,
                      cache: EmbeddingCache | None, losses: Losses | None, batch_size: int = DEFAULT_BATCH_SIZE,
                      num_workers: int = default("similarity.num_workers"), flush_every: int = 4096, draft: bool = True,
                      desc: str = "embed images", stores: Sequence[Any] | None = None) -> pl.DataFrame:
    """Embeddings for the rows of an ``images`` table (canonical names).

    With ``stores`` (``similarity.pixels.PixelStore`` of the images' shards) the pixels come from
    them and no image file is opened; else the files are decoded here (DataLoader workers).
    Returns ``image_id, sha256, embedding`` (Array(Float32, d), L2-normalised) for every image that has
    an embedding, in input order; every image that could not be decoded is added to ``losses``.
    """
    dim = clip.embed_dim
    emb_dtype = pl.Array(pl.Float32, dim)
    base = images.select("image_id", "sha256").with_columns(
        pl.Series("__path", image_paths(images, image_root) if stores is None else [""] * images.height,
                  dtype=pl.String))
    shas = base["sha256"].unique(maintain_order=True)
    hit = (cache.lookup(shas) if cache is not None
           else pl.DataFrame(schema={"sha256": pl.String, "embedding": emb_dtype}))
    todo = (base.filter(~pl.col("sha256").is_in(hit["sha256"].implode()))
            .unique("sha256", keep="first", maintain_order=True))
    log.info("%s: %d images, %d distinct sha256, %d from cache, %d to encode (%s, %s)", desc, base.height,
             shas.len(), hit.height, todo.height,
             f"{len(stores)} pixel stores" if stores is not None else f"batch {batch_size}, {num_workers} workers",
             clip.device)

    todo_sha = todo["sha256"].to_list()
    new_sha: list[str] = []
    new_emb: list[np.ndarray] = []
    pending_sha: list[str] = []
    pending_emb: list[np.ndarray] = []
    failed_sha: dict[str, tuple[str, str]] = {}
    t0, c0 = time.perf_counter(), time.process_time()

    def flush() -> None:
        if cache is not None and pending_sha:
            cache.put(pending_sha, np.concatenate(pending_emb), device=clip.device, precision=clip.precision)
        pending_sha.clear()
        pending_emb.clear()

    with progress(total=len(todo_sha), desc=desc, unit="img", logger=log) as bar:
        batches = (iter_store_batches(clip, stores, todo_sha) if stores is not None else
                   iter_image_batches(clip, todo["__path"].to_list(), batch_size=batch_size,
                                      num_workers=num_workers, draft=draft))
        for idx, emb, failed in batches:
            batch_sha = [todo_sha[i] for i in idx]
            new_sha.extend(batch_sha)
            new_emb.append(emb)
            pending_sha.extend(batch_sha)
            pending_emb.append(emb)
            for i, reason, detail in failed:
                failed_sha[todo_sha[i]] = (reason, detail)
            bar.update(len(idx) + len(failed))
            if len(pending_sha) >= flush_every:
                flush()
        flush()
    if todo_sha:
        dt = time.perf_counter() - t0
        log.info("%s: encoded %d images in %.2f s (%.1f img/s, %.2f s CPU), %d failed", desc, len(new_sha), dt,
                 len(todo_sha) / max(dt, 1e-9), time.process_time() - c0, len(failed_sha))
    fresh = pl.DataFrame({
        "sha256": pl.Series(new_sha, dtype=pl.String),
        "embedding": pl.Series(np.concatenate(new_emb) if new_emb else np.zeros((0, dim), np.float32),
                               dtype=emb_dtype),
    })
    known = pl.concat([hit, fresh]).unique("sha256", keep="first", maintain_order=True)
    if failed_sha and losses is not None:
        bad = base.filter(pl.col("sha256").is_in(list(failed_sha)))
        for image_id, sha in bad.select("image_id", "sha256").iter_rows():
            reason, detail = failed_sha[sha]
            losses.add("image", image_id, reason, detail)
    return base.join(known, on="sha256", how="inner", maintain_order="left").select("image_id", "sha256", "embedding")


# ----------------------------------------------------------------------------------------- parquet files
def write_embeddings(df: pl.DataFrame, path: str | os.PathLike, *, clip=None, kind: str,
                     columns: Mapping[str, str] | None = None, extra_meta: Mapping[str, Any] | None = None) -> int:
    """Write an embeddings table (canonical names) as parquet with the model identity in its metadata."""
    meta = {"benchmaker.kind": kind, "benchmaker.format": str(EMBEDDINGS_FORMAT)}
    if clip is not None:
        meta.update({"benchmaker.model_id": clip.model_id, "benchmaker.logit_scale": repr(float(clip.logit_scale)),
                     "benchmaker.dim": str(clip.embed_dim), "benchmaker.context_length": str(clip.context_length),
                     "benchmaker.numerics": getattr(clip, "numerics", "") or ""})
    meta.update({f"benchmaker.{k}": str(v) for k, v in (extra_meta or {}).items()})
    out = to_disk_names(df, columns)
    with atomic_path(path, suffix=".parquet.tmp") as tmp:
        out.write_parquet(tmp, compression="zstd", metadata=meta)
    return out.height


# the rule that writes each kind of embeddings file: what a stale or foreign file's error tells to rerun
_WRITER = {"image": "embed_images", "query": "embed_queries"}


def read_embeddings(path: str | os.PathLike, *, columns: Mapping[str, str] | None = None, kind: str | None = None
                    ) -> tuple[pl.DataFrame, dict[str, str]]:
    """Read an embeddings parquet file: (table with canonical names, ``benchmaker.*`` metadata without prefix).

    With ``kind`` (``"image"`` or ``"query"``) the file must be one of that kind and of
    :data:`EMBEDDINGS_FORMAT`, with its ``dim`` in the metadata, one row per id and fixed-size vectors of
    that dimension (what :func:`write_embeddings` writes with a model)."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise FormatError(f"{path}: embeddings file not found")
    try:
        raw = pq.read_metadata(path).metadata or {}
        df = pl.read_parquet(path)
    except Exception as exc:
        raise FormatError(f"{path}: not a readable parquet embeddings file: {exc}") from None
    meta = {k.decode()[len("benchmaker."):]: v.decode() for k, v in raw.items() if k.startswith(b"benchmaker.")}
    df = to_canonical_names(df, columns)
    if "embedding" not in df.columns:
        raise FormatError(f"{path}: missing column 'embedding' (has {df.columns})")
    if kind is not None:
        fix = f"rerun {_WRITER.get(kind, 'the embed rules')}"
        if meta.get("kind") != kind or meta.get("format") != str(EMBEDDINGS_FORMAT):
            raise FormatError(f"{path}: not a {kind} embeddings file of format {EMBEDDINGS_FORMAT} (kind "
                              f"{meta.get('kind')!r}, format {meta.get('format')!r}); {fix}")
        if not str(meta.get("dim") or "").isdigit():
            raise FormatError(f"{path}: no benchmaker.dim in its metadata; {fix}")
        dtype, dim = df.schema["embedding"], int(meta["dim"])
        if df.height and not (isinstance(dtype, pl.Array) and dtype.size == dim):
            raise FormatError(f"{path}: column 'embedding' is {dtype}, not {dim}-d fixed-size vectors; {fix}")
        key = f"{kind}_id"
        if key not in df.columns:
            raise FormatError(f"{path}: missing column {key!r} (has {df.columns})")
        if df[key].n_unique() != df.height:
            raise FormatError(f"{path}: a {key} appears twice; {fix}")
    return df, meta


# ----------------------------------------------------------------------------------------------- stages
def _runtime(runtime: Mapping[str, Any] | None) -> dict[str, Any]:
    """device, batch_size, num_workers: the given ones, the rest from the schema's similarity section."""
    from ..settings_schema import filled

    rt = filled("similarity", {k: v for k, v in (runtime or {}).items() if v is not None})
    return {"device": rt["device"], "batch_size": int(rt["batch_size"]), "num_workers": int(rt["num_workers"]),
            "precision": rt["precision"]}


def _load_from_params(model: Mapping[str, Any], runtime: Mapping[str, Any], threads: int,
                      device: str | None = None, purpose: str = "embedding"):
    from .loads import load_counted

    rt = _runtime(runtime)
    clip = load_counted(model["model"], model.get("pretrained"), device=device or rt["device"],
                        precision=model.get("precision") or rt["precision"], purpose=purpose)
    if clip.device == "cpu" and threads:
        import torch

        torch.set_num_threads(max(1, int(threads)))
    return clip, rt


def run_images(*, images: str | Sequence[str], embeddings: str, losses: str, model: Mapping[str, Any],
               runtime: Mapping[str, Any] | None = None, cache_dir: str | None = None,
               image_root: str | None = None, columns: Mapping[str, str] | None = None,
               device: str | None = None, threads: int = 1, clip: Any = None,
               pixels: str | Sequence[str] | None = None, pixel_index: str | Sequence[str] | None = None) -> int:
    """Stage ``embed_images``: the images of one shard or of a group of shards (``images``: one file
    or a list) → one embeddings parquet + losses (see module doc).

    ``pixels`` / ``pixel_index``: the shards' pixel stores (rule ``decode_images``,
    ``similarity.pixels``), in the order of ``images``; with them no image file is opened. ``model``
    (model, pretrained, precision) and ``device`` decide the bytes; ``runtime`` (batch_size,
    num_workers) and ``cache_dir`` only the speed. ``clip``: an already loaded model of the same
    identity (the ``vision`` rule passes its own when it writes the embeddings too, so the shard pays
    one model load).
    """
    from ..io import as_paths

    files = as_paths(images)
    imgs = pl.concat([read_table("images", f, columns=columns) for f in files], how="vertical_relaxed")
    stores = None
    if pixels is not None:
        from .pixels import PixelStore

        npys, idxs = as_paths(pixels), as_paths(pixel_index)
        if len(npys) != len(idxs):
            raise ValueError(f"{len(npys)} pixel arrays but {len(idxs)} pixel indexes")
        stores = [PixelStore(a, b) for a, b in zip(npys, idxs)]
    if clip is not None:
        rt = _runtime(runtime)
    else:
        clip, rt = _load_from_params(model, runtime, threads, device, purpose="embed_images")
    cache = EmbeddingCache.for_model(cache_dir, clip) if cache_dir else None
    loss = Losses("similarity")
    name = Path(files[0]).stem if len(files) == 1 else f"{Path(files[0]).stem}-{Path(files[-1]).stem}"
    table = embed_image_table(imgs, clip, image_root=image_root, cache=cache, losses=loss,
                              batch_size=rt["batch_size"], num_workers=rt["num_workers"],
                              desc=f"embed {name}", stores=stores)
    out = table.with_columns(pl.lit(clip.model_id, pl.String).alias("model_id")).select(
        "image_id", "sha256", "model_id", "embedding")
    n = write_embeddings(out, embeddings, clip=clip, kind="image", columns=columns)
    loss.write(losses)
    log.info("embed_images: %d embeddings (%d from cache), %d losses -> %s", n,
             cache.hits if cache else 0, len(loss), embeddings)
    return n


def run_queries(*, queries: str, embeddings: str, model: Mapping[str, Any], runtime: Mapping[str, Any] | None = None,
                columns: Mapping[str, str] | None = None, device: str | None = None, threads: int = 1) -> int:
    """Stage ``embed_queries``: every written query of queries.jsonl (the texts qrels.jsonl repeats; one
    row per query id, checked when read) → query embeddings parquet, sorted by id. It never reads the
    judge's labels, so relabelling never reruns it; a query the judge lost is embedded and never used."""
    queries = read_table("queries", queries, columns=columns).select("query_id", "query_text").sort("query_id")
    clip, _ = _load_from_params(model, runtime, threads, device, purpose="embed_queries")
    t0, c0 = time.perf_counter(), time.process_time()
    emb, truncated = clip.encode_texts(queries["query_text"].to_list())
    log.info("embed_queries: encoded %d texts in %.2f s (%.2f s CPU)", queries.height, time.perf_counter() - t0,
             time.process_time() - c0)
    n_trunc = sum(truncated)
    if n_trunc:
        log.warning("embed_queries: %d of %d query texts are longer than the model context (%d tokens) and "
                    "were truncated (column 'truncated')", n_trunc, queries.height, clip.context_length)
    out = queries.with_columns(
        pl.lit(clip.model_id, pl.String).alias("model_id"),
        pl.Series("embedding", emb, dtype=pl.Array(pl.Float32, clip.embed_dim)),
        pl.Series("truncated", truncated, dtype=pl.Boolean),
    )
    n = write_embeddings(out, embeddings, clip=clip, kind="query", columns=columns)
    log.info("embed_queries: %d queries (%d truncated) -> %s", n, n_trunc, embeddings)
    return n

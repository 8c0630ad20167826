"""Vision stage: annotate every image of a shard with the configured facet model.

Adapters (chosen by ``vision.adapter``) implement :class:`benchmaker.vision.base.VisionAnnotator`.
``run`` is what the ``vision`` rule calls for one shard.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..formats import FacetModel, read_table, write_table
from ..logs import get_logger
from ..losses import Losses
from .base import get_annotator

__all__ = ["run"]

log = get_logger("vision")


def run(
    *,
    images: str,
    annotations: str,
    losses: str,
    adapter: str,
    settings: Mapping[str, Any],
    facets: Mapping[str, Any],
    image_root: str,
    columns: Mapping[str, str],
    costs: str | None = None,
    cache_dir: str | None = None,
    ledger: str | None = None,
    threads: int = 1,
    embeddings: str | None = None,
    embed_losses: str | None = None,
    similarity: Mapping[str, Any] | None = None,
    similarity_runtime: Mapping[str, Any] | None = None,
    runtime: Mapping[str, Any] | None = None,
    pixels: str | None = None,
    pixel_index: str | None = None,
) -> None:
    """Annotate one shard. ``settings`` are the adapter settings that decide the output; ``runtime``
    the ones that only decide speed (batch size, workers, caches, concurrency: benchmaker.triggers),
    passed outside Snakemake's params trigger and merged into the adapter's settings here.
    ``pixels`` / ``pixel_index``: the shard's pixel store (rule ``decode_images``,
    ``similarity.pixels``) for the clip adapter, which then opens no image file."""
    settings = {**dict(settings), **dict(runtime or {})}
    fm = FacetModel.from_config(facets)
    imgs = read_table("images", images, columns=columns)
    log.info("vision[%s]: %d images from %s", adapter, imgs.height, images)
    loss = Losses("vision")
    annotator = get_annotator(adapter, facets=fm, settings=dict(settings), image_root=image_root,
                              cache_dir=cache_dir, threads=threads)
    if pixels:
        if adapter != "clip":
            raise ValueError(f"vision adapter {adapter!r} does not read pixel stores (only 'clip' does)")
        from ..similarity.pixels import PixelStore

        annotator.stores = [PixelStore(pixels, pixel_index)]
    if embeddings:
        # one process per shard: the clip annotator's model also writes embed_images' outputs (the
        # workflow asks for this only when similarity uses the same model identity, docs/architecture.md)
        from ..similarity.embed import run_images

        if adapter != "clip":
            raise ValueError(f"vision adapter {adapter!r} cannot write image embeddings (only 'clip' can)")
        run_images(images=images, embeddings=embeddings, losses=embed_losses, model=dict(similarity or {}),
                   runtime=similarity_runtime, cache_dir=settings.get("embedding_cache_dir"),
                   image_root=image_root, columns=columns, threads=threads, clip=annotator._model(),
                   pixels=pixels, pixel_index=pixel_index)
    runner = getattr(annotator, "runner", None)
    if runner is not None and ledger:      # API adapters: each paid row on record as it arrives
        from ..providers.records import attach_ledger

        attach_ledger(runner, ledger)
    try:
        ann = annotator.annotate(imgs, loss)
    finally:
        if runner is not None and runner.ledger is not None:
            runner.ledger.close()
    n = write_table(ann, "annotations", annotations, columns=columns, facets=fm)
    loss.write(losses)
    if costs:  # API adapters report one row per paid request; the others write an empty file
        from ..providers.records import write_costs  # not .openai: the clip job needs no request engine

        write_costs(list(getattr(annotator, "costs", []) or []), costs, getattr(runner, "ledger", None))
    log.info("vision[%s]: wrote %d annotations, %d losses", adapter, n, len(loss))

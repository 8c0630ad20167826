"""CLIP similarity: model loading (``model``), image/text embedding (``embed``), the embedding cache
(``cache``) and scoring (``score``). See docs/similarity.md.

Stages: ``embed.run_images`` (rule embed_images, one shard), ``embed.run_queries`` (rule embed_queries),
``score.run`` (rule score). Importing this package (or ``score``/``cache``) never imports torch; only
``model`` and the encoding functions of ``embed`` do, lazily.
"""

__all__ = ["model", "embed", "cache", "score"]

"""Compile the planner's search (:mod:`benchmaker.plan.compiled`) into numba's cache once, at installation.

``python -m benchmaker.plan.warm`` (``make`` runs it after installing): plans a tiny synthetic
collection with the compiled search, so numba compiles every function for the argument types a real
run passes and stores them in its on-disk cache (``cache=True``: next to the module, or
``$NUMBA_CACHE_DIR`` when set, as numba decides). A plan job of ``COMPILE_MIN_QUERIES`` queries or
more then loads them instead of compiling (8-25 s on 2 cores, once per installation and per change
of ``plan/compiled.py``).
"""

from __future__ import annotations

import sys
import time

__all__ = ["warm"]


def warm() -> float:
    """Compile (or load) the compiled search's functions; returns the seconds it took."""
    import numpy as np
    import polars as pl

    from ..formats import FacetModel
    from ..losses import Losses
    from . import plan_frames

    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    n = 600
    taxonomy = {"a": ["a0", "a1"], "b": ["b0", "b1", "b2"], "c": ["c0", "c1", "c2"]}
    vocab = [f"t{i:02d}" for i in range(40)]
    fm = FacetModel.from_config({"taxonomy": taxonomy, "boolean": ["d"],
                                 "tags": {"min": 1, "max": 8, "vocabulary": vocab}})
    ann = pl.DataFrame({
        "image_id": [f"img{i:04d}" for i in range(n)],
        "tags": [list(dict.fromkeys(rng.choice(vocab, size=int(rng.integers(1, 9))).tolist())) for _ in range(n)],
        **{f: rng.choice(v, size=n).tolist() for f, v in taxonomy.items()},
        "d": (rng.random(n) < 0.5).tolist(),
    })
    images = pl.DataFrame({
        "image_id": ann["image_id"],
        "sha256": [f"{x:064x}" for x in rng.integers(0, 50, size=n).tolist()],  # some exact duplicates
        "phash": [f"{x:016x}" for x in rng.integers(0, 2**62, size=n).tolist()],
        "duplicate_group": [f"w{x}" for x in rng.integers(0, n, size=n).tolist()],   # some groups of several
    })
    settings = {"num_seeds": 40, "seeds_per_query": 1, "core_facets": ["a", "b"], "off_facets": ["a", "b", "c"],
                "diversity_facets": ["c"], "diversity_cap": 2, "pos_total": 3, "neutral_total": 3, "neg_total": 9,
                "neg_hard": 4, "neg_nearmiss": 3, "neg_easy": 2, "max_image_reuse": 2}
    # a small sample cap: windows, the inverted index and the per-facet neutral search all run
    plan_frames(ann, images, fm, settings, "warm", Losses("plan"), sample_cap=32, compiled=True)
    return time.perf_counter() - t0


if __name__ == "__main__":
    try:
        import numba  # noqa: F401
    except ImportError:
        print("numba is not installed: the planner runs its numpy search (nothing to compile)")
        sys.exit(0)
    print(f"planner search compiled (or loaded from numba's cache) in {warm():.1f} s")

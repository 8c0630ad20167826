"""Agreement statistics between raters (the judge, a second judge, people).

Point estimates come from maintained libraries: Cohen's kappa from scikit-learn
(``cohen_kappa_score``; quadratic weights for graded labels), Krippendorff's alpha from ``krippendorff``,
Fleiss' kappa from statsmodels (``fleiss_kappa`` over ``aggregate_raters``), the confusion matrix from
scikit-learn. Bootstrap intervals resample the sample's pairs *within their strata* (the design the
sample was drawn with) and take percentiles; for Cohen's kappa the replicates are computed in one
vectorised pass with the same formula as scikit-learn (tests check both give the same numbers), because a
thousand library calls per group and pair of raters would dominate the stage's time.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["cohen", "kappa_from_counts", "bootstrap_pair", "krippendorff_alpha", "fleiss", "confusion",
           "bootstrap_indices", "percentile_ci", "Interval", "interval"]


def _nan_to_none(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) or math.isinf(x) else x


def cohen(a: Sequence[int], b: Sequence[int], labels: Sequence[int], *, weights: str | None = None,
          sample_weight: Sequence[float] | None = None) -> float | None:
    """Cohen's kappa (scikit-learn); None where it is undefined (both raters used one single label)."""
    from sklearn.metrics import cohen_kappa_score

    if len(a) == 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            k = cohen_kappa_score(np.asarray(a), np.asarray(b), labels=list(labels), weights=weights,
                                  sample_weight=None if sample_weight is None else np.asarray(sample_weight))
    return _nan_to_none(k)


def _weight_matrix(k: int, weights: str | None) -> np.ndarray:
    if weights is None:
        return 1.0 - np.eye(k)
    grid = np.arange(k)
    d = np.abs(grid[:, None] - grid[None, :]).astype(float)
    if weights == "linear":
        return d
    if weights == "quadratic":
        return d ** 2
    raise ValueError(f"unknown kappa weights {weights!r}")


def kappa_from_counts(counts: np.ndarray, weights: str | None = None) -> np.ndarray:
    """Cohen's kappa of confusion matrices ``counts[..., K, K]`` (scikit-learn's formula, vectorised);
    NaN where undefined."""
    counts = np.asarray(counts, dtype=float)
    k = counts.shape[-1]
    w = _weight_matrix(k, weights)
    total = counts.sum(axis=(-2, -1), keepdims=True)
    expected = counts.sum(axis=-1, keepdims=True) * counts.sum(axis=-2, keepdims=True)
    with np.errstate(all="ignore"):
        expected = expected / total
        return 1.0 - (w * counts).sum(axis=(-2, -1)) / (w * expected).sum(axis=(-2, -1))


def bootstrap_indices(strata: Sequence[Any] | None, n: int, reps: int, rng: np.random.Generator) -> np.ndarray:
    """``reps`` x ``n`` row indices, each replicate resampling with replacement within each stratum."""
    if strata is None:
        return rng.integers(0, n, size=(reps, n))
    strata = np.asarray(strata)
    out = np.empty((reps, n), dtype=np.int64)
    col = 0
    for s in sorted(set(strata.tolist()), key=str):
        members = np.flatnonzero(strata == s)
        out[:, col:col + members.size] = members[rng.integers(0, members.size, size=(reps, members.size))]
        col += members.size
    return out


def percentile_ci(values: np.ndarray, confidence: float) -> tuple[float | None, float | None]:
    """Percentile interval of the *defined* (non-NaN) replicates; (None, None) when none is defined."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return None, None
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(v, [alpha, 1 - alpha])
    return _nan_to_none(lo), _nan_to_none(hi)


@dataclass(frozen=True)
class Interval:
    """A bootstrap percentile interval and what it rests on.

    ``replicates``: replicates drawn; ``undefined``: how many of them gave no value (NaN: the statistic
    is undefined on that resample, e.g. kappa when both raters used one label), which the percentiles
    leave out. ``degenerate``: the interval has width zero (every defined replicate gave one value), so
    it says nothing about the uncertainty; renderers must say so."""

    lo: float | None
    hi: float | None
    replicates: int
    undefined: int

    @property
    def degenerate(self) -> bool:
        return self.lo is not None and self.lo == self.hi

    @property
    def bounds(self) -> tuple[float | None, float | None]:
        return self.lo, self.hi


NO_INTERVAL = Interval(None, None, 0, 0)


def interval(values: np.ndarray, confidence: float) -> Interval:
    """The percentile :class:`Interval` of bootstrap replicates ``values`` (NaN = undefined replicate)."""
    v = np.asarray(values, dtype=float)
    lo, hi = percentile_ci(v, confidence)
    return Interval(lo, hi, int(v.size), int(np.count_nonzero(np.isnan(v))))


BLOCK = 16  # replicates per random stream: the replicates do not depend on how they are batched


def bootstrap_pair(a: np.ndarray, b: np.ndarray, labels: Sequence[int], *, strata: Sequence[Any] | None,
                   reps: int, seed: int, confidence: float,
                   weights: str | None = None) -> dict[str, Interval]:
    """Percentile intervals of raw agreement and Cohen's kappa (and weighted kappa when ``weights``),
    each with its count of undefined replicates (:class:`Interval`).

    Replicates come in blocks of ``BLOCK``, each from its own stream of ``SeedSequence(seed)``, so
    memory stays at ``BLOCK x pairs`` indices whatever the number of pairs."""
    n = len(a)
    if reps <= 0 or n == 0:
        return {"agreement": NO_INTERVAL, "kappa": NO_INTERVAL, "kappa_weighted": NO_INTERVAL}
    index = {v: i for i, v in enumerate(labels)}
    k = len(labels)
    code = np.array([index[int(x)] * k + index[int(y)] for x, y in zip(a, b)], dtype=np.int64)
    agree_all, kappa_all, wk_all = [], [], []
    streams = np.random.SeedSequence(seed).spawn((reps + BLOCK - 1) // BLOCK)
    for block, ss in enumerate(streams):
        m = min(BLOCK, reps - block * BLOCK)
        idx = bootstrap_indices(strata, n, m, np.random.default_rng(ss))
        codes = code[idx] + (np.arange(m)[:, None] * k * k)
        counts = np.bincount(codes.ravel(), minlength=m * k * k).reshape(m, k, k)
        agree_all.append(np.trace(counts, axis1=1, axis2=2) / n)
        kappa_all.append(kappa_from_counts(counts))
        if weights:
            wk_all.append(kappa_from_counts(counts, weights))
    return {"agreement": interval(np.concatenate(agree_all), confidence),
            "kappa": interval(np.concatenate(kappa_all), confidence),
            "kappa_weighted": interval(np.concatenate(wk_all), confidence) if weights else NO_INTERVAL}


def krippendorff_alpha(matrix: np.ndarray, level: str) -> float | None:
    """Krippendorff's alpha (``krippendorff`` package) of a raters x items matrix, NaN = not rated."""
    import krippendorff

    m = np.asarray(matrix, dtype=float)
    if m.shape[0] < 2 or np.count_nonzero(~np.isnan(m)) < 2:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                return _nan_to_none(krippendorff.alpha(reliability_data=m, level_of_measurement=level))
    except (ValueError, ZeroDivisionError):  # one value in the whole domain: undefined
        return None


def bootstrap_alpha(matrix: np.ndarray, level: str, *, strata: Sequence[Any] | None, reps: int, seed: int,
                    confidence: float) -> Interval:
    """Percentile interval of Krippendorff's alpha over ``reps`` replicates (one library call each)."""
    if reps <= 0 or matrix.shape[1] == 0:
        return NO_INTERVAL
    rng = np.random.default_rng(seed)
    idx = bootstrap_indices(strata, matrix.shape[1], reps, rng)
    vals = np.array([np.nan if (v := krippendorff_alpha(matrix[:, i], level)) is None else v for i in idx])
    return interval(vals, confidence)


def fleiss(matrix: np.ndarray, labels: Sequence[int]) -> tuple[float | None, int]:
    """Fleiss' kappa (statsmodels) over the items every rater labelled; (kappa, items used)."""
    from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

    m = np.asarray(matrix, dtype=float)
    full = m[:, ~np.isnan(m).any(axis=0)]
    if m.shape[0] < 2 or full.shape[1] == 0:
        return None, int(full.shape[1])
    table, _ = aggregate_raters(full.T.astype(int), n_cat=None)
    # aggregate_raters numbers the categories it saw; make the table cover the whole scale
    cats = np.unique(full.astype(int))
    wide = np.zeros((table.shape[0], len(labels)))
    for j, c in enumerate(cats):
        wide[:, list(labels).index(int(c))] = table[:, j]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            return _nan_to_none(fleiss_kappa(wide, method="fleiss")), int(full.shape[1])


def confusion(a: Sequence[int], b: Sequence[int], labels: Sequence[int]) -> np.ndarray:
    """Counts[i, j] = pairs rater a labelled labels[i] and rater b labels[j] (scikit-learn)."""
    from sklearn.metrics import confusion_matrix

    if len(a) == 0:
        return np.zeros((len(labels), len(labels)), dtype=int)
    return confusion_matrix(np.asarray(a), np.asarray(b), labels=list(labels))

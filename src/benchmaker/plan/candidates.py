"""A query's plan (:class:`PlannedQuery`: its seeds, picked candidates and shortfalls) and the lookups
the planner visits candidates with, best first (tag Jaccard descending, then image id), checked for
eligibility a chunk at a time; ``_Stats`` keeps what a pool searched, for its shortfall reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

__all__ = ["PlannedQuery"]

FIRST_CHUNK = 256  # best-ranked candidates checked for eligibility first (then 4x more at a time)


@dataclass
class PlannedQuery:
    query_id: str
    seeds: list[int]
    picks: list[tuple[int, str, str]] = field(default_factory=list)  # (image, pool, reason)
    shortfall: list[dict[str, Any]] = field(default_factory=list)
    profile: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Stats:
    """What one pool searched (for the shortfall reason) and how many picks the diversity cap refused."""

    searched: list[np.ndarray] = field(default_factory=list)
    divcap: int = 0


class _Lookup:
    """The candidates of one lookup, visited best first: tag Jaccard descending, then image id.

    Only the best-ranked part is sorted and checked for eligibility (``FIRST_CHUNK`` candidates, then
    four times more each time a pool needs more), so a large lookup costs one vectorized Jaccard pass
    plus a partial sort. Eligibility (reuse cap, duplicates of a seed) is fixed per query once
    checked: the only thing that changes while pools are filled is which images are in the query,
    and ``Planner._pick`` checks that itself.
    """

    def __init__(self, planner: Any, idx: np.ndarray, j: np.ndarray, seeds: np.ndarray, st: _Stats):
        self.p, self.idx, self.j, self.seeds = planner, idx, j, seeds
        self.rest = np.arange(idx.size)
        self.chunks: list[np.ndarray] = []
        self.size = FIRST_CHUNK
        st.searched.append(idx)

    def _more(self) -> bool:
        rest = self.rest
        if rest.size == 0:
            return False
        if rest.size <= self.size:
            take, self.rest = rest, rest[:0]
        else:
            jr = self.j[rest]
            cut = np.partition(jr, rest.size - self.size)[rest.size - self.size]
            top = jr >= cut  # every tie of the cut value goes in, so the order never depends on chunking
            take, self.rest = rest[top], rest[~top]
            self.size *= 4
        take = take[np.lexsort((self.idx[take], -self.j[take]))]
        self.chunks.append(take[self.p._ok(self.idx[take], self.seeds)])
        return True

    def order(self) -> Iterator[int]:
        """Positions into ``idx`` of eligible candidates, best first."""
        i = 0
        while i < len(self.chunks) or self._more():
            c = self.chunks[i]
            i += 1
            yield from c.tolist()


class _CompiledLookup:
    """A :class:`_Lookup` whose ordering, eligibility and picking run compiled (``plan.compiled``)."""

    def __init__(self, idx: np.ndarray, j: np.ndarray, seeds: np.ndarray, st: _Stats):
        from .compiled import new_lookup

        self.state = new_lookup(idx, j)
        self.seeds = seeds
        st.searched.append(idx)

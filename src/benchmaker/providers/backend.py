"""The Batch API interface a provider implements for the shared build → submit → collect rules.

:mod:`benchmaker.providers.batch` owns everything else: which requests to send (cache, duplicates),
chunking, the journal that makes submit idempotent, rounds of retries, validation, caching and the
cost ledger. A provider only says how to

* **line**: write one request of ``requests.jsonl`` (a JSON object whose first field is
  ``"custom_id"``; the rest is the provider's own);
* **upload** a chunk file (or nothing, for providers that take requests inline) and **find_file**;
* **create** a batch for an uploaded chunk, tagged with ``metadata`` / a display name, and **find**
  one again by that tag (a create interrupted after the provider accepted it);
* **poll** a batch: a :class:`BatchInfo` with a status among ``TERMINAL`` or ``"running"``;
* **fetch** a terminal batch's results into files of the state dir (idempotent, re-read on a rerun);
* **rows**: read those files as ``(custom_id, Outcome)`` pairs;
* **cancel** a batch.

Every call goes through the runner's retry policy (:mod:`benchmaker.providers.retry`). A third
provider adds a subclass of :class:`BatchBackend` and a runner whose ``batch_backend()`` returns it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .fastjson import loads
from .parse import Outcome

if TYPE_CHECKING:
    from .engine import Item, Runner

__all__ = ["TERMINAL", "BatchBackend", "BatchInfo", "result_rows"]

TERMINAL = ("completed", "failed", "expired", "cancelled")


@dataclass
class BatchInfo:
    id: str
    status: str                      # one of TERMINAL, or "running"
    total: int = 0
    done: int = 0                    # completed + failed requests so far
    error: str = ""                  # why a batch failed, when the provider says
    raw: dict = field(default_factory=dict)
    # requests the provider says it processed (answered or failed), once terminal; None = it does not
    # say. More than the rows it returned: processed and billed without an answer (an expired job)
    processed: int | None = None


class BatchBackend(ABC):
    name = "provider"
    #: the largest chunk the provider accepts (bytes, requests); config may lower them
    max_bytes = 190_000_000
    max_requests = 50_000

    def __init__(self, runner: Runner):
        self.runner = runner

    @property
    def client(self) -> Any:
        return self.runner.client

    def call(self, fn, what: str, **kw):
        return self.runner.policy.call(fn, what, **kw)

    # build
    @abstractmethod
    def line(self, item: Item, custom_id: str) -> str: ...

    # submit
    @abstractmethod
    def upload(self, path: str, name: str) -> str: ...

    @abstractmethod
    def find_file(self, name: str) -> str | None: ...

    @abstractmethod
    def create(self, file_id: str, *, name: str, metadata: Mapping[str, str]) -> str: ...

    @abstractmethod
    def find(self, *, name: str, metadata: Mapping[str, str]) -> dict | None:
        """A batch created earlier for this chunk: ``{"id", "file_id"}``, or None."""

    # collect
    @abstractmethod
    def poll(self, batch_id: str) -> BatchInfo: ...

    @abstractmethod
    def fetch(self, info: BatchInfo, state_dir: Path) -> list[Path]: ...

    @abstractmethod
    def rows(self, path: Path) -> Iterator[tuple[str, Outcome]]: ...

    @abstractmethod
    def cancel(self, batch_id: str) -> None: ...


def result_rows(lines: Iterable[bytes], path: Path) -> Iterator[dict]:
    """The JSON objects of a downloaded results file (``lines``: the open file, one object a line; blank
    lines skipped), for :meth:`BatchBackend.rows`; a line that is not JSON raises naming ``path`` and
    the line."""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = loads(line)
        except ValueError:
            raise ValueError(f"{path}:{lineno}: not valid JSON") from None
        yield row

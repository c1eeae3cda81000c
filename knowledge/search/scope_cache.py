"""In-process snapshots of recently used scopes, so a chat turn's search costs a few array operations.

chromadb stays the durable store; its filtered vector query costs tens of milliseconds once a
scope holds thousands of memories, while the hybrid search of `knowledge/search/index.py` over a scope's
vectors and BM25 postings in numpy takes a few. A snapshot is loaded from the store on first use
and kept in step by every write that goes through the same `ChromaKnowledgeBase`. Where other
processes write to the same stores (server mode), each scope's version (`scope_versions.py`) tells
a snapshot that it missed their writes. The conversation history keeps its per-scope indexes in a
`ScopeCache` too.

A snapshot holds records as stored (with their base importance); the store brings each one up to
the moment of the read, so snapshots never go stale as the days pass.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, Protocol, TypeVar

import numpy as np

from knowledge.dates.windows import TimeWindow
from knowledge.records import CATEGORIES, Category, MemoryRecord, Scope, ScoredMemory
from knowledge.rules.temporal import window_moments
from knowledge.search.index import Query, SearchIndex
from knowledge.search.lexical import terms_of
from knowledge.sql.scope_versions import ScopeVersions

_CODE = {category: code for code, category in enumerate(CATEGORIES)}


class ScopeSnapshot:
    """The records of one scope in a `SearchIndex`, grouped by category."""

    def __init__(self, records: Sequence[MemoryRecord], vectors: np.ndarray, dim: int) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, MemoryRecord] = {}
        self._index = SearchIndex(dim)
        for record, vector in zip(records, vectors):
            self._put(record, vector)

    @property
    def size(self) -> int:
        return len(self._records)

    def records(self, categories: Iterable[Category] | None = None) -> list[MemoryRecord]:
        """Every record, or those of some categories."""
        with self._lock:
            if categories is None:
                return list(self._records.values())
            wanted = set(categories)
            return [record for record in self._records.values() if record.category in wanted]

    def records_with(self, ids: Iterable[str]) -> list[MemoryRecord]:
        """The records with these ids (in their order; unknown ids are skipped)."""
        with self._lock:
            return [record for record in map(self._records.get, ids) if record is not None]

    def with_vectors(self, categories: Iterable[Category]) -> tuple[list[MemoryRecord], np.ndarray]:
        """The records of some categories and their vectors, row for row (a copy)."""
        wanted = set(categories)
        with self._lock:
            found = [record for record in self._records.values() if record.category in wanted]
            rows = self._index.rows([record.id for record in found])
            return found, self._index.vectors[rows].copy()

    def search(
        self,
        query: Query,
        limit: int,
        categories: Iterable[Category] | None = None,
        allowed: Callable[[MemoryRecord], bool] | None = None,
        during: TimeWindow | None = None,
    ) -> list[ScoredMemory]:
        """The most relevant records (of `categories`, only those `allowed` and, given `during`, only those
        of that stretch of time) by fused score, best first."""
        wanted = None if categories is None else set(categories)
        groups = None if wanted is None else [_CODE[category] for category in wanted]
        with self._lock:
            only = None
            if allowed is not None:  # the filter runs in Python: only over the categories searched
                only = [
                    key
                    for key, record in self._records.items()
                    if (wanted is None or record.category in wanted) and allowed(record)
                ]
            return [
                ScoredMemory(self._records[match.key], similarity=match.similarity, relevance=match.relevance)
                for match in self._index.search(query, limit, groups, only, between=_seconds(during))
            ]

    def put(self, record: MemoryRecord, vector: np.ndarray | None) -> None:
        """Add a record or replace one (keeping its vector unless a new one is given)."""
        with self._lock:
            self._put(record, vector)

    def remove(self, ids: Iterable[str]) -> None:
        """Drop records by id."""
        with self._lock:
            wanted = [memory_id for memory_id in ids if self._records.pop(memory_id, None) is not None]
            self._index.remove(wanted)

    def _put(self, record: MemoryRecord, vector: np.ndarray | None) -> None:
        known = self._records.get(record.id)
        # A metadata change keeps the BM25 document; only new content is tokenized again.
        terms = None if known is not None and known.content == record.content else terms_of(record.content)
        moments = [np.nan if moment is None else moment.timestamp() for moment in window_moments(record)]
        self._index.put(record.id, vector=vector, terms=terms, group=_CODE[record.category], moments=moments)
        self._records[record.id] = record


def _seconds(window: TimeWindow | None) -> tuple[float, float] | None:
    """A window's bounds as seconds since the epoch (a window's searches compare every memory of a scope:
    in numpy, thousands at a time, rather than datetimes one by one)."""
    if window is None:
        return None
    utc = window.utc()
    return utc.start.timestamp(), utc.end.timestamp()


class Sized(Protocol):
    @property
    def size(self) -> int: ...


S = TypeVar("S", bound=Sized)


class ScopeCache(Generic[S]):
    """The most recently used scopes' snapshots, bounded by the number of items held.

    With `versions` (server mode, other processes write to the same stores) a snapshot is used only
    while its scope's version is the one it was loaded at, and every write here bumps the version.
    """

    def __init__(
        self, load: Callable[[Scope], S], *, max_vectors: int = 500_000, versions: ScopeVersions | None = None
    ) -> None:
        self._load = load
        self._max_vectors = max_vectors
        self._versions = versions
        self._snapshots: OrderedDict[Scope, S] = OrderedDict()
        self._loaded_at: dict[Scope, int | None] = {}  # the scope's version each snapshot was loaded at
        self._writes: dict[Scope, int] = {}  # a load that overlapped a write is not kept
        self._epoch = 0  # bumped when every snapshot is dropped
        self._lock = threading.Lock()

    def get(self, scope: Scope) -> S:
        """The scope's snapshot, loading it from the store if it is not held (or another process wrote since)."""
        version = None if self._versions is None else self._versions.current(scope)
        with self._lock:
            snapshot = self._snapshots.get(scope)
            if snapshot is not None and self._loaded_at.get(scope) == version:
                self._snapshots.move_to_end(scope)
                return snapshot
            self._discard(scope)
            before = (self._epoch, self._writes.get(scope, 0))
        snapshot = self._load(scope)
        with self._lock:
            if (self._epoch, self._writes.get(scope, 0)) != before:
                return snapshot  # possibly missing that write: use it once, load afresh next time
            snapshot = self._snapshots.setdefault(scope, snapshot)
            self._loaded_at[scope] = version
            self._snapshots.move_to_end(scope)
            self._evict()
        return snapshot

    def writing(self, scope: Scope) -> S | None:
        """Note a write to `scope` (call after it reached the store); returns the snapshot to update, if held."""
        return self.writing_all([scope]).get(scope)

    def writing_all(self, scopes: Iterable[Scope]) -> dict[Scope, S]:
        """Note writes to these scopes (after they reached the store); returns the held snapshots to update."""
        wanted = list(dict.fromkeys(scopes))
        versions = {} if self._versions is None else self._versions.bump(wanted)
        held: dict[Scope, S] = {}
        with self._lock:
            for scope in wanted:
                self._writes[scope] = self._writes.get(scope, 0) + 1
                snapshot = self._snapshots.get(scope)
                if snapshot is None:
                    continue
                if self._versions is not None:
                    if self._loaded_at.get(scope) != versions[scope] - 1:
                        self._discard(scope)  # another process wrote meanwhile: load afresh at next use
                        continue
                    self._loaded_at[scope] = versions[scope]
                held[scope] = snapshot
        return held

    def drop(self, scopes: Iterable[Scope] | None = None) -> None:
        """Forget some scopes' snapshots (after writes that did not update them: a forget, maintenance),
        in every process; or, with None, every snapshot this process holds."""
        if scopes is None:
            with self._lock:
                self._epoch += 1
                self._snapshots.clear()
                self._loaded_at.clear()
            return
        wanted = list(dict.fromkeys(scopes))
        if self._versions is not None:
            self._versions.bump(wanted)
        with self._lock:
            for scope in wanted:
                self._writes[scope] = self._writes.get(scope, 0) + 1
                self._discard(scope)

    def _discard(self, scope: Scope) -> None:
        self._snapshots.pop(scope, None)
        self._loaded_at.pop(scope, None)

    def _evict(self) -> None:
        while len(self._snapshots) > 1 and sum(s.size for s in self._snapshots.values()) > self._max_vectors:
            evicted, _ = self._snapshots.popitem(last=False)
            self._loaded_at.pop(evicted, None)

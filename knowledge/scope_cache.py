"""In-process snapshots of recently used scopes, so a chat turn's search costs a matrix product.

chromadb stays the durable store; its filtered vector query costs tens of milliseconds once a
scope holds thousands of memories, while an exact cosine search over a scope's vectors in numpy
takes about one. A snapshot is loaded from the store on first use and kept in step by every
write that goes through the same `ChromaKnowledgeBase`. Only an embedded store may be cached: a
Chroma server is shared with other processes whose writes a snapshot would not see.

A snapshot holds records as stored (with their base importance); the store brings each one up to
the moment of the read, so snapshots never go stale as the days pass.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from .records import CATEGORIES, Category, MemoryRecord, Scope, ScoredMemory


_CODE = {category: code for code, category in enumerate(CATEGORIES)}


class ScopeSnapshot:
    """The records and unit vectors of one scope, in a growable matrix."""

    def __init__(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        self._lock = threading.Lock()
        self._records: list[MemoryRecord] = list(records)
        self._row = {record.id: index for index, record in enumerate(self._records)}
        capacity = max(16, len(self._records) * 2)
        self._vectors = np.zeros((capacity, vectors.shape[1] if vectors.size else 0), dtype=np.float32)
        # Category codes beside the vectors, so filtering a search costs no Python loop.
        self._codes = np.zeros(capacity, dtype=np.int8)
        if vectors.size:
            self._vectors[: len(self._records)] = vectors
            self._codes[: len(self._records)] = [_CODE[record.category] for record in self._records]

    @property
    def size(self) -> int:
        return len(self._records)

    def records(self, categories: Iterable[Category] | None = None) -> list[MemoryRecord]:
        """Every record, or those of some categories."""
        with self._lock:
            if categories is None:
                return list(self._records)
            wanted = set(categories)
            return [record for record in self._records if record.category in wanted]

    def search(
        self, query: np.ndarray, limit: int, categories: Iterable[Category] | None = None
    ) -> list[ScoredMemory]:
        """Exact cosine search, best first."""
        with self._lock:
            count = len(self._records)
            if count == 0:
                return []
            scores = self._vectors[:count] @ query.astype(np.float32)
            if categories is not None:
                wanted = [_CODE[category] for category in categories]
                scores = np.where(np.isin(self._codes[:count], wanted), scores, -np.inf)
            top = min(limit, count)
            best = np.argpartition(-scores, top - 1)[:top]
            best = best[np.argsort(-scores[best])]
            return [
                ScoredMemory(self._records[index], similarity=float(scores[index]))
                for index in best
                if np.isfinite(scores[index])
            ]

    def put(self, record: MemoryRecord, vector: np.ndarray | None) -> None:
        """Add a record or replace one (keeping its vector unless a new one is given)."""
        with self._lock:
            index = self._row.get(record.id)
            if index is not None:
                self._records[index] = record
                self._codes[index] = _CODE[record.category]
                if vector is not None:
                    self._vectors[index] = vector
                return
            if vector is None:
                raise ValueError("a new record needs its vector")
            if self._vectors.shape[1] == 0:
                self._vectors = np.zeros((len(self._codes), vector.shape[0]), dtype=np.float32)
            if len(self._records) == len(self._vectors):
                self._vectors = np.concatenate([self._vectors, np.zeros_like(self._vectors)])
                self._codes = np.concatenate([self._codes, np.zeros_like(self._codes)])
            self._row[record.id] = len(self._records)
            self._vectors[len(self._records)] = vector
            self._codes[len(self._records)] = _CODE[record.category]
            self._records.append(record)

    def remove(self, ids: Iterable[str]) -> None:
        """Drop records by id (moving the last row into each hole)."""
        with self._lock:
            for memory_id in ids:
                index = self._row.pop(memory_id, None)
                if index is None:
                    continue
                last = len(self._records) - 1
                if index != last:
                    moved = self._records[last]
                    self._records[index] = moved
                    self._vectors[index] = self._vectors[last]
                    self._codes[index] = self._codes[last]
                    self._row[moved.id] = index
                self._records.pop()


Loader = Callable[[Scope], tuple[list[MemoryRecord], np.ndarray]]


class ScopeCache:
    """The most recently used scopes' snapshots, bounded by the number of vectors held."""

    def __init__(self, load: Loader, *, max_vectors: int = 500_000) -> None:
        self._load = load
        self._max_vectors = max_vectors
        self._snapshots: OrderedDict[Scope, ScopeSnapshot] = OrderedDict()
        self._writes: dict[Scope, int] = {}  # a load that overlapped a write is not kept
        self._epoch = 0  # bumped when every snapshot is dropped
        self._lock = threading.Lock()

    def get(self, scope: Scope) -> ScopeSnapshot:
        """The scope's snapshot, loading it from the store if it is not held."""
        with self._lock:
            snapshot = self._snapshots.get(scope)
            if snapshot is not None:
                self._snapshots.move_to_end(scope)
                return snapshot
            before = (self._epoch, self._writes.get(scope, 0))
        snapshot = ScopeSnapshot(*self._load(scope))
        with self._lock:
            if (self._epoch, self._writes.get(scope, 0)) != before:
                return snapshot  # possibly missing that write: use it once, load afresh next time
            snapshot = self._snapshots.setdefault(scope, snapshot)
            self._snapshots.move_to_end(scope)
            self._evict()
        return snapshot

    def writing(self, scope: Scope) -> ScopeSnapshot | None:
        """Note a write to `scope` (call after it reached the store); returns the snapshot to update, if held."""
        with self._lock:
            self._writes[scope] = self._writes.get(scope, 0) + 1
            return self._snapshots.get(scope)

    def drop(self, scope: Scope | None = None) -> None:
        """Forget one scope's snapshot, or all of them (after maintenance wrote to the store directly)."""
        with self._lock:
            if scope is None:
                self._epoch += 1
                self._snapshots.clear()
            else:
                self._writes[scope] = self._writes.get(scope, 0) + 1
                self._snapshots.pop(scope, None)

    def _evict(self) -> None:
        while len(self._snapshots) > 1 and sum(s.size for s in self._snapshots.values()) > self._max_vectors:
            self._snapshots.popitem(last=False)

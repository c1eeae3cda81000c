"""The knowledge base: what core/ needs from a memory store, every operation confined to one scope.

The one implementation is `ChromaKnowledgeBase` (`chroma_store.py`): chromadb, embedded or a server.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Protocol

import numpy as np

from knowledge.dates.windows import TimeWindow
from knowledge.forget.target import ForgetTarget
from knowledge.records import Category, MemoryChange, MemoryRecord, Scope, ScoredMemory, Source
from knowledge.rules.discretion import PRIVATE, Audience


class KnowledgeBase(Protocol):
    """What core/ needs from a memory store. The scope always comes first and is never optional.

    Every read returns records with the importance they have at the moment of the read, but `with_vectors`'s,
    which are as stored (for passes that compare memories to each other, not by importance).
    """

    def add(
        self,
        scope: Scope,
        content: str,
        *,
        category: Category,
        source: Source,
        importance: float = 1.0,
        verified: bool = False,
        topic: str | None = None,
        conversation_id: str | None = None,
        message_ids: Sequence[str] = (),
        learned_in: str | None = None,
        about: datetime | None = None,
        until: datetime | None = None,
        memory_id: str | None = None,
    ) -> MemoryRecord: ...

    def search(
        self,
        scope: Scope,
        query: str,
        *,
        limit: int = 10,
        categories: Iterable[Category] | None = None,
        audience: Audience = PRIVATE,
        as_passage: bool = False,
        during: TimeWindow | None = None,
    ) -> list[ScoredMemory]: ...

    def get(self, scope: Scope, ids: Iterable[str]) -> list[MemoryRecord]: ...

    def memories(self, scope: Scope, *, categories: Iterable[Category] | None = None) -> list[MemoryRecord]: ...

    def with_vectors(self, scope: Scope, categories: Iterable[Category]) -> tuple[list[MemoryRecord], np.ndarray]: ...

    def update(self, scope: Scope, memory_id: str, change: MemoryChange) -> MemoryRecord | None: ...

    def write_many(
        self,
        scope: Scope,
        *,
        added: Sequence[MemoryRecord] = (),
        changed: Sequence[tuple[str, MemoryChange]] = (),
        deleted: Sequence[str] = (),
    ) -> None: ...

    def delete(self, scope: Scope, ids: Iterable[str]) -> int: ...

    def forget_all(self, scope: Scope) -> int: ...

    def compact(self) -> bool: ...

    def erase_remnants(self, target: ForgetTarget) -> bool: ...

    def add_records(self, records: Sequence[MemoryRecord]) -> None: ...

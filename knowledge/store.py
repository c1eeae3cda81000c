"""The knowledge base: memory records in chromadb, every operation confined to one scope."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Protocol

import chromadb
import numpy as np
from chromadb.config import Settings as ChromaSettings

from .embedding import Embedder
from .scope_cache import ScopeCache, ScopeSnapshot
from .records import CATEGORIES, Category, MemoryRecord, ReviewKind, Scope, ScoredMemory, Source, new_memory_id

log = logging.getLogger(__name__)

COLLECTION = "memories"
MAINTENANCE_PAGE = 5000  # records per chromadb call in maintenance passes; embedded chromadb caps a batch at 5,461
Now = Callable[[], datetime]


class KnowledgeBase(Protocol):
    """What core/ needs from a memory store. The scope always comes first and is never optional."""

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
    ) -> MemoryRecord: ...

    def search(
        self, scope: Scope, query: str, *, limit: int = 10, categories: Iterable[Category] | None = None
    ) -> list[ScoredMemory]: ...

    def get(self, scope: Scope, ids: Iterable[str]) -> list[MemoryRecord]: ...

    def list(self, scope: Scope, *, categories: Iterable[Category] | None = None) -> list[MemoryRecord]: ...

    def update(
        self,
        scope: Scope,
        memory_id: str,
        *,
        content: str | None = None,
        category: Category | None = None,
        importance: float | None = None,
        last_access: datetime | None = None,
        verified: bool | None = None,
        review_pending: ReviewKind | Literal[""] | None = None,
        promote_reviewed: bool | None = None,
        decay_kept: bool | None = None,
    ) -> MemoryRecord | None: ...

    def delete(self, scope: Scope, ids: Iterable[str]) -> int: ...

    def forget_all(self, scope: Scope) -> int: ...


def open_chroma_client(*, path: Path | None = None, host: str | None = None, port: int = 8000) -> Any:
    """An embedded `PersistentClient` under `path`, or an `HttpClient` when a Chroma server is configured."""
    settings = ChromaSettings(anonymized_telemetry=False)
    if host:
        return chromadb.HttpClient(host=host, port=port, settings=settings)
    if path is None:
        raise ValueError("an embedded chromadb store needs a path")
    path.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(path), settings=settings)


def _known(categories: Iterable[Category]) -> list[Category]:
    wanted = list(categories)
    unknown = set(wanted) - set(CATEGORIES)
    if unknown:
        raise ValueError(f"unknown categories: {sorted(unknown)}")
    return wanted


def _category_filter(categories: Iterable[Category]) -> dict[str, Any]:
    return {"category": {"$in": _known(categories)}}


def _scope_filter(scope: Scope, categories: Iterable[Category] | None = None) -> dict[str, Any]:
    clauses: list[dict[str, Any]] = [{"persona_id": scope.persona_id}, {"user_id": scope.user_id}]
    if categories is not None:
        clauses.append(_category_filter(categories))
    return {"$and": clauses}


def _timestamp(moment: datetime) -> float:
    return moment.timestamp()


def _moment(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc)


def _metadata(record: MemoryRecord) -> dict[str, Any]:
    # chromadb metadata holds only scalars, so optional fields become "" and lists are joined.
    return {
        "persona_id": record.scope.persona_id,
        "user_id": record.scope.user_id,
        "category": record.category,
        "importance": float(record.importance),
        "created_at": _timestamp(record.created_at),
        "last_access": _timestamp(record.last_access),
        "source": record.source,
        "verified": record.verified,
        "topic": record.topic or "",
        "conversation_id": record.conversation_id or "",
        "message_ids": ",".join(record.message_ids),
        "base_importance": float(record.base_importance if record.base_importance is not None else record.importance),
        "review_pending": record.review_pending or "",
        "promote_reviewed": record.promote_reviewed,
        "decay_kept": record.decay_kept,
    }


def _record(memory_id: str, content: str, meta: dict[str, Any]) -> MemoryRecord:
    return MemoryRecord(
        id=memory_id,
        scope=Scope(meta["persona_id"], meta["user_id"]),
        content=content,
        category=meta["category"],
        importance=float(meta["importance"]),
        created_at=_moment(meta["created_at"]),
        last_access=_moment(meta["last_access"]),
        source=meta["source"],
        verified=bool(meta["verified"]),
        topic=meta["topic"] or None,
        conversation_id=meta["conversation_id"] or None,
        message_ids=tuple(filter(None, meta["message_ids"].split(","))),
        base_importance=float(meta.get("base_importance", meta["importance"])),
        review_pending=meta.get("review_pending") or None,
        promote_reviewed=bool(meta.get("promote_reviewed", False)),
        decay_kept=bool(meta.get("decay_kept", False)),
    )


class ChromaKnowledgeBase:
    """Memories of every scope in one chromadb collection, filtered by scope inside each query."""

    def __init__(self, client: Any, embedder: Embedder, *, now: Now, cache_scopes: bool = True) -> None:
        """`cache_scopes`: answer searches from in-process snapshots (only for a store no other process writes)."""
        self._embedder = embedder
        self._now = now
        self._cache = ScopeCache(self._load_scope) if cache_scopes else None
        # embedding_function=None: vectors always come from our offline embedder, never chromadb's default.
        self._collection = client.get_or_create_collection(
            COLLECTION,
            embedding_function=None,
            metadata={"hnsw:space": "cosine", "embedder": embedder.name},
        )
        stored_embedder = (self._collection.metadata or {}).get("embedder")
        if stored_embedder and stored_embedder != embedder.name:
            log.warning(
                "this memory store was indexed with %s but %s is in use; search quality will suffer",
                stored_embedder,
                embedder.name,
            )

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
    ) -> MemoryRecord:
        """Store a new memory in `scope` and return it."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}")
        content = content.strip()
        if not content:
            raise ValueError("a memory needs some content")
        now = self._now()
        record = MemoryRecord(
            id=new_memory_id(),
            scope=scope,
            content=content,
            category=category,
            importance=importance,
            created_at=now,
            last_access=now,
            source=source,
            verified=verified,
            topic=topic,
            conversation_id=conversation_id,
            message_ids=tuple(message_ids),
        )
        vector = self._embedder.embed_passages([content])
        self._collection.add(ids=[record.id], documents=[content], metadatas=[_metadata(record)], embeddings=vector)
        if snapshot := self._written(scope):
            snapshot.put(record, vector[0])
        return record

    def search(
        self, scope: Scope, query: str, *, limit: int = 10, categories: Iterable[Category] | None = None
    ) -> list[ScoredMemory]:
        """The memories of `scope` closest in meaning to `query`, best first."""
        if not query.strip() or limit <= 0:
            return []
        query_vector = self._embedder.embed_queries([query])
        if self._cache is not None:
            wanted = None if categories is None else _known(categories)
            return self._cache.get(scope).search(query_vector[0], limit, wanted)
        result = self._collection.query(
            query_embeddings=query_vector,
            n_results=limit,
            where=_scope_filter(scope, categories),
            include=["documents", "metadatas", "distances"],
        )
        hits = zip(result["ids"][0], result["documents"][0], result["metadatas"][0], result["distances"][0])
        return [
            ScoredMemory(_record(memory_id, content, meta), similarity=1.0 - float(distance))
            for memory_id, content, meta, distance in hits
        ]

    def get(self, scope: Scope, ids: Iterable[str]) -> list[MemoryRecord]:
        """The records with these ids that belong to `scope`; ids of other scopes are simply absent."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        return self._fetch(ids=wanted, where=_scope_filter(scope))

    def list(self, scope: Scope, *, categories: Iterable[Category] | None = None) -> list[MemoryRecord]:
        """Every memory of `scope`, most important first."""
        if self._cache is not None:
            records = self._cache.get(scope).records(categories)
        else:
            records = self._fetch(where=_scope_filter(scope, categories))
        return sorted(records, key=lambda record: (-record.importance, record.created_at))

    def update(
        self,
        scope: Scope,
        memory_id: str,
        *,
        content: str | None = None,
        category: Category | None = None,
        importance: float | None = None,
        last_access: datetime | None = None,
        verified: bool | None = None,
        review_pending: ReviewKind | Literal[""] | None = None,
        promote_reviewed: bool | None = None,
        decay_kept: bool | None = None,
    ) -> MemoryRecord | None:
        """Change one memory of `scope`; returns the new record, or None if `scope` has no such id.

        A new `importance` is also the new base that decay starts from; `review_pending=""` clears it.
        """
        found = self.get(scope, [memory_id])
        if not found:
            return None
        record = found[0]
        if content is not None:
            record.content = content.strip()
        if importance is not None:
            record.base_importance = importance
        for name, value in (
            ("category", category),
            ("importance", importance),
            ("last_access", last_access),
            ("verified", verified),
            ("promote_reviewed", promote_reviewed),
            ("decay_kept", decay_kept),
        ):
            if value is not None:
                setattr(record, name, value)
        if review_pending is not None:
            record.review_pending = review_pending or None
        vector = None
        if content is None:
            # documents without embeddings would make chromadb embed them with its own (downloaded) model
            self._collection.update(ids=[record.id], metadatas=[_metadata(record)])
        else:
            vector = self._embedder.embed_passages([record.content])
            self._collection.update(
                ids=[record.id], documents=[record.content], metadatas=[_metadata(record)], embeddings=vector
            )
        if snapshot := self._written(scope):
            snapshot.put(record, None if vector is None else vector[0])
        return record

    def delete(self, scope: Scope, ids: Iterable[str]) -> int:
        """Delete the memories of `scope` with these ids; returns how many were deleted."""
        owned = [record.id for record in self.get(scope, ids)]
        if owned:
            self._collection.delete(ids=owned)
            if snapshot := self._written(scope):
                snapshot.remove(owned)
        return len(owned)

    def forget_all(self, scope: Scope) -> int:
        """Delete every memory of `scope`."""
        owned = self._collection.get(where=_scope_filter(scope), include=[])["ids"]
        if owned:
            self._collection.delete(ids=owned)
        if self._cache is not None:
            self._cache.drop(scope)
        return len(owned)

    def count(self, scope: Scope) -> int:
        """How many memories `scope` holds."""
        return len(self._collection.get(where=_scope_filter(scope), include=[])["ids"])

    def _written(self, scope: Scope) -> ScopeSnapshot | None:
        return self._cache.writing(scope) if self._cache is not None else None

    def _load_scope(self, scope: Scope) -> tuple[list[MemoryRecord], np.ndarray]:
        result = self._collection.get(where=_scope_filter(scope), include=["documents", "metadatas", "embeddings"])
        records = [
            _record(memory_id, content, meta)
            for memory_id, content, meta in zip(result["ids"], result["documents"], result["metadatas"])
        ]
        vectors = np.asarray(result["embeddings"] if records else np.zeros((0, 0)), dtype=np.float32)
        return records, vectors

    def _drop_snapshots(self) -> None:
        # Maintenance wrote to many scopes directly; reload them on next use.
        if self._cache is not None:
            self._cache.drop()

    def _fetch(self, **query: Any) -> list[MemoryRecord]:
        result = self._collection.get(include=["documents", "metadatas"], **query)
        return [
            _record(memory_id, content, meta)
            for memory_id, content, meta in zip(result["ids"], result["documents"], result["metadatas"])
        ]

    # -- maintenance: passes over every scope, never used for a chat turn -------------------------

    def add_records(self, records: Sequence[MemoryRecord]) -> None:
        """Store prepared records as they are (ids, timestamps, importances), embedding in batches; for imports."""
        for start in range(0, len(records), MAINTENANCE_PAGE):
            batch = records[start : start + MAINTENANCE_PAGE]
            self._collection.add(
                ids=[record.id for record in batch],
                documents=[record.content for record in batch],
                metadatas=[_metadata(record) for record in batch],
                embeddings=self._embedder.embed_passages([record.content for record in batch]),
            )
        self._drop_snapshots()

    def iter_all_record_pages(
        self, *, categories: Iterable[Category] | None = None, page_size: int = MAINTENANCE_PAGE
    ) -> Iterator[list[MemoryRecord]]:
        """Every memory of every scope (optionally of some categories), a page at a time.

        The ids are listed first and then read by id, so changing or deleting records between
        pages neither skips nor repeats any.
        """
        where = _category_filter(categories) if categories is not None else None
        ids = self._collection.get(where=where, include=[])["ids"]
        for start in range(0, len(ids), page_size):
            yield self._fetch(ids=ids[start : start + page_size])

    def update_decay_state_many(
        self,
        importances: Mapping[str, float],
        *,
        review_pending: Iterable[str] = (),
        promote_rearmed: Iterable[str] = (),
    ) -> None:
        """Write what a decay pass derived for records of any scope, one chromadb update per record.

        Sets the (derived) importance, marks `review_pending="decay"` and re-arms promote reviews;
        base_importance, last_access, content and vectors stay as they are.
        """
        changes: dict[str, dict[str, Any]] = {
            memory_id: {"importance": float(value)} for memory_id, value in importances.items()
        }
        for memory_id in review_pending:
            changes.setdefault(memory_id, {})["review_pending"] = "decay"
        for memory_id in promote_rearmed:
            changes.setdefault(memory_id, {})["promote_reviewed"] = False
        items = list(changes.items())
        for start in range(0, len(items), MAINTENANCE_PAGE):
            batch = items[start : start + MAINTENANCE_PAGE]
            # chromadb merges these keys into the stored metadata and keeps document and embedding.
            self._collection.update(ids=[memory_id for memory_id, _ in batch], metadatas=[meta for _, meta in batch])
        self._drop_snapshots()

    def delete_many(self, ids: Iterable[str]) -> None:
        """Delete records of any scope by id; ids that no longer exist are ignored."""
        wanted = list(ids)
        for start in range(0, len(wanted), MAINTENANCE_PAGE):
            self._collection.delete(ids=wanted[start : start + MAINTENANCE_PAGE])
        self._drop_snapshots()

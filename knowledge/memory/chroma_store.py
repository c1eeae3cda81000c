"""`ChromaKnowledgeBase`: the knowledge base (`store.py`) in chromadb, every operation confined to one scope.

A write a background job makes is fenced (`knowledge/forget/fence.py`): a job that began before its scope was
forgotten cannot write a memory back. Deleting in chromadb leaves the text on disk (its write-ahead
queue, free pages, the full-text index); `erase_remnants` removes it (`chroma_erasure.py`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
from chromadb.config import Settings as ChromaSettings
from chromadb.errors import InternalError as ChromaInternalError

from knowledge.dates.windows import TimeWindow
from knowledge.forget.fence import fenced_write
from knowledge.forget.target import NOTHING, ForgetTarget
from knowledge.memory import chroma_erasure
from knowledge.memory.chroma_gathering import GatheredWrites
from knowledge.memory.scope_ids import STRAY_GRACE, ScopeIds, scope_pairs
from knowledge.records import (
    CATEGORIES,
    KEEP,
    Category,
    MemoryChange,
    MemoryRecord,
    Scope,
    ScoredMemory,
    Source,
    new_memory_id,
)
from knowledge.rules.decay import (
    MemoryPolicy,
    PolicyFor,
    base_of,
    current_importance,
    default_policy,
    due_for_review,
    next_due,
)
from knowledge.rules.discretion import PRIVATE, Audience
from knowledge.search.embedding import Embedder
from knowledge.search.index import QueryEncoder
from knowledge.search.scope_cache import ScopeCache, ScopeSnapshot
from knowledge.sql.database import iso
from knowledge.sql.scope_versions import ScopeVersions

log = logging.getLogger(__name__)

COLLECTION = "memories"
# Without snapshots (a shared Chroma server) the hybrid search ranks chromadb's closest memories by meaning.
SERVER_CANDIDATES = 50
# chromadb logs every write made since its vector index was last saved, and reads that log again on each
# write: at 10,000 memories, with the index saved every 1,000 writes (its default) a memory written (an
# upsert and an update) cost 27 ms of CPU; every 50, 9 ms (`python -m bench.chroma_writes`).
INDEX_SAVED_EVERY = 50
DEFAULT_SYNC_THRESHOLD = 1000  # chromadb's
# Where snapshots answer every search (an embedded store), chromadb's vector index is never searched: it keeps the
# vectors, and the graph it links them in is work no read uses. A new such store builds a sparse graph (hnswlib's
# defaults are 16 links and 100 candidates): at 100,000 memories adding a vector costs chromadb about half the CPU,
# changing one a fifth, and a night's consolidation a third less (docs/performance/benchmarks.md, "What a night
# costs chromadb"). A store made before keeps its graph (chromadb cannot change it) until a compaction rebuilds it.
SPARSE_GRAPH = {"hnsw:M": 4, "hnsw:construction_ef": 8}
MAINTENANCE_PAGE = 5000  # records per chromadb call in maintenance passes; embedded chromadb caps a batch at 5,461
NEVER_DUE = 1e15  # the `due_at` of a memory the decay pass never has to act on (about 31 million years away)
Now = Callable[[], datetime]
NO_TIMESTAMP = 0.0  # chromadb metadata holds no None: a date a memory does not have


def open_chroma_client(*, path: Path | None = None, host: str | None = None, port: int = 8000) -> Any:
    """An embedded `PersistentClient` under `path`, or an `HttpClient` when a Chroma server is configured."""
    settings = ChromaSettings(anonymized_telemetry=False)
    if host:
        return chromadb.HttpClient(host=host, port=port, settings=settings)
    if path is None:
        raise ValueError("an embedded chromadb store needs a path")
    path.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(path), settings=settings)


def saving_index_often(client: Any, name: str) -> Any:
    """The collection `name`, its vector index saved at least every `INDEX_SAVED_EVERY` writes (a store
    made with chromadb's default, or a rebuilt copy of one, is set so)."""
    collection = client.get_collection(name, embedding_function=None)
    hnsw = (getattr(collection, "configuration", None) or {}).get("hnsw") or {}
    if hnsw.get("sync_threshold", DEFAULT_SYNC_THRESHOLD) > INDEX_SAVED_EVERY:
        retry_while_locked(lambda: collection.modify(configuration={"hnsw": {"sync_threshold": INDEX_SAVED_EVERY}}))
        # read again, as stored: the modified copy names a "legacy" embedding function, though none is stored
        collection = client.get_collection(name, embedding_function=None)
    return collection


def retry_while_locked(write: Callable[[], None], *, attempts: int = 8, first_pause: float = 0.05) -> None:
    """Run `write`, again after a growing pause while chromadb's SQLite file is locked by another writer (a
    second process on the same store, or chromadb's own background work): the lock is brief, the error is not
    a reason to refuse to open the store."""
    for attempt in range(attempts):
        try:
            write()
            return
        except ChromaInternalError as error:
            if "database is locked" not in str(error) or attempt == attempts - 1:
                raise
            time.sleep(first_pause * 2**attempt)


def _known(categories: Iterable[Category]) -> list[Category]:
    wanted = list(categories)
    unknown = set(wanted) - set(CATEGORIES)
    if unknown:
        raise ValueError(f"unknown categories: {sorted(unknown)}")
    return wanted


def _category_filter(categories: Iterable[Category]) -> dict[str, Any]:
    return {"category": {"$in": _known(categories)}}


def _scope_filter(
    scope: Scope, categories: Iterable[Category] | None = None, audience: Audience = PRIVATE
) -> dict[str, Any]:
    clauses: list[dict[str, Any]] = [{"persona_id": scope.persona_id}, {"user_id": scope.user_id}]
    if categories is not None:
        clauses.append(_category_filter(categories))
    if not audience.sees_everything:
        # records stored before origins existed lack both keys, so they match neither: private, as they should
        clauses.append({"$or": [{"learned_in": audience.group_id}, {"shared": True}]})
    return {"$and": clauses}


def _timestamp(moment: datetime) -> float:
    return moment.timestamp()


def _moment(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=UTC)


def _optional_timestamp(moment: datetime | None) -> float:
    return NO_TIMESTAMP if moment is None else _timestamp(moment)


def _optional_moment(timestamp: float | None) -> datetime | None:
    return None if not timestamp else _moment(timestamp)


def _storable(importance: float) -> float:
    # chromadb keeps about 16 significant digits; nine decimals come back exactly as written, so the
    # due time computed from a base at write time matches the base every later read decays from.
    return round(importance, 9)


def _decay_state(record: MemoryRecord, policy: MemoryPolicy) -> dict[str, Any]:
    """The metadata the decay pass reads and writes: the review flag, its retry time, and when the pass must
    act next: `review_due_at` if that act is asking for a review (capped per pass), else `due_at`."""
    due = NEVER_DUE if (moment := next_due(record, policy)) is None else _timestamp(moment)
    review = due_for_review(record, policy)
    return {
        "review_pending": record.review_pending or "",
        "review_retry_at": 0.0 if record.review_retry_at is None else _timestamp(record.review_retry_at),
        "due_at": NEVER_DUE if review else due,
        "review_due_at": due if review else NEVER_DUE,
    }


def _metadata(record: MemoryRecord, policy: MemoryPolicy) -> dict[str, Any]:
    # chromadb metadata holds only scalars, so optional fields become "" and lists are joined. The
    # current importance is never stored: it changes with every passing day.
    return {
        "persona_id": record.scope.persona_id,
        "user_id": record.scope.user_id,
        "category": record.category,
        "base_importance": float(base_of(record)),
        "created_at": _timestamp(record.created_at),
        "last_access": _timestamp(record.last_access),
        "source": record.source,
        "verified": record.verified,
        "topic": record.topic or "",
        "conversation_id": record.conversation_id or "",
        "message_ids": ",".join(record.message_ids),
        "decay_kept": record.decay_kept,
        "hits": record.hits,
        "learned_in": record.learned_in or "",
        "shared": record.shared,
        "about": _optional_timestamp(record.about),
        "about_day": "" if record.about is None else f"{record.about.astimezone(UTC):%m-%d}",  # kept dates, yearly
        "until": _optional_timestamp(record.until),
        "replaced_by": record.replaced_by or "",
        "changed_at": _optional_timestamp(record.changed_at),
        **_decay_state(record, policy),
    }


def _changed(record: MemoryRecord, change: MemoryChange, now: datetime) -> MemoryRecord:
    """`record` as `change` leaves it: its content trimmed and dated from `now` if new (unless the change says
    when), its importance as chromadb keeps it."""
    if change.content is not KEEP:
        change = replace(change, content=change.content.strip())
        if change.content != record.content and change.changed_at is KEEP:
            change = replace(change, changed_at=now)
    if change.importance is not KEEP:
        change = replace(change, importance=_storable(change.importance))
    return change.applied_to(record)


def _record(memory_id: str, content: str, meta: dict[str, Any]) -> MemoryRecord:
    """The record as stored: its `importance` is the base, not yet decayed to any moment."""
    return MemoryRecord(
        id=memory_id,
        scope=Scope(meta["persona_id"], meta["user_id"]),
        content=content,
        category=meta["category"],
        importance=float(meta["base_importance"]),
        created_at=_moment(meta["created_at"]),
        last_access=_moment(meta["last_access"]),
        source=meta["source"],
        verified=bool(meta["verified"]),
        topic=meta["topic"] or None,
        conversation_id=meta["conversation_id"] or None,
        message_ids=tuple(filter(None, meta["message_ids"].split(","))),
        review_pending=meta["review_pending"] or None,
        decay_kept=bool(meta["decay_kept"]),
        hits=int(meta.get("hits", 0)),  # absent in stores written before hits were counted
        # absent in stores written before origins were recorded: learned in private, not shared
        learned_in=meta.get("learned_in") or None,
        shared=bool(meta.get("shared", False)),
        # absent in stores written before memories had dates
        about=_optional_moment(meta.get("about")),
        until=_optional_moment(meta.get("until")),
        replaced_by=meta.get("replaced_by") or None,
        changed_at=_optional_moment(meta.get("changed_at")),
        review_retry_at=_moment(meta["review_retry_at"]) if meta.get("review_retry_at") else None,  # absent: older
    )


class ChromaKnowledgeBase:
    """Memories of every scope in one chromadb collection, filtered by scope inside each query.

    What is stored is a memory's base importance and when it was last used; every read (get, list,
    search) returns its importance as of that moment under its persona's rules (`policy_for`).
    """

    def __init__(
        self,
        client: Any,
        embedder: Embedder,
        *,
        now: Now,
        policy_for: PolicyFor = default_policy,
        cache_scopes: bool = True,
        queries: QueryEncoder | None = None,
        files: Path | None = None,
        versions: ScopeVersions | None = None,
        ids: ScopeIds | None = None,
    ) -> None:
        """`cache_scopes`: answer searches from in-process snapshots; where other processes write to the same
        store, only with `versions`, which tell a snapshot that it missed their writes.
        `queries`: the query encoder shared with the conversation history, so one message is embedded once.
        `files`: the embedded store's directory, where forgetting erases what chromadb leaves behind.
        `ids`: each scope's memory ids, kept by every write, so a whole scope is read by id (`scope_ids.py`);
        only where every process writing to the store keeps them too. Without, a scope is found by a scan."""
        self._client = client
        self._embedder = embedder
        self.queries = queries or QueryEncoder(embedder)  # shared with the history, and emptied by a forget
        self._now = now
        self.policy_for = policy_for
        self._cache = ScopeCache(self._load_scope, versions=versions) if cache_scopes else None
        self._files = files
        self._chroma = _StoreLock()  # erasing rewrites chromadb's database: no call of ours may run meanwhile
        chroma_erasure.finish_rebuild(client, COLLECTION)
        # embedding_function=None: vectors always come from our offline embedder, never chromadb's default.
        unsearched = cache_scopes and client.get_settings().is_persistent  # chromadb's own search is never used
        self._graph = SPARSE_GRAPH if unsearched else {}  # for a new collection, and for each rebuilt copy
        client.get_or_create_collection(
            COLLECTION,
            embedding_function=None,
            metadata={"hnsw:space": "cosine", "embedder": embedder.name, **self._graph},
        )
        self._collection = _Serialized(saving_index_often(client, COLLECTION), self._chroma)
        # one memory at a time, shared with other jobs' writes; at once where this thread holds the store (erasing)
        self._writes = GatheredWrites(self._collection, at_once=self._chroma.held_here)
        stored_embedder = (self._collection.metadata or {}).get("embedder")
        if stored_embedder and stored_embedder != embedder.name:
            log.warning(
                "this memory store was indexed with %s but %s is in use; search quality will suffer",
                stored_embedder,
                embedder.name,
            )
        self._ids = ids
        if ids is not None:
            self._list_every_memory_once(ids)

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
    ) -> MemoryRecord:
        """Store a new memory in `scope` and return it; `learned_in`: the group it was learned in (None: private);
        `about`: the moment a plan or event refers to; `until`: when a state ends.

        `memory_id`: the id a background job planned it under; a second write of it (the job re-run
        after a crash) replaces the first instead of adding a copy."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}")
        content = content.strip()
        if not content:
            raise ValueError("a memory needs some content")
        now = self._now()
        record = MemoryRecord(
            id=memory_id or new_memory_id(),
            scope=scope,
            content=content,
            category=category,
            importance=_storable(importance),
            created_at=now,
            last_access=now,
            source=source,
            verified=verified,
            topic=topic,
            conversation_id=conversation_id,
            message_ids=tuple(message_ids),
            learned_in=learned_in,
            about=about,
            until=until,
        )
        vector = self.queries.passage_vector(content)[np.newaxis]
        metadata = _metadata(record, self.policy_for(scope.persona_id))
        with fenced_write(scope):
            self._list([(scope, record.id)])
            self._writes.write(
                "add" if memory_id is None else "upsert",
                ids=[record.id],
                documents=[content],
                metadatas=[metadata],
                embeddings=vector,
            )
        if snapshot := self._written(scope):
            snapshot.put(record, vector[0])
        return record

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
    ) -> list[ScoredMemory]:
        """The memories of `scope` most relevant to `query` (meaning and words together), best first;
        only those `audience` may hear of and, given `during`, only those of that stretch of time (even
        with no word or meaning in common: "what did we talk about yesterday?" finds yesterday's episodes).
        `as_passage`: `query` is a memory's text (a duplicate check), compared memory to memory, and its
        vector is kept for storing it."""
        if not query.strip() or limit <= 0:
            return []
        prepared = self.queries.encode(query, as_passage=as_passage)
        wanted = None if categories is None else _known(categories)
        if self._cache is not None:
            snapshot = self._cache.get(scope)
        else:
            result = self._collection.query(
                query_embeddings=[prepared.vector],
                n_results=max(limit * 5, SERVER_CANDIDATES),
                where=_scope_filter(scope, wanted, audience),
                include=["documents", "metadatas", "embeddings"],
            )
            found = zip(result["ids"][0], result["documents"][0], result["metadatas"][0])
            records = [_record(memory_id, content, meta) for memory_id, content, meta in found]
            snapshot = ScopeSnapshot(records, np.asarray(result["embeddings"][0]), self._embedder.dim)
        allowed = None if audience.sees_everything else audience.may_use
        hits = snapshot.search(prepared, limit, wanted, allowed, during)
        current = self._current(hit.record for hit in hits)
        return [replace(hit, record=record) for hit, record in zip(hits, current)]

    def get(self, scope: Scope, ids: Iterable[str]) -> list[MemoryRecord]:
        """The records with these ids that belong to `scope`; ids of other scopes are simply absent."""
        wanted = list(dict.fromkeys(ids))
        return self._current(self._stored(scope, wanted)) if wanted else []

    def memories(self, scope: Scope, *, categories: Iterable[Category] | None = None) -> list[MemoryRecord]:
        """Every memory of `scope`, most important first."""
        if self._cache is not None:
            stored = self._cache.get(scope).records(categories)
        else:
            wanted = None if categories is None else set(_known(categories))
            found = _records_of(self._scope_rows(scope, ["documents", "metadatas"]))
            stored = [record for record in found if wanted is None or record.category in wanted]
        return sorted(self._current(stored), key=lambda record: (-record.importance, record.created_at))

    def with_vectors(self, scope: Scope, categories: Iterable[Category]) -> tuple[list[MemoryRecord], np.ndarray]:
        """The memories of `scope` in these categories and their unit vectors, row for row (background passes
        that compare memories to each other), as stored: their importance is the base, not decayed to now (those
        passes read no importance, and decaying every memory of a scope is most of the read's CPU)."""
        if self._cache is not None:
            stored, vectors = self._cache.get(scope).with_vectors(categories)
        else:  # read as a snapshot is: by the listed ids where there is a list
            wanted = set(_known(categories))
            result = self._scope_rows(scope, ["documents", "metadatas", "embeddings"])
            records = _records_of(result)
            rows = [row for row, record in enumerate(records) if record.category in wanted]
            stored = [records[row] for row in rows]
            vectors = np.asarray(result["embeddings"], dtype=np.float32).reshape(-1, self._embedder.dim)[rows]
        return stored, vectors.reshape(len(stored), self._embedder.dim)

    def update(self, scope: Scope, memory_id: str, change: MemoryChange) -> MemoryRecord | None:
        """Change one memory of `scope` as `change` says; returns the new record, or None if `scope` has no such id.

        New content is dated from now unless the change says when (`changed_at`)."""
        found = self._owned(scope, [memory_id])
        if not found:
            return None
        record = _changed(found[0], change, self._now())
        metadata = _metadata(record, self.policy_for(scope.persona_id))
        vector = None if record.content == found[0].content else self.queries.passage_vector(record.content)[np.newaxis]
        with fenced_write(scope):
            if vector is None:
                # documents without embeddings would make chromadb embed them with its own (downloaded) model
                self._writes.write("update", ids=[record.id], metadatas=[metadata])
            else:
                self._writes.write(
                    "update", ids=[record.id], documents=[record.content], metadatas=[metadata], embeddings=vector
                )
        if snapshot := self._written(scope):
            snapshot.put(record, None if vector is None else vector[0])
        return self._current([record])[0]

    def write_many(
        self,
        scope: Scope,
        *,
        added: Sequence[MemoryRecord] = (),
        changed: Sequence[tuple[str, MemoryChange]] = (),
        deleted: Sequence[str] = (),
    ) -> None:
        """Many writes to `scope` at once, each kind one chromadb call (every call costs a few milliseconds besides its
        records', more the larger the collection): `added`, new memories of `scope` under the ids they were planned
        with, stored as they are (written again, one replaces itself); `changed`, changes as `update` makes them;
        `deleted`, memories deleted once the others are written. Ids `scope` does not hold are skipped."""
        if any(record.scope != scope for record in added):
            raise ValueError("a memory added to a scope must belong to it")
        named = list(dict.fromkeys([*(memory_id for memory_id, _ in changed), *deleted]))
        stored = {record.id: record for record in self._stored(scope, named)} if named else {}
        now, policy = self._now(), self.policy_for(scope.persona_id)
        changes: dict[str, MemoryRecord] = {}  # each changed memory as its changes leave it, in turn
        for memory_id, change in changed:
            if memory_id in stored:
                changes[memory_id] = _changed(changes.get(memory_id, stored[memory_id]), change, now)
        written = [
            replace(record, importance=(base := _storable(base_of(record))), base_importance=base) for record in added
        ]
        written += [new for new in changes.values() if new.content != stored[new.id].content]  # new text, new vector
        relabelled = [new for new in changes.values() if new.content == stored[new.id].content]
        doomed = [memory_id for memory_id in dict.fromkeys(deleted) if memory_id in stored]
        if not (written or relabelled or doomed):
            return
        vectors = self._embedder.embed_passages([record.content for record in written]) if written else None
        with fenced_write(scope):
            self._list(scope_pairs(scope, [record.id for record in added]))
            if written:
                self._collection.upsert(
                    ids=[record.id for record in written],
                    documents=[record.content for record in written],
                    metadatas=[_metadata(record, policy) for record in written],
                    embeddings=vectors,
                )
            if relabelled:
                self._collection.update(
                    ids=[record.id for record in relabelled],
                    metadatas=[_metadata(record, policy) for record in relabelled],
                )
            if doomed:
                self._collection.delete(ids=doomed)
                self._deleted()
        if snapshot := self._written(scope):
            for row, record in enumerate(written):
                snapshot.put(record, None if vectors is None else vectors[row])
            for record in relabelled:
                snapshot.put(record, None)
            snapshot.remove(doomed)
        self._unlist(scope_pairs(scope, doomed))

    def delete(self, scope: Scope, ids: Iterable[str]) -> int:
        """Delete the memories of `scope` with these ids; returns how many were deleted."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0
        # Stored records suffice: which ids this scope owns does not depend on their decayed importance.
        owned = [record.id for record in self._owned(scope, wanted)]
        if owned:
            self._collection.delete(ids=owned)
            self._deleted()
            if snapshot := self._written(scope):
                snapshot.remove(owned)
            self._unlist(scope_pairs(scope, owned))
        return len(owned)

    def forget_all(self, scope: Scope) -> int:
        """Delete every memory of `scope`; none of its ids stays listed."""
        owned = self._every_id(scope)
        if owned:
            self._collection.delete(ids=owned)
            self._deleted()
        if self._ids is not None:
            self._ids.forget(scope)
        if self._cache is not None:
            self._cache.drop([scope])
        return len(owned)

    def compact(self) -> bool:
        """Rebuild the collection if deletes left vectors in the vector index (hnswlib only marks them
        deleted, and chromadb keeps them in its files for good): copy the live records, vectors
        included, into a new collection that takes the old one's place, then erase what the old one
        left. Calls on the store run between the pages copied; a write meanwhile is copied again at the end.
        False when nothing was due, or for a Chroma server."""
        if self._files is None or not (self._files / chroma_erasure.COMPACTION_DUE).exists():
            return False
        started = time.perf_counter()
        with self._chroma:
            rebuild = chroma_erasure.Rebuild(self._client, COLLECTION, self._graph)
            self._collection.written = set()
        listed = self._ids.listed() if self._ids is not None else {}  # before: a write meanwhile is listed first
        copied: dict[str, Scope | None] = {}  # the scope of each record copied; None: deleted meanwhile
        try:
            for page in rebuild.pages():
                with self._chroma:  # a page at a time, between other calls on the store
                    copied |= _scopes_of(rebuild.take(page))
            with self._chroma:
                copied |= _scopes_of(rebuild.finish(self._collection.written))
                self._collection.collection = saving_index_often(self._client, COLLECTION)
                chroma_erasure.erase_remnants(self._files / chroma_erasure.DATABASE, NOTHING)
                (self._files / chroma_erasure.COMPACTION_DUE).unlink()
        finally:
            self._collection.written = None
        log.info("vector index rebuilt without deleted vectors in %.2fs", time.perf_counter() - started)
        # every record passed through this process: the ids are checked against them without reading them again
        stored = {(scope, memory_id) for memory_id, scope in copied.items() if scope is not None}
        if missing := self._mend_ids(listed, stored):
            log.warning("%d memories were not listed among their scope's ids; listed now", missing)
        return True

    def _deleted(self) -> None:
        """Deletes leave their vectors in the vector index: the next `compact` rebuilds it."""
        if self._files is not None:
            (self._files / chroma_erasure.COMPACTION_DUE).touch()

    def erase_remnants(self, target: ForgetTarget) -> bool:
        """Remove from chromadb's files what its deletes leave behind, and superseded versions matching `target`.

        False for a Chroma server, whose files this process cannot reach (its operator's maintenance must do it).
        """
        if self._files is None:
            return False
        with self._chroma:
            chroma_erasure.erase_remnants(self._files / chroma_erasure.DATABASE, target)
        return True

    def count(self, scope: Scope) -> int:
        """How many memories `scope` holds."""
        return len(self._scope_rows(scope, [])["ids"])

    def check_ids(self) -> int:
        """Compare the listed ids (`scope_ids.py`) with what chromadb holds: list every memory not listed, and
        unlist strays older than `STRAY_GRACE`; returns how many were listed. A full pass over the store's
        metadata (about 0.1 ms a memory), for the first start with the list."""
        if self._ids is None:
            return 0
        listed = self._ids.listed()  # read first: a memory written meanwhile is listed before chromadb has it
        ids = self._collection.get(include=[])["ids"]
        stored: set[tuple[Scope, str]] = set()
        for start in range(0, len(ids), MAINTENANCE_PAGE):
            page = self._collection.get(ids=ids[start : start + MAINTENANCE_PAGE], include=["metadatas"])
            stored.update((_scope_of(meta), memory_id) for memory_id, meta in zip(page["ids"], page["metadatas"]))
        return self._mend_ids(listed, stored)

    def _mend_ids(self, listed: dict[tuple[Scope, str], str], stored: set[tuple[Scope, str]]) -> int:
        """List what chromadb holds (`stored`) but `listed` lacks, and unlist strays of `listed` older than
        `STRAY_GRACE`; returns how many were listed."""
        if self._ids is None:
            return 0
        missing = stored - listed.keys()
        cutoff = self._now() - STRAY_GRACE
        old = iso(cutoff)
        strays = [pair for pair, listed_at in listed.items() if pair not in stored and listed_at < old]
        self._ids.add(missing, self._now())
        self._ids.remove_strays(strays, listed_before=cutoff)
        return len(missing)

    def _current(self, stored: Iterable[MemoryRecord], now: datetime | None = None) -> list[MemoryRecord]:
        """Stored records as of `now` (default: the clock's now), each with the importance it has decayed to.

        A stored record is never changed in place (a scope snapshot may share it): a decayed one is a copy.
        """
        now = now or self._now()
        policy_for = cache(self.policy_for)
        return [_as_of(record, now, policy_for(record.scope.persona_id)) for record in stored]

    def _written(self, scope: Scope) -> ScopeSnapshot | None:
        return self._cache.writing(scope) if self._cache is not None else None

    def _load_scope(self, scope: Scope) -> ScopeSnapshot:
        result = self._scope_rows(scope, ["documents", "metadatas", "embeddings"])
        return ScopeSnapshot(_records_of(result), np.asarray(result["embeddings"]), self._embedder.dim)

    def _scope_rows(self, scope: Scope, include: list[str]) -> dict[str, list[Any]]:
        """chromadb's `get` of every memory of `scope`: by the listed ids (strays skipped, and unlisted once
        old enough), or without a list by scanning the collection's metadata."""
        if self._ids is None:
            return dict(self._collection.get(where=_scope_filter(scope), include=include))
        listed = self._ids.of(scope)
        found: dict[str, list[Any]] = {"ids": [], **{key: [] for key in include}}
        for start in range(0, len(listed), MAINTENANCE_PAGE):
            page = self._collection.get(
                ids=listed[start : start + MAINTENANCE_PAGE], include=list({*include, "metadatas"})
            )
            for row, (memory_id, meta) in enumerate(zip(page["ids"], page["metadatas"])):
                if _scope_of(meta) == scope:  # an id listed under two scopes (a move cut short) is read in one
                    found["ids"].append(memory_id)
                    for key in include:
                        found[key].append(page[key][row])
        if len(found["ids"]) < len(listed):
            strays = sorted(set(listed) - set(found["ids"]))
            self._ids.remove_strays(scope_pairs(scope, strays), listed_before=self._now() - STRAY_GRACE)
        return found

    def _every_id(self, scope: Scope) -> list[str]:
        """The ids of every memory of `scope`, from chromadb itself: for the writes that must reach them all
        (a forget, a move), which are rare, not from the list (a memory it missed would stay behind)."""
        return list(self._collection.get(where=_scope_filter(scope), include=[])["ids"])

    def _list(self, pairs: Sequence[tuple[Scope, str]]) -> None:
        """List memories before they are written (see `scope_ids.py`)."""
        if self._ids is not None:
            self._ids.add(pairs, self._now())

    def _unlist(self, pairs: Sequence[tuple[Scope, str]]) -> None:
        """Unlist memories after they were deleted."""
        if self._ids is not None:
            self._ids.remove(pairs)

    def _list_every_memory_once(self, ids: ScopeIds) -> None:
        """List what the store holds, the first time it is opened with `ids` (or replaced by another store), and
        again if fewer ids are listed than it holds (a version without the list wrote to it)."""
        store_id = chroma_erasure.store_identity(self._collection)
        if ids.complete_for(store_id) and ids.total() >= self._collection.count():
            return
        started = time.perf_counter()
        log.info("listing the ids of every scope's memories (once, about 0.1 ms a memory)")
        ids.start(store_id)
        missing = self.check_ids()
        ids.finish(store_id)
        log.info("listed %d memories among their scope's ids in %.2fs", missing, time.perf_counter() - started)

    def _drop_snapshots(self, scopes: Iterable[Scope]) -> None:
        # Maintenance wrote to these scopes directly; reload them on next use.
        if self._cache is not None:
            self._cache.drop(scopes)

    def _fetch(self, **query: Any) -> list[MemoryRecord]:
        """Records as stored (importance = base), for the reads above to bring up to date."""
        return _records_of(self._collection.get(include=["documents", "metadatas"], **query))

    def _stored(self, scope: Scope, ids: list[str]) -> list[MemoryRecord]:
        """The records with these ids that belong to `scope`, as stored: from its snapshot where snapshots are kept
        (the monitor's reads of what a turn showed, a night's writes: chromadb's reads grow with the collection)."""
        if self._cache is not None:
            return self._cache.get(scope).records_with(ids)
        return self._owned(scope, ids)

    def _owned(self, scope: Scope, ids: list[str]) -> list[MemoryRecord]:
        """The records with these ids that belong to `scope`, as stored. Checked here, not by a `where`: chromadb
        evaluates a filter over the whole collection even when ids are given (7 ms against 0.9 at 10,000)."""
        return [record for record in self._fetch(ids=ids) if record.scope == scope]

    # -- maintenance: passes over every scope, never used for a chat turn -------------------------

    def add_records(self, records: Sequence[MemoryRecord]) -> None:
        """Store prepared records as they are (ids, timestamps, importances), embedding in batches; for imports."""
        policy_for = cache(self.policy_for)
        for start in range(0, len(records), MAINTENANCE_PAGE):
            batch = records[start : start + MAINTENANCE_PAGE]
            self._list([(record.scope, record.id) for record in batch])
            self._collection.add(
                ids=[record.id for record in batch],
                documents=[record.content for record in batch],
                metadatas=[_metadata(record, policy_for(record.scope.persona_id)) for record in batch],
                embeddings=self._embedder.embed_passages([record.content for record in batch]),
            )
        self._drop_snapshots(record.scope for record in records)

    def iter_due_record_pages(
        self, now: datetime, *, page_size: int = MAINTENANCE_PAGE
    ) -> Iterator[list[MemoryRecord]]:
        """The memories of every scope that the decay pass must act on at `now` other than by asking for a
        review (see `fetch_review_due_records`), as of `now`, a page at a time.

        One range query over `due_at` (kept by every write) finds them; the ids are listed first and
        then read by id, so changing or deleting records between pages neither skips nor repeats any.
        """
        ids = self._collection.get(where={"due_at": {"$lte": _timestamp(now)}}, include=[])["ids"]
        for start in range(0, len(ids), page_size):
            yield self._current(self._fetch(ids=ids[start : start + page_size]), now)

    def fetch_review_due_records(self, now: datetime, *, limit: int) -> list[MemoryRecord]:
        """At most `limit` of the memories (of any scope) whose review the decay pass must ask for at `now`.

        Only as many as the pass may request are read: the rest of a backlog waits in the store, unread,
        until a later pass has room for it."""
        if limit <= 0:
            return []
        ids = self._collection.get(where={"review_due_at": {"$lte": _timestamp(now)}}, limit=limit, include=[])["ids"]
        return self._current(self._fetch(ids=ids), now) if ids else []

    def dated_records(self, after: datetime, before: datetime, *, categories: Iterable[Category]) -> list[MemoryRecord]:
        """The memories of every scope, of these categories, about a moment from `after` to `before` (one range
        query over `about`: memories without a date are never read), as of now."""
        where = {
            "$and": [
                {"about": {"$gte": _timestamp(after)}},
                {"about": {"$lte": _timestamp(before)}},
                _category_filter(categories),
            ]
        }
        return self._current(self._fetch(where=where))

    def records_on_days(self, days: Iterable[str], *, categories: Iterable[Category]) -> list[MemoryRecord]:
        """The memories of every scope, of these categories, about a moment on one of these days of the year
        (`MM-DD`, in UTC) of any year, as of now; memories last written before days were kept are not found."""
        where = {"$and": [{"about_day": {"$in": list(days)}}, _category_filter(categories)]}
        return self._current(self._fetch(where=where))

    def move_user(self, persona_id: str, old_user: str, new_user: str) -> int:
        """Give every memory of (persona, `old_user`) to (persona, `new_user`) as it is; returns how many moved."""
        old, new = Scope(persona_id, old_user), Scope(persona_id, new_user)
        ids = self._every_id(old)
        self._list(scope_pairs(new, ids))
        for start in range(0, len(ids), MAINTENANCE_PAGE):
            batch = ids[start : start + MAINTENANCE_PAGE]
            self._collection.update(ids=batch, metadatas=[{"user_id": new_user}] * len(batch))  # merged, not replaced
        self._unlist(scope_pairs(old, ids))
        self._drop_snapshots([old, new])
        return len(ids)

    def personas_of(self, user_id: str) -> set[str]:
        """The personas that keep memories of `user_id`."""
        found = self._collection.get(where={"user_id": user_id}, include=["metadatas"])
        return {str(meta["persona_id"]) for meta in found["metadatas"] or []}

    def write_decay_state_many(self, records: Sequence[MemoryRecord]) -> None:
        """Write the review flag and wait of records of any scope, and with them when the pass must act next.

        Only those two keys are written (chromadb merges them into the stored metadata), so a boost
        that lands after the pass read a record keeps its base and last access; the due time computed
        from the older state then errs early, and the pass schedules the record again when it comes.
        """
        if not records:
            return
        policy_for = cache(self.policy_for)
        for start in range(0, len(records), MAINTENANCE_PAGE):
            batch = records[start : start + MAINTENANCE_PAGE]
            self._collection.update(
                ids=[record.id for record in batch],
                metadatas=[_decay_state(record, policy_for(record.scope.persona_id)) for record in batch],
            )
        self._drop_snapshots(record.scope for record in records)

    def delete_many(self, doomed: Iterable[tuple[Scope, str]]) -> None:
        """Delete records of any scope, named by (scope, id); ids that no longer exist are ignored."""
        wanted = list(doomed)
        if not wanted:
            return
        for start in range(0, len(wanted), MAINTENANCE_PAGE):
            self._collection.delete(ids=[memory_id for _, memory_id in wanted[start : start + MAINTENANCE_PAGE]])
        self._deleted()
        self._unlist(wanted)
        self._drop_snapshots(scope for scope, _ in wanted)


_WRITES = frozenset({"add", "upsert", "update", "delete"})  # collection calls that change records, all by ids=


class _StoreLock:
    """A reentrant lock that knows whether the calling thread holds it: such a thread must not wait for another
    to write for it, as the other would wait for the lock."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._holder: int | None = None
        self._depth = 0

    def __enter__(self) -> None:
        self._lock.acquire()
        self._holder = threading.get_ident()
        self._depth += 1

    def __exit__(self, *_: object) -> None:
        self._depth -= 1
        if not self._depth:
            self._holder = None
        self._lock.release()

    def held_here(self) -> bool:
        return self._holder == threading.get_ident()


class _Serialized:
    """A chromadb collection whose every call holds `lock`, so erasing never runs beside one of ours.

    A call looks the collection up once it holds the lock: one that waited out a rebuild runs on the new one,
    and a write made while a rebuild copies is named in `written`, for the rebuild to take again at its end.
    """

    def __init__(self, collection: Any, lock: _StoreLock) -> None:
        self.collection = collection
        self.written: set[str] | None = None  # while a rebuild copies: the ids every write names
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        if not callable(getattr(self.collection, name)):
            return getattr(self.collection, name)

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                if self.written is not None and name in _WRITES:
                    self.written.update(kwargs["ids"])
                return getattr(self.collection, name)(*args, **kwargs)

        return locked


def _scope_of(meta: dict[str, Any]) -> Scope:
    return Scope(str(meta["persona_id"]), str(meta["user_id"]))


def _scopes_of(metadatas: dict[str, Any]) -> dict[str, Scope | None]:
    """The scope of each record by id, of its metadata (None stays None)."""
    return {memory_id: None if meta is None else _scope_of(meta) for memory_id, meta in metadatas.items()}


def _records_of(result: Any) -> list[MemoryRecord]:
    """The records of a chromadb `get` result, as stored."""
    return [
        _record(memory_id, content, meta)
        for memory_id, content, meta in zip(result["ids"], result["documents"], result["metadatas"])
    ]


def _as_of(record: MemoryRecord, now: datetime, policy: MemoryPolicy) -> MemoryRecord:
    importance = current_importance(record, now, policy)
    return record if importance == record.importance else replace(record, importance=importance)

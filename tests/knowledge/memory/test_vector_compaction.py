"""Deleted memories' vectors leave chromadb's files: the store rebuilds its collection without them.

hnswlib only marks a deleted vector deleted and chromadb writes it to `data_level0.bin` for good. These
tests find vectors in the raw bytes of every file, as an attacker with the disk would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from chromadb.errors import InternalError as ChromaInternalError
from numpy.lib.stride_tricks import sliding_window_view

from knowledge.forget.target import NOTHING
from knowledge.memory import chroma_erasure
from knowledge.memory.chroma_store import (
    COLLECTION,
    DEFAULT_SYNC_THRESHOLD,
    INDEX_SAVED_EVERY,
    SPARSE_GRAPH,
    ChromaKnowledgeBase,
    open_chroma_client,
    retry_while_locked,
)
from knowledge.memory.scope_ids import ScopeIds
from knowledge.memory.store_guard import MemoryStoreGuard
from knowledge.records import MemoryChange, Scope
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock

FACTS = [f"Alice's note number {n}: {word}" for n, word in enumerate("ramen cat marathon nurse river piano".split())]
SECRET = "Alice's diagnosis is hypothyroidism"


def files_holding(directory: Path, vector: np.ndarray) -> set[str]:
    """The files under `directory` whose bytes hold `vector` as float32, at any byte offset."""
    found = set()
    for path in directory.rglob("*"):
        raw = path.read_bytes() if path.is_file() else b""
        for shift in range(4):
            usable = (len(raw) - shift) // 4 * 4
            if usable < 4 * len(vector):
                continue
            with np.errstate(all="ignore"):
                floats = np.frombuffer(raw[shift : shift + usable], dtype="<f4").astype(np.float64)
            floats[~(np.abs(floats) <= 1.0)] = 0.0  # a unit vector's parts; the rest is other data
            windows = sliding_window_view(floats, len(vector))
            squares = np.concatenate([[0.0], np.cumsum(floats**2)])
            norms = np.sqrt(np.abs(squares[len(vector) :] - squares[: -len(vector)]))
            norms[norms < 0.5] = np.inf  # a stored unit vector has a norm of 1; these are other bytes
            with np.errstate(all="ignore"):
                if np.nanmax((windows @ vector) / norms) > 0.999:  # the cosine of each window and `vector`
                    found.add(path.name)
    return found


@pytest.fixture
def chroma_dir(tmp_path: Path, embedder: Embedder) -> Path:
    """A store whose vector index is written to disk every few writes, as a large store's is every 1,000."""
    directory = tmp_path / "chroma"
    open_chroma_client(path=directory).create_collection(
        COLLECTION,
        embedding_function=None,
        metadata={"hnsw:space": "cosine", "embedder": embedder.name, "hnsw:sync_threshold": 4, "hnsw:batch_size": 4},
    )
    return directory


def open_store(directory: Path, embedder: Embedder, clock: FakeClock) -> ChromaKnowledgeBase:
    """The store as the app opens it: each scope's memory ids kept in the SQLite file beside it."""
    ids = ScopeIds(directory.parent / "companion.sqlite3")
    return ChromaKnowledgeBase(open_chroma_client(path=directory), embedder, now=clock.now, files=directory, ids=ids)


def test_a_deleted_memorys_vector_leaves_every_file_at_the_next_compaction(
    chroma_dir: Path, embedder: Embedder, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    store = open_store(chroma_dir, embedder, clock)
    guard = MemoryStoreGuard(chroma_dir.parent / "companion.sqlite3", COLLECTION)
    guard.record(open_chroma_client(path=chroma_dir))
    kept = [store.add(alice, fact, category="fact", source="user") for fact in FACTS]
    kept.append(store.add(bob, "Bob plays the cello", category="fact", source="user"))
    secret = store.add(alice, SECRET, category="fact", source="user")
    kept.append(store.add(alice, "Alice walks to work", category="fact", source="user"))  # past the secret's batch
    [vector] = embedder.embed_passages([SECRET])
    assert "data_level0.bin" in files_holding(chroma_dir, vector)
    assert store.compact() is False  # nothing deleted yet: nothing to rebuild

    store.delete(alice, [secret.id])
    store.erase_remnants(NOTHING)
    assert files_holding(chroma_dir, vector) == {"data_level0.bin"}  # chromadb keeps the deleted vector

    assert store.compact() is True
    assert files_holding(chroma_dir, vector) == set()
    assert not (chroma_dir / chroma_erasure.COMPACTION_DUE).exists() and store.compact() is False
    # everything else is as it was, in this process and the next
    [bobs] = embedder.embed_passages(["Bob plays the cello"])
    assert files_holding(chroma_dir, bobs)
    reopened = open_store(chroma_dir, embedder, clock)
    for current in (store, reopened):
        assert {record.id for record in current.memories(alice)} == {
            record.id for record in kept if record.scope == alice
        }
        assert current.search(alice, "my running training", limit=1)[0].record.id == kept[2].id
        assert [record.content for record in current.memories(bob)] == ["Bob plays the cello"]
        assert current.get(alice, [kept[0].id]) == store.get(alice, [kept[0].id])
    assert reopened.count(alice) == len(FACTS) + 1
    guard.check(open_chroma_client(path=chroma_dir), messages_held=True)  # still the store the data directory knows


def test_forgetting_everything_of_a_user_makes_a_compaction_due(
    chroma_dir: Path, embedder: Embedder, clock: FakeClock, alice: Scope
) -> None:
    store = open_store(chroma_dir, embedder, clock)
    store.add(alice, SECRET, category="fact", source="user")
    store.forget_all(alice)
    assert (chroma_dir / chroma_erasure.COMPACTION_DUE).exists()
    assert store.compact() and store.count(alice) == 0


def test_a_rebuild_cut_short_while_copying_keeps_the_old_collection(
    chroma_dir: Path, embedder: Embedder, clock: FakeClock, alice: Scope
) -> None:
    store = open_store(chroma_dir, embedder, clock)
    memories = [store.add(alice, fact, category="fact", source="user") for fact in FACTS]
    client = open_chroma_client(path=chroma_dir)
    client.create_collection(COLLECTION + chroma_erasure.REBUILDING, embedding_function=None)  # half a copy
    reopened = open_store(chroma_dir, embedder, clock)
    assert [collection.name for collection in client.list_collections()] == [COLLECTION]
    assert {record.id for record in reopened.memories(alice)} == {record.id for record in memories}


def test_a_rebuild_cut_short_after_the_old_collection_went_takes_the_copy(
    chroma_dir: Path, embedder: Embedder, clock: FakeClock, alice: Scope
) -> None:
    store = open_store(chroma_dir, embedder, clock)
    memories = [store.add(alice, fact, category="fact", source="user") for fact in FACTS]
    client = open_chroma_client(path=chroma_dir)
    old = client.get_collection(COLLECTION, embedding_function=None)
    metadata = {**(old.metadata or {}), chroma_erasure.STORE_ID: str(old.id)}  # as a rebuild makes it
    copy = client.create_collection(COLLECTION + chroma_erasure.REBUILDING, embedding_function=None, metadata=metadata)
    copy.add(**{key: value for key, value in old.get(include=["embeddings", "documents", "metadatas"]).items()
                if key in ("ids", "embeddings", "documents", "metadatas")})  # fmt: skip
    client.delete_collection(COLLECTION)  # the crash came right after this
    reopened = open_store(chroma_dir, embedder, clock)
    assert [collection.name for collection in client.list_collections()] == [COLLECTION]
    assert {record.id for record in reopened.memories(alice)} == {record.id for record in memories}
    assert reopened.search(alice, "my running training", limit=1)[0].record.id == memories[2].id
    assert chroma_erasure.store_identity(client.get_collection(COLLECTION)) == str(old.id)


def test_writes_made_while_the_rebuild_copies_are_all_in_the_rebuilt_store(
    chroma_dir: Path, embedder: Embedder, clock: FakeClock, alice: Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(chroma_dir, embedder, clock)
    memories = [store.add(alice, fact, category="fact", source="user") for fact in FACTS]
    store.delete(alice, [memories.pop().id])
    monkeypatch.setattr(chroma_erasure, "REBUILD_PAGE", 2)
    copy_page = chroma_erasure.Rebuild.take
    meanwhile: list[str] = []

    def take_then_write(rebuild: chroma_erasure.Rebuild, ids: list[str]) -> dict[str, Any]:
        copied = copy_page(rebuild, ids)
        if not meanwhile:  # after the first page, as other calls would run between pages
            meanwhile.append(store.add(alice, "Alice adopted a second cat", category="fact", source="user").id)
            store.update(alice, memories[0].id, MemoryChange(content="Alice's note number 0: tonkotsu ramen"))
            store.delete(alice, [memories[1].id])
        return copied

    monkeypatch.setattr(chroma_erasure.Rebuild, "take", take_then_write)
    assert store.compact()
    expected = {memory.id for memory in memories[2:]} | {memories[0].id, meanwhile[0]}
    listed = ScopeIds(chroma_dir.parent / "companion.sqlite3").listed()
    assert {memory_id for scope, memory_id in listed} == expected  # the ids kept in step through the rebuild
    for current in (store, open_store(chroma_dir, embedder, clock)):
        assert {record.id for record in current.memories(alice)} == expected
        assert current.get(alice, [memories[0].id])[0].content == "Alice's note number 0: tonkotsu ramen"
        assert current.search(alice, "a new kitten", limit=1)[0].record.id == meanwhile[0]


def test_an_older_store_saves_its_index_every_50_writes_and_its_rebuilt_copy_links_its_vectors_sparsely(
    tmp_path: Path, embedder: Embedder, clock: FakeClock, alice: Scope
) -> None:
    directory = tmp_path / "chroma"
    open_chroma_client(path=directory).create_collection(  # as an earlier version made it: chromadb's defaults
        COLLECTION, embedding_function=None, metadata={"hnsw:space": "cosine", "embedder": embedder.name}
    )

    def hnsw() -> dict[str, Any]:
        return dict(open_chroma_client(path=directory).get_collection(COLLECTION).configuration["hnsw"])

    assert hnsw()["sync_threshold"] == DEFAULT_SYNC_THRESHOLD
    store = open_store(directory, embedder, clock)
    assert (hnsw()["sync_threshold"], hnsw()["max_neighbors"], hnsw()["ef_construction"]) == (
        INDEX_SAVED_EVERY,
        16,
        100,
    )
    memories = [store.add(alice, fact, category="fact", source="user") for fact in FACTS]
    store.delete(alice, [memories.pop().id])
    assert store.compact() is True
    sparse = (SPARSE_GRAPH["hnsw:M"], SPARSE_GRAPH["hnsw:construction_ef"])
    assert (hnsw()["sync_threshold"], hnsw()["max_neighbors"], hnsw()["ef_construction"]) == (
        INDEX_SAVED_EVERY,
        *sparse,
    )
    found, vectors = open_store(directory, embedder, clock).with_vectors(alice, ["fact"])  # the old one's vectors
    assert {record.id for record in found} == {record.id for record in memories}
    assert np.allclose(vectors, embedder.embed_passages([record.content for record in found]), atol=1e-5)


def test_a_write_to_a_briefly_locked_store_is_tried_again_and_any_other_error_is_raised() -> None:
    tries: list[int] = []

    def locked_twice() -> None:
        tries.append(1)
        if len(tries) <= 2:
            raise ChromaInternalError("Database error: error returned from database: (code: 5) database is locked")

    retry_while_locked(locked_twice, first_pause=0.001)
    assert len(tries) == 3

    def broken() -> None:
        raise ChromaInternalError("Database error: no such table: collections")

    with pytest.raises(ChromaInternalError, match="no such table"):
        retry_while_locked(broken, first_pause=0.001)

    def always_locked() -> None:
        raise ChromaInternalError("database is locked")

    with pytest.raises(ChromaInternalError, match="locked"):  # a lock that outlasts the pauses is an error
        retry_while_locked(always_locked, attempts=3, first_pause=0.001)

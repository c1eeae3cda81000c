"""Scope snapshots answer searches exactly as chromadb would, and follow every write."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from knowledge.memory.chroma_store import ChromaKnowledgeBase, open_chroma_client
from knowledge.records import MemoryChange, Scope
from knowledge.search.embedding import Embedder
from knowledge.search.index import Query
from knowledge.search.scope_cache import ScopeCache, ScopeSnapshot
from tests.fakes.clock import FakeClock

FACTS = [
    "Alice loves tonkotsu ramen",
    "主人下周二要去面试",
    "Alice's cat is called Mochi",
    "主人的生日是五月三日",
    "Alice works as a nurse on night shifts",
    "主人最近在学吉他",
    "Alice is afraid of spiders",
]
QUERIES = ["what food do I like?", "面试是什么时候", "pet name", "生日", "my job", "乐器", "what scares me"]


@pytest.fixture
def stores(tmp_path: Path, embedder: Embedder, clock: FakeClock) -> tuple[ChromaKnowledgeBase, ChromaKnowledgeBase]:
    """Two views of one store: snapshots on, and chromadb's own query."""
    client = open_chroma_client(path=tmp_path / "chroma")
    return (
        ChromaKnowledgeBase(client, embedder, now=clock.now, cache_scopes=True),
        ChromaKnowledgeBase(client, embedder, now=clock.now, cache_scopes=False),
    )


def ranked(store: ChromaKnowledgeBase, scope: Scope, query: str) -> list[tuple[str, float]]:
    return [(hit.record.id, round(hit.similarity, 4)) for hit in store.search(scope, query, limit=4)]


def test_snapshots_rank_like_chromadb(stores, alice: Scope, bob: Scope) -> None:  # type: ignore[no-untyped-def]
    cached, direct = stores
    for fact in FACTS:
        cached.add(alice, fact, category="fact", source="user")
        cached.add(bob, f"Bob: {fact}", category="fact", source="user")
    for query in QUERIES:
        from_snapshot, from_chroma = ranked(cached, alice, query), ranked(direct, alice, query)
        assert [hit for hit, _ in from_snapshot] == [hit for hit, _ in from_chroma]
        assert [score for _, score in from_snapshot] == pytest.approx([score for _, score in from_chroma], abs=1e-3)


def test_snapshots_follow_every_write(stores, alice: Scope, bob: Scope) -> None:  # type: ignore[no-untyped-def]
    cached, _ = stores
    first = cached.add(alice, "Alice lives in Beijing", category="fact", source="user")
    assert cached.search(alice, "where do I live", limit=1)[0].record.id == first.id  # loads the snapshot

    cached.update(alice, first.id, MemoryChange(content="Alice lives in Shanghai", importance=1.3))
    [hit] = cached.search(alice, "Shanghai", limit=1)
    assert (hit.record.content, hit.record.importance) == ("Alice lives in Shanghai", 1.3)

    second = cached.add(alice, "Alice plays the cello", category="core", source="user")
    assert [record.id for record in cached.memories(alice, categories=["core"])] == [second.id]

    cached.delete(alice, [first.id])
    assert [hit.record.id for hit in cached.search(alice, "where do I live")] == [second.id]
    cached.add(bob, "Bob lives in Lyon", category="fact", source="user")
    cached.forget_all(alice)
    assert cached.search(alice, "cello") == [] and cached.memories(alice) == []
    assert cached.memories(bob)[0].content == "Bob lives in Lyon"


def test_reads_by_id_follow_the_writes_and_keep_to_the_scope(stores, alice: Scope, bob: Scope) -> None:  # type: ignore[no-untyped-def]
    cached, direct = stores
    ids = [cached.add(alice, fact, category="fact", source="user").id for fact in FACTS]
    bobs = cached.add(bob, "Bob's PIN is 1234", category="fact", source="user")
    cached.memories(alice)  # loads the snapshot

    def read(store: ChromaKnowledgeBase, scope: Scope, wanted: list[str]) -> set[tuple[str, str]]:
        return {(record.id, record.content) for record in store.get(scope, wanted)}

    assert read(cached, alice, ids) == read(direct, alice, ids) == {(i, fact) for i, fact in zip(ids, FACTS)}
    assert cached.get(alice, [bobs.id]) == [] and cached.get(alice, ["no-such-id"]) == []
    cached.update(alice, ids[0], MemoryChange(content="Alice loves shoyu ramen"))
    cached.delete(alice, [ids[1]])
    assert read(cached, alice, ids[:2]) == read(direct, alice, ids[:2]) == {(ids[0], "Alice loves shoyu ramen")}


@pytest.mark.parametrize("cache_scopes", [True, False])
def test_every_read_gives_the_importance_of_the_moment(  # type: ignore[no-untyped-def]
    stores, clock: FakeClock, alice: Scope, cache_scopes: bool
) -> None:
    store = stores[0 if cache_scopes else 1]
    fact = store.add(alice, "Alice loves tonkotsu ramen", category="fact", source="user")
    [first] = store.memories(alice)  # loads the snapshot before the days pass
    for days, expected in ((7, 1.0), (1, 0.95), (6, 0.95**7)):
        clock.advance(days=days)
        [got] = store.get(alice, [fact.id])
        [listed] = store.memories(alice)
        [hit] = store.search(alice, "ramen", limit=1)
        assert got.importance == listed.importance == hit.record.importance == pytest.approx(expected, abs=1e-12)
    assert first.importance == 1.0  # what a reader already holds does not change under it


def test_maintenance_writes_reload_the_snapshots(stores, alice: Scope) -> None:  # type: ignore[no-untyped-def]
    cached, _ = stores
    record = cached.add(alice, "Alice likes tea", category="fact", source="user")
    cached.memories(alice)
    cached.write_decay_state_many([replace(record, review_pending="decay")])
    assert cached.memories(alice)[0].review_pending == "decay"
    cached.delete_many([(record.scope, record.id)])
    assert cached.memories(alice) == []


def test_a_load_that_overlaps_a_write_is_not_kept(alice: Scope) -> None:
    loads: list[int] = []
    cache: ScopeCache

    def load(scope: Scope):  # type: ignore[no-untyped-def]
        loads.append(1)
        if len(loads) == 1:
            cache.writing(scope)  # a write lands while this (now stale) load is in flight
        return ScopeSnapshot([], np.zeros((0, 4), dtype=np.float32), dim=4)

    cache = ScopeCache(load)
    cache.get(alice)
    cache.get(alice)
    cache.get(alice)
    assert len(loads) == 2  # the stale snapshot was used once, then a fresh one loaded and kept


def test_removing_rows_keeps_the_others_searchable(clock: FakeClock, alice: Scope) -> None:
    from knowledge.records import MemoryRecord

    vectors = np.eye(4, dtype=np.float32)
    records = [
        MemoryRecord(f"mem_{i}", alice, f"m{i}", "fact", 1.0, clock.now(), clock.now(), "user") for i in range(4)
    ]
    snapshot = ScopeSnapshot(records, vectors, dim=4)
    snapshot.remove(["mem_0", "mem_2", "mem_missing"])
    assert snapshot.size == 2
    assert snapshot.search(Query("", vectors[3], ()), limit=1)[0].record.id == "mem_3"
    assert snapshot.search(Query("", vectors[1], ()), limit=1)[0].record.id == "mem_1"
    for i in range(20):  # grows past its first capacity
        snapshot.put(MemoryRecord(f"new_{i}", alice, "x", "episode", 1.0, clock.now(), clock.now(), "user"), vectors[0])
    found = snapshot.search(Query("", vectors[3], ("m3",)), limit=1, categories=["fact"])
    assert [hit.record.id for hit in found] == ["mem_3"]


def test_memories_with_their_vectors_read_the_same_from_a_snapshot_and_from_chromadb(
    stores, alice: Scope, bob: Scope
) -> None:  # type: ignore[no-untyped-def]
    cached, direct = stores
    for fact in FACTS:
        cached.add(alice, fact, category="fact", source="user")
    cached.add(alice, "[2027-01-04 10:00] Alice talked about ramen", category="episode", source="background_ai")
    cached.add(bob, "Bob likes tea", category="fact", source="user")
    read = [store.with_vectors(alice, ["fact"]) for store in (cached, direct)]
    for records, vectors in read:
        assert sorted(record.content for record in records) == sorted(FACTS)  # the scope's facts only
        assert vectors.shape == (len(FACTS), cached.queries.passage_vector("x").shape[0])
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    (first, first_vectors), (second, second_vectors) = read
    order = {record.id: row for row, record in enumerate(second)}
    np.testing.assert_allclose(first_vectors, second_vectors[[order[record.id] for record in first]], atol=1e-5)

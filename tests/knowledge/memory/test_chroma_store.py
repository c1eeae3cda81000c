"""The chromadb knowledge base: metadata, persistence, and no way across scopes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge.dates.windows import TimeWindow
from knowledge.memory.chroma_store import (
    COLLECTION,
    SPARSE_GRAPH,
    ChromaKnowledgeBase,
    _metadata,
    open_chroma_client,
)
from knowledge.records import CLEAR, MemoryChange, MemoryRecord, Scope
from knowledge.rules.decay import default_policy
from knowledge.rules.discretion import PRIVATE, Audience
from knowledge.rules.temporal import in_window
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock


@pytest.fixture
def store(tmp_path: Path, embedder: Embedder, clock: FakeClock) -> ChromaKnowledgeBase:
    return ChromaKnowledgeBase(open_chroma_client(path=tmp_path / "chroma"), embedder, now=clock.now)


def test_a_record_keeps_its_metadata(store: ChromaKnowledgeBase, alice: Scope, clock: FakeClock) -> None:
    added = store.add(
        alice,
        "主人喜欢拉面",
        category="fact",
        source="user",
        importance=1.5,
        verified=True,
        topic="preference",
        conversation_id="dm:cli:alice",
        message_ids=["msg_1", "msg_2"],
    )
    [found] = store.get(alice, [added.id])
    assert found == added
    assert found.id.startswith("mem_")
    assert (found.category, found.source, found.verified, found.topic) == ("fact", "user", True, "preference")
    assert found.created_at == found.last_access == clock.now()
    assert found.message_ids == ("msg_1", "msg_2")


def test_search_finds_by_meaning_in_both_languages(store: ChromaKnowledgeBase, alice: Scope) -> None:
    store.add(alice, "主人喜欢拉面", category="fact", source="user")
    store.add(alice, "Alice has a cat called Mochi", category="fact", source="user")
    store.add(alice, "主人下周二要去面试", category="fact", source="user")
    assert store.search(alice, "主人爱吃什么面?", limit=1)[0].record.content == "主人喜欢拉面"
    assert store.search(alice, "what is the name of my pet?", limit=1)[0].record.content.startswith("Alice has a cat")


def test_a_memory_checked_for_duplicates_is_embedded_once(
    tmp_path: Path, embedder: Embedder, clock: FakeClock, alice: Scope
) -> None:
    calls: list[tuple[str, list[str]]] = []

    class Counting:
        name, dim = embedder.name, embedder.dim

        def embed_queries(self, texts):  # type: ignore[no-untyped-def]
            calls.append(("query", list(texts)))
            return embedder.embed_queries(texts)

        def embed_passages(self, texts):  # type: ignore[no-untyped-def]
            calls.append(("passage", list(texts)))
            return embedder.embed_passages(texts)

    store = ChromaKnowledgeBase(open_chroma_client(path=tmp_path / "chroma"), Counting(), now=clock.now)
    ramen = store.add(alice, "主人喜欢拉面", category="fact", source="user")
    [hit] = store.search(alice, "主人很喜欢拉面", limit=1, as_passage=True)  # compared memory to memory
    assert hit.record.id == ramen.id and hit.similarity > 0.98
    store.add(alice, "主人很喜欢拉面", category="fact", source="user")  # stored with the vector it was checked with
    assert calls == [("passage", ["主人喜欢拉面"]), ("passage", ["主人很喜欢拉面"])]


def test_no_operation_crosses_scopes(store: ChromaKnowledgeBase, alice: Scope, bob: Scope) -> None:
    secret = store.add(alice, "Alice's bank PIN is 4321", category="fact", source="user")
    bobs = store.add(bob, "Bob likes jazz", category="fact", source="user")
    other_persona = Scope("another", alice.user_id)

    assert [hit.record.id for hit in store.search(bob, "bank PIN", limit=10)] == [bobs.id]
    assert store.search(other_persona, "bank PIN") == []
    assert store.get(bob, [secret.id]) == []
    assert store.memories(bob) == [bobs]
    assert store.update(bob, secret.id, MemoryChange(content="hijacked")) is None
    assert store.delete(bob, [secret.id]) == 0
    assert store.forget_all(bob) == 1
    assert store.get(alice, [secret.id])[0].content == "Alice's bank PIN is 4321"


def test_search_filters_categories_inside_the_query(store: ChromaKnowledgeBase, alice: Scope) -> None:
    store.add(alice, "[2026-01-03 18:00] talked about ramen shops", category="episode", source="background_ai")
    store.add(alice, "Alice loves ramen", category="core", source="user")
    hits = store.search(alice, "ramen", categories=["episode"])
    assert [hit.record.category for hit in hits] == ["episode"]
    with pytest.raises(ValueError, match="unknown categories"):
        store.search(alice, "ramen", categories=["secret"])  # type: ignore[list-item]


def test_memories_survive_a_restart(tmp_path: Path, embedder: Embedder, clock: FakeClock, alice: Scope) -> None:
    first = ChromaKnowledgeBase(open_chroma_client(path=tmp_path / "chroma"), embedder, now=clock.now)
    added = first.add(alice, "Alice was born in Lyon", category="fact", source="user")
    reopened = ChromaKnowledgeBase(open_chroma_client(path=tmp_path / "chroma"), embedder, now=clock.now)
    assert reopened.get(alice, [added.id]) == [added]
    assert reopened.search(alice, "where was I born?")[0].record.id == added.id


def test_update_changes_content_and_reembeds(store: ChromaKnowledgeBase, alice: Scope, clock: FakeClock) -> None:
    added = store.add(alice, "Alice lives in Beijing", category="fact", source="user")
    later = clock.advance(days=2)
    updated = store.update(
        alice, added.id, MemoryChange(content="Alice lives in Shanghai", importance=1.3, last_access=later)
    )
    assert updated is not None
    [found] = store.get(alice, [added.id])
    assert (found.content, found.importance, found.last_access) == ("Alice lives in Shanghai", 1.3, later)
    assert store.search(alice, "Shanghai", limit=1)[0].record.id == added.id


def test_the_store_never_uses_chromadbs_downloading_embedder(store: ChromaKnowledgeBase, embedder: Embedder) -> None:
    collection = store._collection
    assert collection.configuration_json["embedding_function"] is None
    assert collection.metadata["embedder"] == embedder.name


def graph_of(store: ChromaKnowledgeBase) -> tuple[int, int]:
    hnsw = store._collection.configuration["hnsw"]
    return hnsw["max_neighbors"], hnsw["ef_construction"]


def test_a_new_embedded_store_links_its_vectors_sparsely(
    tmp_path: Path, embedder: Embedder, clock: FakeClock, alice: Scope
) -> None:
    store = ChromaKnowledgeBase(open_chroma_client(path=tmp_path / "new"), embedder, now=clock.now)
    assert graph_of(store) == (SPARSE_GRAPH["hnsw:M"], SPARSE_GRAPH["hnsw:construction_ef"])
    added = [store.add(alice, f"Alice's fact number {n}", category="fact", source="user") for n in range(30)]
    reopened = ChromaKnowledgeBase(open_chroma_client(path=tmp_path / "new"), embedder, now=clock.now)
    assert reopened.search(alice, "Alice's fact number 17", limit=1)[0].record.id == added[17].id
    found, vectors = reopened.with_vectors(alice, ["fact"])  # the vectors come back whole from chromadb's index
    assert {record.id for record in found} == {record.id for record in added}
    assert np.allclose(vectors, embedder.embed_passages([record.content for record in found]), atol=1e-5)


def test_a_store_searched_by_chromadb_or_made_before_keeps_chromadbs_graph(
    tmp_path: Path, embedder: Embedder, clock: FakeClock
) -> None:
    unsnapshotted = ChromaKnowledgeBase(
        open_chroma_client(path=tmp_path / "searched"), embedder, now=clock.now, cache_scopes=False
    )
    assert graph_of(unsnapshotted) == (16, 100)
    open_chroma_client(path=tmp_path / "older").create_collection(
        COLLECTION, embedding_function=None, metadata={"hnsw:space": "cosine", "embedder": embedder.name}
    )
    older = ChromaKnowledgeBase(open_chroma_client(path=tmp_path / "older"), embedder, now=clock.now)
    assert graph_of(older) == (16, 100)


def test_empty_content_is_refused(store: ChromaKnowledgeBase, alice: Scope) -> None:
    with pytest.raises(ValueError, match="content"):
        store.add(alice, "   ", category="fact", source="user")
    assert store.count(alice) == 0


def test_a_metadata_change_keeps_the_vector(store: ChromaKnowledgeBase, alice: Scope) -> None:
    added = store.add(alice, "Alice plays the cello", category="fact", source="user")
    before = store.search(alice, "music instrument", limit=1)[0].similarity
    store.update(alice, added.id, MemoryChange(importance=2.0, review_pending="promote"))  # offline: no re-embedding
    [after] = store.search(alice, "music instrument", limit=1)
    assert after.similarity == before
    assert (after.record.importance, after.record.review_pending) == (2.0, "promote")


MIXED = [
    "主人喜欢吃拉面，尤其是豚骨拉面",
    "主人下周二要去面试",
    "主人的猫叫团子",
    "Alice is training for the Berlin marathon",
    "Alice's sister Emma works as a nurse in Toronto",
    "Alice can't stand coriander",
]


@pytest.mark.parametrize("cache_scopes", [True, False], ids=["snapshots", "chromadb query"])
def test_hybrid_search_finds_chinese_and_english_memories_in_their_own_scope(
    tmp_path: Path, embedder: Embedder, clock: FakeClock, alice: Scope, bob: Scope, cache_scopes: bool
) -> None:
    store = ChromaKnowledgeBase(
        open_chroma_client(path=tmp_path / "chroma"), embedder, now=clock.now, cache_scopes=cache_scopes
    )
    for content in MIXED:
        store.add(alice, content, category="fact", source="user")
        store.add(bob, f"Bob: {content}", category="fact", source="user")  # the same words, another scope

    def top(query: str) -> str:
        hits = store.search(alice, query, limit=3)
        assert all(hit.record.scope == alice for hit in hits)
        return hits[0].record.content

    assert top("团子是谁？") == "主人的猫叫团子"  # a Chinese query, a Chinese memory (by its words)
    assert top("我什么时候面试") == "主人下周二要去面试"
    assert top("how is my running going?") == "Alice is training for the Berlin marathon"  # a paraphrase
    assert top("which herb do I hate?") == "Alice can't stand coriander"
    assert top("what does my sibling do for a living") == "Alice's sister Emma works as a nurse in Toronto"
    assert [hit.record.scope for hit in store.search(bob, "团子", limit=10)] == [bob] * len(MIXED)


# -- discretion: where a memory was learned, and who may hear of it ------------------------------------

GROUP_A, GROUP_B = "telegram:chat:-1001", "telegram:chat:-2002"


@pytest.mark.parametrize("cache_scopes", [True, False], ids=["snapshots", "chromadb query"])
def test_a_group_audience_finds_only_what_was_learned_there_or_shared(
    tmp_path: Path, embedder: Embedder, clock: FakeClock, alice: Scope, cache_scopes: bool
) -> None:
    store = ChromaKnowledgeBase(
        open_chroma_client(path=tmp_path / "chroma"), embedder, now=clock.now, cache_scopes=cache_scopes
    )
    private = store.add(alice, "Alice's ramen place is Ichiran", category="fact", source="user")
    in_a = store.add(alice, "Alice cooks ramen on Fridays", category="fact", source="user", learned_in=GROUP_A)
    in_b = store.add(alice, "Alice hates instant ramen", category="fact", source="user", learned_in=GROUP_B)
    told = store.add(alice, "Alice's ramen budget is 20 euros", category="fact", source="user")
    told = store.update(alice, told.id, MemoryChange(shared=True))
    assert told is not None and told.shared and told.learned_in is None

    def found(audience: Audience) -> set[str]:
        return {hit.record.id for hit in store.search(alice, "ramen", limit=10, audience=audience)}

    assert found(PRIVATE) == {private.id, in_a.id, in_b.id, told.id}
    assert found(Audience(group_id=GROUP_A)) == {in_a.id, told.id}
    assert found(Audience(group_id=GROUP_B)) == {in_b.id, told.id}
    assert found(Audience(group_id="telegram:chat:-3003")) == {told.id}
    assert found(Audience(group_id=GROUP_A, shares_everything=True)) == found(PRIVATE)
    # the origin survives a restart and is never touched by other updates
    reopened = ChromaKnowledgeBase(open_chroma_client(path=tmp_path / "chroma"), embedder, now=clock.now)
    updated = reopened.update(
        alice, in_a.id, MemoryChange(content="Alice cooks tonkotsu ramen on Fridays", importance=2.0)
    )
    assert updated is not None and (updated.learned_in, updated.shared) == (GROUP_A, False)
    assert reopened.get(alice, [told.id])[0].shared


def store_written_without(
    tmp_path: Path,
    embedder: Embedder,
    clock: FakeClock,
    cache_scopes: bool,
    missing: tuple[str, ...],
    scope: Scope,
    **fields: Any,
) -> tuple[ChromaKnowledgeBase, MemoryRecord]:
    """A store holding one memory as a version before `missing` metadata existed wrote it, opened afresh."""
    client = open_chroma_client(path=tmp_path / "chroma")
    store = ChromaKnowledgeBase(client, embedder, now=clock.now, cache_scopes=cache_scopes)
    model = store.add(scope, "Alice's locker code is 9913", category="fact", source="user", **fields)
    store.delete(scope, [model.id])
    legacy = {key: value for key, value in _metadata(model, default_policy("xiaoxiang")).items() if key not in missing}
    client.get_collection(COLLECTION).add(
        ids=[model.id],
        documents=[model.content],
        metadatas=[legacy],
        embeddings=embedder.embed_passages([model.content]),
    )
    return ChromaKnowledgeBase(client, embedder, now=clock.now, cache_scopes=cache_scopes), model


@pytest.mark.parametrize("cache_scopes", [True, False], ids=["snapshots", "chromadb query"])
def test_a_memory_stored_before_origins_existed_reads_as_private_and_unshared(
    tmp_path: Path, embedder: Embedder, clock: FakeClock, alice: Scope, cache_scopes: bool
) -> None:
    # the metadata an earlier version wrote: everything but the origin and the sharing flag
    store, model = store_written_without(
        tmp_path, embedder, clock, cache_scopes, ("learned_in", "shared"), alice, learned_in=GROUP_A
    )
    [old] = store.get(alice, [model.id])
    assert (old.learned_in, old.shared) == (None, False)
    assert [hit.record.id for hit in store.search(alice, "locker code")] == [model.id]
    assert store.search(alice, "locker code", audience=Audience(group_id=GROUP_A)) == []


def test_dates_are_kept_changed_and_taken_away(store: ChromaKnowledgeBase, alice: Scope, clock: FakeClock) -> None:
    monday = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    plan = store.add(alice, "Alice has an interview", category="fact", source="user", about=monday)
    assert (plan.about, plan.until, plan.replaced_by, plan.changed_at) == (monday, None, None, None)
    assert plan.dated == plan.created_at  # not changed since it was learned
    [found] = store.get(alice, [plan.id])
    assert found == plan

    clock.advance(days=1)
    moved = store.update(
        alice, plan.id, MemoryChange(content="Alice has a second-round interview", until=monday, about=CLEAR)
    )
    assert moved is not None and (moved.about, moved.until) == (None, monday)
    assert moved.changed_at == moved.dated == clock.now()  # a new content is dated from now
    clock.advance(days=1)
    ended = store.update(alice, plan.id, MemoryChange(replaced_by="mem_new"))
    assert ended is not None and ended.changed_at == moved.changed_at  # metadata alone is no change of what it says
    assert store.get(alice, [plan.id]) == [ended]
    [hit] = store.search(alice, "interview")
    assert hit.record == ended


@pytest.mark.parametrize("cache_scopes", [True, False], ids=["snapshots", "chromadb query"])
def test_a_search_within_a_stretch_of_time_keeps_to_its_memories_even_with_nothing_in_common(
    tmp_path: Path, embedder: Embedder, clock: FakeClock, alice: Scope, cache_scopes: bool
) -> None:
    client = open_chroma_client(path=tmp_path / "chroma")
    store = ChromaKnowledgeBase(client, embedder, now=clock.now, cache_scopes=cache_scopes)
    monday = clock.now()
    window = TimeWindow(monday - timedelta(hours=1), monday + timedelta(days=1), "on Monday")
    learned_then = store.add(alice, "Alice loves ramen", category="fact", source="user")
    changed_then = store.add(alice, "Alice hates coriander", category="fact", source="user")
    clock.advance(days=3)
    store.add(alice, "Alice plays the cello", category="fact", source="user")
    about_then = store.add(alice, "Alice saw the dentist", category="fact", source="user", about=monday)
    told_later = store.add(
        alice, f"[{monday:%Y-%m-%d %H:%M}] We talked about trains", category="episode", source="user"
    )
    store.add(alice, "We talked about the weather", category="episode", source="user")  # took place now
    store.update(alice, changed_then.id, MemoryChange(content="Alice hates coriander and parsley"))  # changed now...
    [changed_then] = store.get(alice, [changed_then.id])  # ...though learned on Monday, which still counts

    found = store.search(alice, "what did we talk about?", during=window)
    expected = {learned_then.id, changed_then.id, about_then.id, told_later.id}
    assert {hit.record.id for hit in found} == expected
    assert {record.id for record in store.memories(alice) if in_window(record, window)} == expected
    assert store.search(alice, "ramen", audience=Audience(group_id=GROUP_A), during=window) == []  # the audience holds


@pytest.mark.parametrize("cache_scopes", [True, False], ids=["snapshots", "chromadb query"])
def test_a_memory_stored_before_dates_existed_has_none(
    tmp_path: Path, embedder: Embedder, clock: FakeClock, alice: Scope, cache_scopes: bool
) -> None:
    dates = ("about", "until", "replaced_by", "changed_at")  # what an earlier version wrote: no dates
    store, model = store_written_without(tmp_path, embedder, clock, cache_scopes, dates, alice)
    [old] = store.get(alice, [model.id])
    assert old == model and (old.about, old.until, old.replaced_by, old.changed_at) == (None, None, None, None)
    assert [hit.record.id for hit in store.search(alice, "locker code")] == [model.id]


@pytest.mark.parametrize("cache_scopes", [True, False], ids=["snapshots", "chromadb reads"])
def test_many_writes_at_once_add_change_and_delete_as_one_by_one_would(
    tmp_path: Path, embedder: Embedder, clock: FakeClock, alice: Scope, bob: Scope, cache_scopes: bool
) -> None:
    store = ChromaKnowledgeBase(
        open_chroma_client(path=tmp_path / "chroma"), embedder, now=clock.now, cache_scopes=cache_scopes
    )
    cello = store.add(alice, "Alice plays the cello", category="fact", source="user")
    city = store.add(alice, "Alice lives in Beijing", category="fact", source="user")
    gone = store.add(alice, "Alice has a cold", category="fact", source="user")
    bobs = store.add(bob, "Bob likes jazz", category="fact", source="user")
    store.search(alice, "music instrument")  # a snapshot held while the writes land
    music = store.search(alice, "music instrument", limit=1)[0].similarity
    later = clock.advance(days=1)
    new = MemoryRecord("mem_planned", alice, "Alice's dog is called Rex", "fact", 1.2, later, later, "background_ai")
    writes: dict[str, Any] = {
        "added": [new],
        "changed": [
            (cello.id, MemoryChange(hits=3)),
            (city.id, MemoryChange(content="Alice lives in Shanghai")),
            (city.id, MemoryChange(verified=True)),  # a second change of the same memory adds to the first
            (bobs.id, MemoryChange(content="hijacked")),  # another scope's: skipped
        ],
        "deleted": [gone.id, bobs.id],
    }
    store.write_many(alice, **writes)
    store.write_many(alice, **writes)  # again, as a job re-run after a crash: nothing twice
    assert sorted(record.content for record in store.memories(alice)) == [
        "Alice lives in Shanghai",
        "Alice plays the cello",
        "Alice's dog is called Rex",
    ]
    [moved] = store.get(alice, [city.id])
    assert (moved.verified, moved.changed_at) == (True, later)
    assert store.search(alice, "Shanghai", limit=1)[0].record.id == city.id  # new text, new vector
    [played] = store.search(alice, "music instrument", limit=1)
    assert (played.record.hits, played.similarity) == (3, music)  # a metadata change keeps the vector
    assert store.search(alice, "dog's name", limit=1)[0].record.id == "mem_planned"
    assert store.get(bob, [bobs.id])[0].content == "Bob likes jazz"
    with pytest.raises(ValueError, match="belong"):
        store.write_many(alice, added=[MemoryRecord("mem_bobs", bob, "Bob's PIN", "fact", 1.0, later, later, "user")])
    assert store.get(bob, ["mem_bobs"]) == []

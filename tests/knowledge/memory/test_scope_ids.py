"""Each scope's memory ids, kept beside chromadb: in step with it through every write, built once for an existing
store, and neither hiding nor bringing back a memory when a crash cuts a write in two. On SQLite and PostgreSQL.

chromadb is the truth here: `truth` reads it by scanning its metadata, as the store did before it kept the list.
"""

from __future__ import annotations

import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from knowledge.forget.privacy_scan import scan_directory
from knowledge.memory import chroma_erasure
from knowledge.memory.chroma_store import COLLECTION, ChromaKnowledgeBase, open_chroma_client
from knowledge.memory.scope_ids import STRAY_GRACE, ScopeIds
from knowledge.records import MemoryChange, MemoryRecord, Scope
from knowledge.search.embedding import Embedder
from knowledge.sql.database import Database
from knowledge.sql.postgres import PostgresDatabase
from knowledge.sql.sqlite import SQLiteDatabase
from tests.conftest import Backend
from tests.fakes.clock import FakeClock
from tests.servers import ChromaServer

ALICE = Scope("xiaoxiang", "cli:alice")
BOB = Scope("xiaoxiang", "cli:bob")
PERSON = Scope("xiaoxiang", "person:alice")


class Crash(Exception):
    """The process stopping between two writes."""


@pytest.fixture
def client(tmp_path: Path) -> Any:
    return open_chroma_client(path=tmp_path / "chroma")


@pytest.fixture
def db(backend: Backend) -> Database:
    return backend.open()


def open_store(
    client: Any, embedder: Embedder, clock: FakeClock, ids: ScopeIds | None, **options: Any
) -> ChromaKnowledgeBase:
    return ChromaKnowledgeBase(client, embedder, now=clock.now, ids=ids, **options)


@pytest.fixture
def store(client: Any, embedder: Embedder, clock: FakeClock, db: Database) -> ChromaKnowledgeBase:
    return open_store(client, embedder, clock, ScopeIds(db))


def truth(client: Any) -> set[tuple[Scope, str]]:
    """Every memory chromadb holds, with its scope."""
    found = client.get_collection(COLLECTION).get(include=["metadatas"])
    return {
        (Scope(meta["persona_id"], meta["user_id"]), memory_id)
        for memory_id, meta in zip(found["ids"], found["metadatas"])
    }


def listed(db: Database) -> set[tuple[Scope, str]]:
    return set(ScopeIds(db).listed())


def assert_in_step(client: Any, db: Database, store: ChromaKnowledgeBase) -> None:
    assert listed(db) == truth(client)
    for scope in (ALICE, BOB, PERSON):
        wanted = {memory_id for owner, memory_id in truth(client) if owner == scope}
        assert {record.id for record in store.memories(scope)} == wanted
        assert store.count(scope) == len(wanted)


def record(scope: Scope, number: int, clock: FakeClock) -> MemoryRecord:
    now = clock.now()
    return MemoryRecord(
        id=f"mem_import_{scope.user_id}_{number}", scope=scope, content=f"imported fact {number} of {scope.user_id}",
        category="fact", importance=1.0, created_at=now, last_access=now, source="user",
    )  # fmt: skip


def test_every_write_keeps_the_ids_in_step_with_the_store(
    client: Any, db: Database, store: ChromaKnowledgeBase, clock: FakeClock
) -> None:
    ramen = store.add(ALICE, "Alice loves ramen", category="fact", source="user")
    store.add(ALICE, "Alice has a cat called Mochi", category="fact", source="user")
    store.add(BOB, "Bob runs marathons", category="fact", source="user")
    planned = store.add(ALICE, "Alice is a nurse", category="fact", source="user", memory_id="mem_planned")
    store.add(ALICE, "Alice is a nurse", category="fact", source="user", memory_id="mem_planned")  # a job re-run
    assert_in_step(client, db, store)
    store.add_records([record(ALICE, n, clock) for n in range(3)] + [record(BOB, n, clock) for n in range(2)])
    assert_in_step(client, db, store)
    store.update(ALICE, ramen.id, MemoryChange(content="Alice loves ramen and udon"))
    assert store.delete(BOB, [ramen.id]) == 0  # another scope's id: nothing deleted, nothing unlisted
    assert store.delete(ALICE, [planned.id]) == 1
    store.delete_many([(ALICE, record(ALICE, 0, clock).id), (BOB, record(BOB, 0, clock).id)])
    assert_in_step(client, db, store)
    assert store.move_user("xiaoxiang", "cli:alice", "person:alice") == 4
    assert_in_step(client, db, store)
    assert store.forget_all(BOB) == 2
    assert_in_step(client, db, store)
    assert {scope for scope, _ in listed(db)} == {PERSON}


def test_compaction_keeps_the_ids_and_lists_what_a_writer_without_them_added(
    tmp_path: Path, client: Any, embedder: Embedder, clock: FakeClock, db: Database
) -> None:
    store = open_store(client, embedder, clock, ScopeIds(db), files=tmp_path / "chroma")
    kept = store.add(ALICE, "Alice loves ramen", category="fact", source="user")
    gone = store.add(ALICE, "Alice has a cat called Mochi", category="fact", source="user")
    store.delete(ALICE, [gone.id])
    # another writer that keeps no list (an older version) adds to the same store
    unlisted = open_store(client, embedder, clock, None).add(ALICE, "Alice is a nurse", category="fact", source="user")
    assert listed(db) == {(ALICE, kept.id)}
    assert store.compact()
    assert listed(db) == truth(client) == {(ALICE, kept.id), (ALICE, unlisted.id)}


@pytest.mark.parametrize("cache_scopes", [True, False])
def test_a_whole_scope_is_read_by_id_never_by_scanning_the_collection(
    client: Any, embedder: Embedder, clock: FakeClock, db: Database, monkeypatch: pytest.MonkeyPatch, cache_scopes: bool
) -> None:
    store = open_store(client, embedder, clock, ScopeIds(db), cache_scopes=cache_scopes)
    store.add(ALICE, "Alice loves ramen", category="fact", source="user")
    collection = store._collection.collection
    filters: list[Any] = []
    real_get = collection.get

    def get(*args: Any, **kwargs: Any) -> Any:
        filters.append(kwargs.get("where"))
        return real_get(*args, **kwargs)

    monkeypatch.setattr(collection, "get", get)
    assert len(store.memories(ALICE)) == 1
    assert store.count(BOB) == 0
    assert filters and all(where is None for where in filters)


def test_a_crash_between_listing_and_writing_hides_nothing_and_invents_nothing(
    client: Any, embedder: Embedder, clock: FakeClock, db: Database, store: ChromaKnowledgeBase
) -> None:
    kept = store.add(ALICE, "Alice loves ramen", category="fact", source="user")
    collection = store._collection.collection
    real_add = collection.add

    def crash(*args: Any, **kwargs: Any) -> None:
        raise Crash

    collection.add = crash
    with pytest.raises(Crash):
        store.add(ALICE, "Alice has a cat called Mochi", category="fact", source="user")
    collection.add = real_add
    restarted = open_store(client, embedder, clock, ScopeIds(db))
    stray = listed(db) - truth(client)
    assert len(stray) == 1  # listed, never written: a stray, not a memory
    assert [record.id for record in restarted.memories(ALICE)] == [kept.id]
    assert listed(db) - truth(client) == stray  # too young to tell from a write on its way: kept
    clock.advance(seconds=STRAY_GRACE.total_seconds() + 1)
    restarted = open_store(client, embedder, clock, ScopeIds(db))
    assert [record.id for record in restarted.memories(ALICE)] == [kept.id]
    assert listed(db) == truth(client)  # unlisted by the read that met it


def test_a_crash_between_deleting_and_unlisting_brings_nothing_back(
    client: Any, embedder: Embedder, clock: FakeClock, db: Database, store: ChromaKnowledgeBase
) -> None:
    ramen = store.add(ALICE, "Alice loves ramen", category="fact", source="user")
    cat = store.add(ALICE, "Alice has a cat called Mochi", category="fact", source="user")
    ids = ScopeIds(db)

    def crash(*args: Any, **kwargs: Any) -> None:
        raise Crash

    store._ids = replace_method(ids, "remove", crash)
    with pytest.raises(Crash):
        store.delete(ALICE, [cat.id])
    restarted = open_store(client, embedder, clock, ScopeIds(db), cache_scopes=False)
    assert (ALICE, cat.id) in listed(db)
    assert [record.id for record in restarted.memories(ALICE)] == [ramen.id]
    assert [hit.record.id for hit in restarted.search(ALICE, "Mochi the cat")] == [ramen.id]
    assert restarted.count(ALICE) == 1
    clock.advance(seconds=STRAY_GRACE.total_seconds() + 1)
    restarted.memories(ALICE)
    assert listed(db) == truth(client)


def test_a_forget_cut_short_brings_nothing_back_and_run_again_leaves_no_id(
    client: Any, embedder: Embedder, clock: FakeClock, db: Database, store: ChromaKnowledgeBase
) -> None:
    store.add(ALICE, "Alice loves ramen", category="fact", source="user")
    kept = store.add(BOB, "Bob runs marathons", category="fact", source="user")

    def crash(*args: Any, **kwargs: Any) -> None:
        raise Crash

    store._ids = replace_method(ScopeIds(db), "forget", crash)
    with pytest.raises(Crash):
        store.forget_all(ALICE)
    restarted = open_store(client, embedder, clock, ScopeIds(db))
    assert restarted.memories(ALICE) == [] and restarted.search(ALICE, "ramen") == []
    assert restarted.forget_all(ALICE) == 0  # the forget asked again
    assert listed(db) == truth(client) == {(BOB, kept.id)}


def test_a_move_cut_short_shows_each_memory_in_one_scope_and_finishes_when_run_again(
    client: Any, embedder: Embedder, clock: FakeClock, db: Database, store: ChromaKnowledgeBase
) -> None:
    ramen = store.add(ALICE, "Alice loves ramen", category="fact", source="user")

    def crash(*args: Any, **kwargs: Any) -> None:
        raise Crash

    store._ids = replace_method(ScopeIds(db), "remove", crash)
    with pytest.raises(Crash):
        store.move_user("xiaoxiang", "cli:alice", "person:alice")
    assert {(ALICE, ramen.id), (PERSON, ramen.id)} <= listed(db)  # listed under both
    restarted = open_store(client, embedder, clock, ScopeIds(db))
    assert restarted.memories(ALICE) == []
    assert [record.id for record in restarted.memories(PERSON)] == [ramen.id]
    assert restarted.move_user("xiaoxiang", "cli:alice", "person:alice") == 0  # the join run again
    clock.advance(seconds=STRAY_GRACE.total_seconds() + 1)
    restarted.memories(ALICE)
    assert listed(db) == truth(client) == {(PERSON, ramen.id)}


def test_an_existing_store_is_listed_once_at_first_start_even_after_a_crash_mid_way(
    client: Any, embedder: Embedder, clock: FakeClock, db: Database
) -> None:
    older = open_store(client, embedder, clock, None)  # a version without the list
    older.add_records([record(ALICE, n, clock) for n in range(4)] + [record(BOB, n, clock) for n in range(3)])
    cut = ScopeIds(db)
    real_add = cut.add

    def crash_mid_way(pairs: Any, at: Any) -> None:
        real_add(sorted(pairs, key=str)[:3], at)
        raise Crash

    with pytest.raises(Crash):
        open_store(client, embedder, clock, replace_method(cut, "add", crash_mid_way))
    assert len(listed(db)) == 3 and not ScopeIds(db).complete_for(store_id(client))
    store = open_store(client, embedder, clock, ScopeIds(db))
    assert ScopeIds(db).complete_for(store_id(client))
    assert_in_step(client, db, store)
    # written to by a version without the list again: it lists fewer than the store holds, so it lists again
    older.add(BOB, "Bob runs marathons", category="fact", source="user")
    assert listed(db) != truth(client)
    store = open_store(client, embedder, clock, ScopeIds(db))
    assert_in_step(client, db, store)


def test_a_replaced_store_drops_the_ids_of_the_one_it_replaced(
    tmp_path: Path, embedder: Embedder, clock: FakeClock, db: Database
) -> None:
    first = open_chroma_client(path=tmp_path / "first")
    open_store(first, embedder, clock, ScopeIds(db)).add(ALICE, "Alice loves ramen", category="fact", source="user")
    second = open_chroma_client(path=tmp_path / "second")
    store = open_store(second, embedder, clock, ScopeIds(db))
    assert listed(db) == set() and store.memories(ALICE) == []


def test_a_forgotten_scope_leaves_no_byte_in_the_ids(
    tmp_path: Path, client: Any, embedder: Embedder, clock: FakeClock
) -> None:
    sql = SQLiteDatabase(tmp_path / "sql" / "companion.sqlite3")
    store = open_store(client, embedder, clock, ScopeIds(sql))
    secret = Scope("xiaoxiang", "telegram:USER-7731-SECRET")
    store.add_records([record(secret, n, clock) for n in range(30)])
    store.add(BOB, "Bob runs marathons", category="fact", source="user")
    assert scan_directory(tmp_path / "sql", secret.user_id).in_rows  # the test can see it while it is there
    store.forget_all(secret)
    assert sql.checkpoint()  # as forgetting does
    report = scan_directory(tmp_path / "sql", secret.user_id)
    assert report.in_files == {} and report.in_rows == {}, (report.in_files, report.in_rows)
    assert {scope for scope, _ in listed(sql)} == {BOB}


def test_processes_sharing_a_chroma_server_read_each_others_writes_by_id(
    chroma_server: ChromaServer, database_url: str, embedder: Embedder, clock: FakeClock
) -> None:
    carol = Scope("xiaoxiang", f"cli:carol-{uuid.uuid4().hex[:8]}")  # the server's collection is the test run's
    with (
        closing(PostgresDatabase(database_url, pool_size=2)) as one,
        closing(PostgresDatabase(database_url, pool_size=2)) as two,
    ):

        def connect(db: Database) -> ChromaKnowledgeBase:
            client = open_chroma_client(host="127.0.0.1", port=chroma_server.port)
            return open_store(client, embedder, clock, ScopeIds(db), cache_scopes=False)

        first, second = connect(one), connect(two)
        written = first.add(carol, "Carol's favourite tea is oolong", category="fact", source="user")
        assert [record.id for record in second.memories(carol)] == [written.id]
        second.delete(carol, [written.id])
        assert first.memories(carol) == [] and ScopeIds(one).of(carol) == []


def store_id(client: Any) -> str:
    return chroma_erasure.store_identity(client.get_collection(COLLECTION))


def replace_method(ids: ScopeIds, name: str, method: Any) -> ScopeIds:
    """`ids` with one method failing as a crash there would (the instance only; the class stays whole)."""
    setattr(ids, name, method)
    return ids

"""Writes of different jobs made in one chromadb call: fewer calls, the same records, errors kept to their writer."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge.memory.chroma_gathering import GatheredWrites, _Waiting, _Write
from knowledge.memory.chroma_store import ChromaKnowledgeBase, open_chroma_client
from knowledge.records import MemoryChange, Scope
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock

DIM = 8


class Counted:
    """A real chromadb collection whose write calls are counted; the first one lingers, so that what is asked
    meanwhile queues up behind it as it would behind a write holding the GIL."""

    def __init__(self, collection: Any, *, first_lingers: float = 0.2) -> None:
        self.collection = collection
        self.calls: list[tuple[str, list[str]]] = []
        self.threads: list[int] = []
        self._linger = first_lingers

    def __getattr__(self, method: str) -> Any:
        def counted(**arguments: Any) -> Any:
            self.calls.append((method, list(arguments["ids"])))
            self.threads.append(threading.get_ident())
            if self._linger:
                time.sleep(self._linger)
                self._linger = 0
            return getattr(self.collection, method)(**arguments)

        return counted


@pytest.fixture
def collection(tmp_path: Path) -> Any:
    client = open_chroma_client(path=tmp_path / "chroma")
    return client.create_collection("gathered", embedding_function=None, metadata={"hnsw:space": "cosine"})


def vector(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, DIM)).astype(np.float32)


def test_writes_asked_together_are_made_in_fewer_calls_with_every_record_as_asked(collection: Any) -> None:
    counted = Counted(collection)
    writes = GatheredWrites(counted)
    start = threading.Barrier(8)

    def writer(number: int) -> None:
        start.wait()
        for turn in range(5):
            record = f"w{number}-{turn}"
            writes.write(
                "upsert", ids=[record], documents=[record], metadatas=[{"writer": number}], embeddings=vector(1)
            )
            writes.write("update", ids=[record], metadatas=[{"writer": number, "turn": turn}])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(writer, range(8)))

    stored = collection.get(include=["metadatas", "documents"])
    assert sorted(stored["ids"]) == sorted(f"w{number}-{turn}" for number in range(8) for turn in range(5))
    for record, document, meta in zip(stored["ids"], stored["documents"], stored["metadatas"]):
        number, turn = map(int, record[1:].split("-"))
        assert (document, meta) == (record, {"writer": number, "turn": turn})
    assert len(counted.calls) < 80  # one upsert and one update for each of 40 records, made one by one
    assert any(len(ids) > 1 for _, ids in counted.calls)


def test_one_writer_alone_makes_each_write_its_own_call_even_from_changing_threads(collection: Any) -> None:
    counted = Counted(collection, first_lingers=0)
    writes = GatheredWrites(counted)
    with ThreadPoolExecutor(4) as pool:  # as asyncio.to_thread: one writer, whichever thread is free
        for number in range(12):
            pool.submit(
                writes.write,
                "add",
                ids=[f"m{number}"],
                documents=["x"],
                metadatas=[{"n": number}],
                embeddings=vector(2),
            ).result()
    assert counted.calls == [("add", [f"m{number}"]) for number in range(12)]


def test_a_record_named_twice_waits_for_the_next_round_so_its_writes_keep_their_order() -> None:
    waiting = _Waiting()
    first = _Write("upsert", {"ids": ["a"], "metadatas": [{"v": 1}]})
    again = _Write("update", {"ids": ["a"], "metadatas": [{"v": 2}]})
    other = _Write("upsert", {"ids": ["b"], "metadatas": [{"v": 1}]})
    for write in (first, again, other):
        waiting.put(write)
    waiting.put(None)
    assert waiting.next_batch(0) == [first]
    assert waiting.next_batch(0) == [again, other]
    assert waiting.next_batch(0) is None


def test_a_write_that_fails_fails_only_its_writer(collection: Any) -> None:
    counted = Counted(collection)
    writes = GatheredWrites(counted)
    start = threading.Barrier(6)

    def writer(number: int) -> str:
        start.wait()
        wrong = number == 3  # a vector of another size than the collection's
        embedding = np.ones((1, DIM + 1), np.float32) if wrong else vector(number)
        try:
            writes.write("upsert", ids=[f"r{number}"], documents=["x"], metadatas=[{"n": number}], embeddings=embedding)
        except Exception as error:  # noqa: BLE001 - what the writer got
            return type(error).__name__
        return "ok"

    for _ in range(2):  # the second time the writes come together from the start
        with ThreadPoolExecutor(6) as pool:
            outcomes = list(pool.map(writer, range(6)))
        assert [outcome == "ok" for outcome in outcomes] == [True, True, True, False, True, True]
        start.reset()
    assert sorted(collection.get()["ids"]) == ["r0", "r1", "r2", "r4", "r5"]


def test_memories_added_by_many_jobs_at_once_each_land_in_their_own_scope(
    tmp_path: Path, embedder: Embedder, clock: FakeClock
) -> None:
    store = ChromaKnowledgeBase(open_chroma_client(path=tmp_path / "store"), embedder, now=clock.now)
    scopes = [Scope("aria", f"user-{number}") for number in range(6)]
    start = threading.Barrier(len(scopes))

    def job(scope: Scope) -> None:
        start.wait()
        for turn in range(3):
            added = store.add(scope, f"{scope.user_id} likes tea number {turn}", category="fact", source="user")
            store.update(scope, added.id, MemoryChange(importance=2.0))

    with ThreadPoolExecutor(len(scopes)) as pool:
        list(pool.map(job, scopes))
    for scope in scopes:
        memories = store.memories(scope)
        assert sorted(memory.content for memory in memories) == [
            f"{scope.user_id} likes tea number {n}" for n in range(3)
        ]
        assert {memory.importance for memory in memories} == {2.0}


def test_a_writer_holding_what_the_writing_thread_would_wait_for_writes_at_once_itself(collection: Any) -> None:
    counted = Counted(collection, first_lingers=0)
    writes = GatheredWrites(counted, at_once=lambda: True)
    writes.write("upsert", ids=["held"], documents=["x"], metadatas=[{"n": 1}], embeddings=vector(3))
    assert (counted.calls, counted.threads) == ([("upsert", ["held"])], [threading.get_ident()])
    assert collection.get(ids=["held"])["ids"] == ["held"]


def test_only_writes_are_gathered(collection: Any) -> None:
    with pytest.raises(ValueError, match="delete"):
        GatheredWrites(collection).write("delete", ids=["a"])

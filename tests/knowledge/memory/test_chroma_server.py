"""Several bot processes share one memory store through a Chroma server (`HttpClient`)."""

from __future__ import annotations

from knowledge.memory.chroma_store import ChromaKnowledgeBase, open_chroma_client
from knowledge.records import Scope
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock
from tests.servers import ChromaServer


def test_two_processes_share_memories_through_the_server(
    chroma_server: ChromaServer, embedder: Embedder, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    def connect() -> ChromaKnowledgeBase:
        client = open_chroma_client(host="127.0.0.1", port=chroma_server.port)
        return ChromaKnowledgeBase(client, embedder, now=clock.now, cache_scopes=False)

    first, second = connect(), connect()
    written = first.add(alice, "Alice's favourite tea is oolong", category="fact", source="user")
    first.add(bob, "Bob's favourite tea is matcha", category="fact", source="user")

    [hit] = second.search(alice, "which tea do I like?", limit=5)
    assert hit.record.id == written.id
    assert second.get(bob, [written.id]) == []
    second.delete(alice, [written.id])
    assert first.memories(alice) == []

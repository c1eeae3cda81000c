"""Several bot processes share one memory store through a Chroma server (`HttpClient`)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from knowledge.embedding import Embedder
from knowledge.records import Scope
from knowledge.store import ChromaKnowledgeBase, open_chroma_client
from tests.fakes.clock import FakeClock

CHROMA = Path(sys.executable).with_name("chroma")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real Chroma server on loopback, as an operator would run it."""
    if not CHROMA.exists():
        pytest.skip("the chroma server command is not installed next to this Python")
    port = free_port()
    path = tmp_path_factory.mktemp("chroma-server")
    server = subprocess.Popen(
        [str(CHROMA), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("the chroma server did not start")
        yield port
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_two_processes_share_memories_through_the_server(
    chroma_server: int, embedder: Embedder, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    def connect() -> ChromaKnowledgeBase:
        client = open_chroma_client(host="127.0.0.1", port=chroma_server)
        return ChromaKnowledgeBase(client, embedder, now=clock.now, cache_scopes=False)

    first, second = connect(), connect()
    written = first.add(alice, "Alice's favourite tea is oolong", category="fact", source="user")
    first.add(bob, "Bob's favourite tea is matcha", category="fact", source="user")

    [hit] = second.search(alice, "which tea do I like?", limit=5)
    assert hit.record.id == written.id
    assert second.get(bob, [written.id]) == []
    second.delete(alice, [written.id])
    assert first.list(alice) == []

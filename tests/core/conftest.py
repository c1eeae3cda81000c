"""Fixtures of the end-to-end tests of core/: the app on either backend."""

from __future__ import annotations

from collections.abc import AsyncIterator

import chromadb
import pytest
from pydantic import SecretStr

from bot.app import App, build_app
from bot.config import Settings
from knowledge.memory.chroma_store import COLLECTION
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock
from tests.servers import ChromaServer


def _clear(chroma: ChromaServer) -> None:
    """The Chroma server of this test run without anyone's memories (other tests expect it empty)."""
    client = chromadb.HttpClient(host="127.0.0.1", port=chroma.port)
    if COLLECTION in {getattr(found, "name", found) for found in client.list_collections()}:
        client.delete_collection(COLLECTION)


@pytest.fixture(params=["sqlite", "postgresql"])
async def any_app(
    request: pytest.FixtureRequest, settings: Settings, clock: FakeClock, embedder: Embedder
) -> AsyncIterator[App]:
    """The app on its embedded stores, then in server mode (PostgreSQL and a Chroma server)."""
    if request.param == "sqlite":
        async with await build_app(settings, clock=clock, embedder=embedder, backoff=(0.01, 0.01)) as app:
            yield app
        return
    chroma: ChromaServer = request.getfixturevalue("chroma_server")
    url = SecretStr(request.getfixturevalue("database_url"))
    server = settings.changed(storage={"database_url": url, "chroma_host": "127.0.0.1", "chroma_port": chroma.port})
    _clear(chroma)
    try:
        async with await build_app(server, clock=clock, embedder=embedder, backoff=(0.01, 0.01)) as app:
            yield app
    finally:
        _clear(chroma)

"""Server mode: apps on separate connections to one real PostgreSQL database and one real Chroma server,
as bot processes on one or more machines would be."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import chromadb
import pytest
from pydantic import SecretStr

from bot.app import App, build_app
from bot.config import Settings
from knowledge.memory.chroma_store import COLLECTION
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock
from tests.servers import ChromaServer

OpenApp = Callable[..., Awaitable[App]]


@pytest.fixture
def shared_chroma(chroma_server: ChromaServer) -> ChromaServer:
    """The Chroma server of this test run, without the memories of earlier tests."""
    client = chromadb.HttpClient(host="127.0.0.1", port=chroma_server.port)
    if COLLECTION in {getattr(found, "name", found) for found in client.list_collections()}:
        client.delete_collection(COLLECTION)
    return chroma_server


def in_server_mode(settings: Settings, database_url: str, chroma: ChromaServer) -> Settings:
    """`settings` with the stores on this PostgreSQL database and this Chroma server."""
    return settings.changed(
        storage={"database_url": SecretStr(database_url), "chroma_host": "127.0.0.1", "chroma_port": chroma.port}
    )


@pytest.fixture
def server_settings(settings: Settings, database_url: str, shared_chroma: ChromaServer) -> Settings:
    """The test settings in server mode: a fresh PostgreSQL database and the Chroma server."""
    return in_server_mode(settings, database_url, shared_chroma)


@pytest.fixture
async def open_app(
    server_settings: Settings, clock: FakeClock, embedder: Embedder, tmp_path: Path
) -> AsyncIterator[OpenApp]:
    """Builds apps in server mode, each with a data directory of its own (a process, maybe on another machine)."""
    opened: list[App] = []

    async def open_one(name: str, **options: object) -> App:
        settings = server_settings.changed(storage={"data_dir": tmp_path / name})
        app = await build_app(settings, clock=clock, embedder=embedder, backoff=(0.01, 0.01), **options)  # type: ignore[arg-type]
        opened.append(app)
        return app

    yield open_one
    for app in reversed(opened):
        await app.aclose()

"""Shared fixtures: isolation from the machine, the fake OpenAI server, real chromadb, a real PostgreSQL server
(started once per test run) and a Chroma server, and a fake clock."""

from __future__ import annotations

import ipaddress
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bot.app import App, build_app
from bot.config import Settings, settings_table
from knowledge.journal.journal import Journal
from knowledge.records import Scope
from knowledge.search.embedding import Embedder, load_embedder
from knowledge.sql.database import Database
from knowledge.sql.postgres import PostgresDatabase, migrate
from knowledge.sql.sqlite import SQLiteDatabase
from personas.loader import Persona
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import FakeBotAPI
from tests.servers import ChromaServer, PostgresServer, ServerStartError

MIGRATED_TEMPLATE = "companion_migrated"

# Every name the settings read that is not ours: the ecosystem's (OPENAI_API_KEY) and the old ones.
_CLEARED_ENV = tuple(name for setting in settings_table() for name in (*setting.also, *setting.formerly))


def _loopback_only(connect):  # type: ignore[no-untyped-def]
    def guarded(sock: socket.socket, address):  # type: ignore[no-untyped-def]
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host = address[0]
            if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
                raise ConnectionRefusedError(f"tests may not reach {host}")
        return connect(sock, address)

    return guarded


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own data dir, no real keys or endpoints, and no network past loopback."""
    import os

    for name in [*_CLEARED_ENV, *(key for key in os.environ if key.startswith("COMPANION_"))]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COMPANION_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COMPANION_TIMEZONE", "UTC")  # dates read in one zone, whatever the machine's
    monkeypatch.chdir(tmp_path)  # so a developer's ./companion.toml is never read
    monkeypatch.setattr(socket.socket, "connect", _loopback_only(socket.socket.connect))
    return tmp_path


@pytest.fixture(scope="session")
def fake_openai_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def fake_openai(fake_openai_server: FakeOpenAIServer) -> FakeOpenAIServer:
    """The session's fake OpenAI server, cleared for this test."""
    fake_openai_server.reset()
    return fake_openai_server


@pytest.fixture(scope="session")
def telegram_server() -> Iterator[FakeBotAPI]:
    with FakeBotAPI() as server:
        yield server


@pytest.fixture
def fake_telegram(telegram_server: FakeBotAPI) -> FakeBotAPI:
    """The test run's fake Telegram Bot API, cleared for this test."""
    telegram_server.reset()
    return telegram_server


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The real default offline embedder, loaded once."""
    return load_embedder("auto")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def settings(fake_openai: FakeOpenAIServer, isolated: Path) -> Settings:
    """Settings pointing every role at the fake server, each with its own model name."""
    return Settings(
        storage={"data_dir": isolated / "data"},
        llm={
            "base_url": fake_openai.url,
            "chat_model": "chat-model",
            "monitor_model": "monitor-model",
            "summarizer_model": "summarizer-model",
            "reviewer_model": "reviewer-model",
            "timeout": 0.5,
            "max_retries": 2,
        },
    )


@pytest.fixture
async def app(settings: Settings, clock: FakeClock, embedder: Embedder) -> AsyncIterator[App]:
    async with await build_app(settings, clock=clock, embedder=embedder, backoff=(0.01, 0.01)) as built:
        yield built


@pytest.fixture
def companion(app: App):  # type: ignore[no-untyped-def]
    return app.companion


@pytest.fixture
def kb(app: App):  # type: ignore[no-untyped-def]
    return app.companion.knowledge


@pytest.fixture
def journal(app: App) -> Journal:
    """The app's journal: the change log, the job queue with its dead letters, and token usage."""
    return app.journal


@pytest.fixture
def persona(app: App) -> Persona:
    """The default persona, 小祥."""
    return app.companion.persona()


@pytest.fixture
def alice() -> Scope:
    return Scope("xiaoxiang", "cli:alice")


@pytest.fixture
def bob() -> Scope:
    return Scope("xiaoxiang", "cli:bob")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server on loopback for the whole test run (a clear failure if it cannot start)."""
    try:
        server = PostgresServer().start()
    except ServerStartError as error:
        pytest.fail(str(error), pytrace=False)
    try:
        migrate(server.create_database(MIGRATED_TEMPLATE))  # each test's database is a copy of this one
        yield server
    finally:
        server.stop()


@pytest.fixture
def database_url(postgres_server: PostgresServer) -> str:
    """A fresh database of the test run's server, with the schema's migrations applied."""
    return postgres_server.create_database(f"test_{uuid.uuid4().hex[:12]}", template=MIGRATED_TEMPLATE)


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    """A real Chroma server (`chroma run`) on loopback, as an operator would run it, for the whole test run."""
    try:
        server = ChromaServer(tmp_path_factory.mktemp("chroma-server")).start()
    except ServerStartError as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()


class Backend:
    """One SQL store on either backend; `open()` connects to it again, as a restarted process would."""

    def __init__(self, name: str, tmp_path: Path, url: str | None) -> None:
        self.name = name
        self._path = tmp_path / "companion.sqlite3"
        self._url = url
        self._opened: list[Database] = []

    def open(self) -> Database:
        db: Database = SQLiteDatabase(self._path) if self._url is None else PostgresDatabase(self._url, pool_size=2)
        self._opened.append(db)
        return db

    def close(self) -> None:
        for db in self._opened:
            db.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The test runs on the embedded SQLite file, then on the shared PostgreSQL server."""
    url = request.getfixturevalue("database_url") if request.param == "postgresql" else None
    opened = Backend(request.param, tmp_path, url)
    yield opened
    opened.close()

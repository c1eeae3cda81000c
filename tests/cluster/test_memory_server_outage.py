"""A Chroma server outage degrades, not fails: replies go on without retrieved memories (said once in the log,
no traceback), and a memory learned meanwhile waits as a job and is written once the server is back."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.config import Settings
from knowledge.records import Scope
from tests.cluster.conftest import OpenApp, in_server_mode
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import CHAT, MONITOR, monitor_rules, wait_until
from tests.servers import ChromaServer

ALICE = Scope("xiaoxiang", "cli:alice")


@pytest.fixture
def stoppable_chroma(tmp_path: Path) -> Iterator[ChromaServer]:
    """A Chroma server of this test's own: stopping it must not stop the other tests' memories."""
    server = ChromaServer(tmp_path / "chroma-server").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server_settings(settings: Settings, database_url: str, stoppable_chroma: ChromaServer) -> Settings:
    return in_server_mode(settings, database_url, stoppable_chroma)


async def test_replies_go_on_without_memories_and_a_memory_learned_meanwhile_is_written_once_back(
    open_app: OpenApp,
    stoppable_chroma: ChromaServer,
    fake_openai: FakeOpenAIServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_openai.set_default(CHAT, "Noted.")
    fake_openai.set_default(MONITOR, monitor_rules({"green tea": "[ADD] Alice likes green tea"}))
    app = await open_app("a")
    await app.start(schedule=False)  # as `companion run` does: the watch for work waiting runs from now on
    companion = app.companion

    async def say(text: str, user_id: str = "cli:alice") -> str:
        result = await companion.handle(make_message(text, user_id=user_id))
        return "".join([piece async for piece in result.reply])

    assert await say("hello") == "Noted."
    await companion.tasks.drain()
    # bob has a memory this process has not read: a search of his needs the server (an empty scope would not)
    companion.knowledge.add(Scope("xiaoxiang", "cli:bob"), "Bob likes coffee", category="fact", source="user")

    caplog.set_level(logging.WARNING)
    stoppable_chroma.stop()
    assert await say("I like green tea") == "Noted."  # alice's memories: from this process's snapshot
    for text in ("hi, I am Bob", "anyone there?"):  # bob's: asked of the server, which is away
        assert await say(text, "cli:bob") == "Noted."
    await companion.tasks.drain()
    assert app.journal.jobs.pending_jobs(), "the memory waits as a job"
    assert not app.journal.jobs.dead_letters(ALICE)
    degraded = [record for record in caplog.records if "degraded" in record.getMessage()]
    assert len(degraded) == 1 and not [record for record in caplog.records if record.exc_info]

    stoppable_chroma.start()
    await wait_until(lambda: not app.journal.jobs.pending_jobs(), attempts=3000)  # the watch finds it again
    await companion.tasks.drain()
    assert [record.content for record in companion.knowledge.memories(ALICE)] == ["Alice likes green tea"]

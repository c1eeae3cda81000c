"""A PostgreSQL outage under load: two bot processes serve Telegram webhooks for several people while the
database is stopped at once (`pg_ctl stop -m immediate`) and started again. Nothing is lost, nothing is
answered twice, each person's messages are answered in the order they were sent, each person is told once
that their messages are held, and nobody is told that something went wrong."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from bot.config import Settings
from core import phrasebook
from knowledge.conversations.spool import SPOOL_FILE
from knowledge.records import Scope
from tests.cluster.conftest import OpenApp, in_server_mode
from tests.cluster.test_platforms_at_scale import fake_telegram, post, serving  # noqa: F401 - the fixture
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import CHAT, MONITOR, chat_history, wait_until
from tests.fakes.telegram_server import FakeBotAPI
from tests.fakes.telegram_updates import person, text_update
from tests.servers import ChromaServer, PostgresServer, free_port

PEOPLE = [person(100 + number, f"Person {number}") for number in range(6)]
BEFORE, DURING, AFTER = ["m1"], ["m2", "m3"], ["m4"]


@pytest.fixture
def crashable_postgres() -> Iterator[PostgresServer]:
    """A server of this test's own: stopping it must not stop the other tests' databases."""
    server = PostgresServer(survives_crashes=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server_settings(settings: Settings, crashable_postgres: PostgresServer, shared_chroma: ChromaServer) -> Settings:
    return in_server_mode(settings, crashable_postgres.create_database("companion"), shared_chroma)


def said(who: dict[str, object], text: str) -> str:
    return f"{who['first_name']} says {text}"


async def test_a_database_outage_under_load_loses_nothing_and_answers_everything_once_in_order(
    open_app: OpenApp,
    crashable_postgres: PostgresServer,
    fake_openai: FakeOpenAIServer,
    fake_telegram: FakeBotAPI,  # noqa: F811 - the fixture
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_openai.set_default(MONITOR, "[SKIP]")
    fake_openai.set_default(CHAT, "Noted.")
    apps = [await open_app("a"), await open_app("b")]
    for app in apps:
        await app.start(schedule=False)  # as `companion run` does: the watch for background work waiting
    ports = [free_port(), free_port()]
    servers = [await serving(app, fake_telegram, port) for app, port in zip(apps, ports, strict=True)]

    async def send(texts: list[str]) -> None:
        # each person's messages go to one process (a sticky proxy); the people are spread over both
        for text in texts:
            updates = [
                post(ports[number % 2], text_update(said(who, text), user=who)) for number, who in enumerate(PEOPLE)
            ]
            assert set(await asyncio.gather(*updates)) == {200}

    try:
        await send(BEFORE)
        await wait_until(lambda: fake_telegram.sent_texts().count("Noted.") == len(PEOPLE), attempts=3000)
        caplog.set_level(logging.WARNING)
        await asyncio.to_thread(crashable_postgres.crash)
        await send(DURING)
        held = phrasebook.HELD_UNTIL_BACK
        await wait_until(lambda: fake_telegram.sent_texts().count(held) == len(PEOPLE), attempts=3000)
        await asyncio.to_thread(crashable_postgres.restart)
        await send(AFTER)
        everything = len(PEOPLE) * len(BEFORE + DURING + AFTER)
        await wait_until(lambda: fake_telegram.sent_texts().count("Noted.") == everything, attempts=6000)
        # every turn's background job runs, those an outage kept from release too
        await wait_until(lambda: not apps[0].journal.jobs.pending_jobs(), attempts=6000)
    finally:
        for task in servers:
            task.cancel()
        await asyncio.gather(*servers, return_exceptions=True)

    for who in PEOPLE:
        texts = [said(who, text) for text in BEFORE + DURING + AFTER]
        asked = [chat_history(request)[-1] for request in fake_openai.requests_for(CHAT)]
        assert [text for text in asked if text in texts] == texts  # each answered once, in order
        sent = fake_telegram.sent_texts(int(str(who["id"])))
        assert sent == ["Noted.", phrasebook.HELD_UNTIL_BACK, "Noted.", "Noted.", "Noted."]
        stored = apps[0].history.messages(Scope("xiaoxiang", f"telegram:{who['id']}"))
        assert [message.content for message in stored if message.role == "user"] == texts
    assert phrasebook.SOMETHING_BROKE not in fake_telegram.sent_texts()
    assert not [record for record in caplog.records if record.exc_info], "an expected fault logged a traceback"
    outage = [record.getMessage() for record in caplog.records if record.name == "bot.platforms.outage"]
    assert any("out of reach" in line for line in outage) and any("is back after" in line for line in outage)


async def test_messages_held_at_a_clean_stop_are_kept_owner_only_and_stored_at_the_next_start(
    open_app: OpenApp,
    crashable_postgres: PostgresServer,
    fake_openai: FakeOpenAIServer,
    fake_telegram: FakeBotAPI,  # noqa: F811 - the fixture
) -> None:
    fake_openai.set_default(MONITOR, "[SKIP]")
    fake_openai.set_default(CHAT, "Noted.")
    app = await open_app("a")
    port = free_port()
    server = await serving(app, fake_telegram, port)
    who = PEOPLE[0]
    await asyncio.to_thread(crashable_postgres.crash)
    for text in DURING:
        assert await post(port, text_update(said(who, text), user=who)) == 200
    await wait_until(lambda: phrasebook.HELD_UNTIL_BACK in fake_telegram.sent_texts(), attempts=3000)
    await wait_until(lambda: len(fake_telegram.calls_to("sendMessage")) >= 1)
    server.cancel()
    await asyncio.gather(server, return_exceptions=True)
    await app.aclose()  # a clean stop, the database still away
    spool = app.settings.storage.data_dir / SPOOL_FILE
    assert spool.stat().st_mode & 0o777 == 0o600
    assert said(who, DURING[-1]) in spool.read_text(encoding="utf-8")

    await asyncio.to_thread(crashable_postgres.restart)
    again = await open_app("a")
    await again.start(schedule=False)
    stored = again.history.messages(Scope("xiaoxiang", f"telegram:{who['id']}"))
    assert [message.content for message in stored] == [said(who, text) for text in DURING]
    assert not spool.exists()

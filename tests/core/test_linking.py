"""Joining two existing memories (embedded store; `tests/cluster/test_linking.py` runs the same in server mode):
duplicates become one, the older side's settings stay, conversations and search follow the person, and
check-ins go to the identity the person last wrote from in private."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from zoneinfo import ZoneInfo

from bot.app import App
from bot.config import Settings
from core.checkins import CheckinDefaults
from core.types import ConversationRef, IncomingMessage, UserRef
from knowledge.journal.checkin_log import Checkin
from knowledge.journal.profiles import Profile
from knowledge.people.joining import KEYED_TABLES, MOVED_TABLES
from knowledge.people.links import is_person
from knowledge.records import Scope
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAIServer

TERMINAL = UserRef("cli", "alice")
TELEGRAM = UserRef("telegram", "101")


def said(user: UserRef, conversation: ConversationRef, text: str, clock: FakeClock) -> IncomingMessage:
    return IncomingMessage(conversation, user, "Alice", text, clock.now())


async def merge_two_memories(app: App, clock: FakeClock, fake_openai: FakeOpenAIServer) -> None:
    """The scenario both backends run."""
    companion, kb = app.companion, app.knowledge
    fake_openai.set_default("chat-model", "Okay!")
    fake_openai.set_default("monitor-model", "[SKIP]")
    terminal, telegram = Scope("xiaoxiang", str(TERMINAL)), Scope("xiaoxiang", str(TELEGRAM))
    for scope in (terminal, telegram):
        kb.add(scope, "Alice has a cat named Mochi", category="fact", source="user")
        kb.add(scope, "alice  has a cat named MOCHI", category="fact", source="user")  # the same, written otherwise
    kb.add(telegram, "Alice plays the cello", category="fact", source="user")
    await (await companion.handle(said(TERMINAL, ConversationRef("cli", "", "alice"), "hi from the cli", clock))).text()
    app.user_settings.set_time_zone(terminal, ZoneInfo("Europe/Berlin"))
    clock.advance(minutes=1)
    private_chat = ConversationRef("telegram", "chat", "101")
    await (await companion.handle(said(TELEGRAM, private_chat, "hi from telegram", clock))).text()
    app.user_settings.set_time_zone(telegram, ZoneInfo("Asia/Tokyo"))
    app.user_settings.set_shares_in_groups(telegram, True)  # chosen on one side only: kept
    await companion.tasks.drain()
    for scope in (terminal, telegram):  # each side's portrait, which is not the person's
        portrait = Profile(f"{scope.user_id} has a cat.", (), "", "operator", clock.now())
        app.journal.profiles.write(scope, portrait, requested_at=None)

    code = await companion.link_code(TERMINAL)
    answer = await companion.link(TELEGRAM, code.split("/link ")[1].split()[0])

    assert "Joined 5 memories and 2 conversations; 3 memories both knew, kept once." in answer, answer
    person = companion.scope(None, TELEGRAM)
    assert is_person(person.user_id) and companion.scope(None, TERMINAL) == person
    contents = sorted(" ".join(record.content.casefold().split()) for record in kb.memories(person))
    assert contents == ["alice has a cat named mochi", "alice plays the cello"]  # the four copies kept once
    assert [hit.record.content for hit in kb.search(person, "cello", limit=1)] == ["Alice plays the cello"]
    assert {message.content for message in app.history.messages(person) if message.role == "user"} == {
        "hi from the cli",
        "hi from telegram",
    }
    assert kb.memories(terminal) == kb.memories(telegram) == [] and app.history.messages(telegram) == []
    profiles = app.journal.profiles
    assert [profiles.get(scope) for scope in (terminal, telegram, person)] == [None, None, None]
    assert profiles.due(clock.now()) == [person]  # written again from the joined facts
    assert app.user_settings.chosen_time_zone(person) == "Europe/Berlin"  # the terminal spoke first
    assert app.user_settings.shares_in_groups(person)
    assert [member for member in companion.members(person)] == [TERMINAL, TELEGRAM]

    # check-ins go where the person last wrote in private: the Telegram chat, to the Telegram identity
    contact = app.journal.checkins.contact(person)
    assert contact is not None and contact.conversation_id == str(private_chat)
    checkin = Checkin(
        "c1", person, "silence", None, clock.now(), contact.conversation_id, clock.now(), clock.now() + timedelta(1)
    )
    assert app.checkins._recipient(checkin) == TELEGRAM
    # a join cut short (a memory written under the identity as it was linked) is finished by linking again
    kb.add(telegram, "Alice learned to swim", category="fact", source="user")
    again = await companion.link(TERMINAL, (await companion.link_code(TELEGRAM)).split("/link ")[1].split()[0])
    assert again.startswith("These accounts are one already")
    assert "Alice learned to swim" in [record.content for record in kb.memories(person)]
    assert kb.memories(telegram) == []

    # never chosen: the operator's default of the platform they last wrote from in private
    app.checkins.defaults = CheckinDefaults(platforms={"telegram": True})
    assert app.checkins.consents(person)
    app.checkins.defaults = CheckinDefaults(platforms={"cli": True})
    assert not app.checkins.consents(person)


async def test_two_existing_memories_merge_without_duplicates(
    app: App, clock: FakeClock, fake_openai: FakeOpenAIServer
) -> None:
    await merge_two_memories(app, clock, fake_openai)


# Tables with rows of one (persona, user) that the join's SQL must not move: the list of each scope's memory ids
# is moved by the memory store with the memories it lists (`ChromaKnowledgeBase.move_user`).
NOT_MOVED: frozenset[str] = frozenset({"memory_ids"})


def test_every_table_of_one_user_is_moved_or_merged_by_a_join(app: App, settings: Settings) -> None:
    """A table added later with rows per (persona, user) must say how a join treats it, or its rows would stay
    behind under an identity that no longer speaks, unreachable by the person's /memory and /forget."""
    database = sqlite3.connect(settings.storage.data_dir / "companion.sqlite3")
    try:
        tables = [row[0] for row in database.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        per_user = {
            table
            for table in tables
            if {"persona_id", "user_id"} <= {column[1] for column in database.execute(f"PRAGMA table_info({table})")}
        }
    finally:
        database.close()
    assert {"messages", "jobs", "user_settings"} <= per_user  # the scan finds them
    assert per_user - NOT_MOVED == set(MOVED_TABLES) | set(KEYED_TABLES)

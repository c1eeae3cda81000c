"""One person across platforms in server mode (PostgreSQL and the Chroma server): the merge of two memories, and
two processes linking the same identities at the same moment ending in one person."""

from __future__ import annotations

import asyncio

from core.types import UserRef
from knowledge.people.links import is_person
from tests.cluster.conftest import OpenApp
from tests.core.test_linking import merge_two_memories
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAIServer


async def test_two_existing_memories_merge_without_duplicates_in_server_mode(
    open_app: OpenApp, clock: FakeClock, fake_openai: FakeOpenAIServer
) -> None:
    await merge_two_memories(await open_app("one"), clock, fake_openai)


async def test_two_processes_linking_the_same_identities_at_once_end_in_one_person(
    open_app: OpenApp, clock: FakeClock
) -> None:
    first, second = await open_app("one"), await open_app("two")
    telegram, discord, terminal = UserRef("telegram", "7"), UserRef("discord", "9"), UserRef("cli", "alice")
    codes = [await first.companion.link_code(telegram), await first.companion.link_code(terminal)]
    typed = [code.split("/link ")[1].split()[0] for code in codes]

    await asyncio.gather(second.companion.link(discord, typed[0]), first.companion.link(discord, typed[1]))

    persons = {
        app.companion.scope(None, user).user_id for app in (first, second) for user in (telegram, discord, terminal)
    }
    assert len(persons) == 1 and is_person(next(iter(persons)))
    assert first.links.people() == {next(iter(persons)): ["cli:alice", "discord:9", "telegram:7"]}

"""The message pipeline, on a platform that only records what it is asked to send: who is answered, who is told
why not, what is answered once, and what a person hears when something fails."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from bot.app import App
from bot.ordering import TurnOrder
from bot.platforms.pipeline import Arrival, MessagePipeline
from bot.platforms.render import DISCORD_LIMIT
from bot.routing import Place, PlaceRules, Router
from core import phrasebook
from core.errors import UserFacingError
from core.types import ConversationRef, Image, UserRef
from knowledge.conversations.spool import MessageSpool
from tests.fakes.clock import FakeTimer
from tests.fakes.openai_server import FakeOpenAIServer

ALICE = UserRef("chat", "101")
PRIVATE = Place(ConversationRef("chat", "dm", "101"))
GROUP = Place(ConversationRef("chat", "group", "-5"), ids=(-5,), private=False)


class RecordingChat:
    """A platform that keeps what it was asked to send, show and finish, in order."""

    limit = DISCORD_LIMIT
    pace = None

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def reply(self) -> RecordingChat:
        return self

    async def show(self, text: str) -> None:
        self.calls.append(("show", text))

    async def finish(self, text: str) -> None:
        self.calls.append(("reply", text))

    async def send(self, text: str) -> None:
        self.calls.append(("send", text))

    def typing(self) -> None:
        return None


def arrival(text: str, place: Place = PRIVATE, **details: object) -> Arrival:
    sent = datetime(2026, 1, 5, 10, tzinfo=UTC)
    return Arrival(ALICE, "Alice", place, text, sent, **details)  # type: ignore[arg-type]


@pytest.fixture
def pipeline(app: App, fake_openai: FakeOpenAIServer) -> MessagePipeline:
    fake_openai.set_default("monitor-model", "[SKIP]")
    return MessagePipeline(app.companion, Router(PlaceRules(), None, "xiaoxiang"), order=TurnOrder(), timer=FakeTimer())


async def test_a_message_meant_for_the_companion_is_answered_on_the_platforms_surface(
    pipeline: MessagePipeline, app: App, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "Hello, Alice!")
    chat = RecordingChat()
    await pipeline.receive(arrival("hi there", source_id="chat:1"), chat)
    assert chat.calls == [("reply", "Hello, Alice!")]
    [said, _] = app.working_memory.window("xiaoxiang", "chat:dm:101")
    assert (said.user_id, said.speaker_name, said.content) == ("chat:101", "Alice", "hi there")


async def test_in_a_group_only_what_is_meant_for_the_companion_is_answered(
    pipeline: MessagePipeline, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "Yes?")
    chat = RecordingChat()
    await pipeline.receive(arrival("among ourselves", GROUP), chat)
    await pipeline.receive(arrival("are you there?", GROUP, addressed=True), chat)
    assert chat.calls == [("reply", "Yes?")]
    assert len(fake_openai.requests_for("chat-model")) == 1


async def test_those_the_operator_did_not_allow_are_told_in_private_and_left_alone_in_a_group(
    app: App, fake_openai: FakeOpenAIServer
) -> None:
    only_bob = MessagePipeline(app.companion, Router(PlaceRules(allowed_users=[202]), None, "xiaoxiang"))
    chat = RecordingChat()
    await only_bob.receive(arrival("hello?"), chat)
    await only_bob.receive(arrival("hello?", GROUP, addressed=True), chat)
    assert chat.calls == [("send", phrasebook.NOT_ALLOWED)]
    assert fake_openai.requests_for("chat-model") == []


async def test_what_the_companion_cannot_read_or_hear_gets_a_clear_answer_without_a_model_call(
    pipeline: MessagePipeline, fake_openai: FakeOpenAIServer
) -> None:
    chat = RecordingChat()
    await pipeline.receive(arrival("", voice=True), chat)
    await pipeline.receive(arrival("", unreadable=True), chat)
    await pipeline.receive(arrival("", GROUP, unreadable=True), chat)  # people showing each other stickers
    assert chat.calls == [("send", phrasebook.CANT_HEAR_VOICE), ("send", phrasebook.NOT_TEXT)]
    assert fake_openai.requests_for("chat-model") == []


async def test_a_message_delivered_twice_is_answered_once(
    pipeline: MessagePipeline, app: App, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "Noted!", "Again?")
    chat = RecordingChat()
    await pipeline.receive(arrival("my locker code is 4711", source_id="chat:7"), chat)
    await pipeline.receive(arrival("my locker code is 4711", source_id="chat:7"), chat)
    assert chat.calls == [("reply", "Noted!")]
    assert [row.content for row in app.working_memory.window("xiaoxiang", "chat:dm:101")] == [
        "my locker code is 4711",
        "Noted!",
    ]


async def test_a_failure_is_told_in_words_safe_to_show(
    pipeline: MessagePipeline, fake_openai: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def too_large() -> Image:
        raise UserFacingError("That image is too large.")

    async def broken() -> Image:
        raise RuntimeError("disk on fire at /srv/secret")

    chat = RecordingChat()
    await pipeline.receive(arrival("look", image=too_large), chat)
    with caplog.at_level(logging.ERROR, logger="bot.platforms.pipeline"):
        await pipeline.receive(arrival("and this", image=broken), chat)
    assert chat.calls == [("send", "That image is too large."), ("send", phrasebook.SOMETHING_BROKE)]
    assert "answering a message failed" in caplog.text  # the operator sees the cause; the person does not
    assert fake_openai.requests_for("chat-model") == []


@contextlib.asynccontextmanager
async def a_hung_turn(pipeline: MessagePipeline, fake_openai: FakeOpenAIServer) -> AsyncIterator[None]:
    """A turn whose model hangs, under way for the block; cancelled at its end, as a stop does (its message is
    stored already)."""
    fake_openai.hang("chat-model")
    hung = asyncio.create_task(pipeline.receive(arrival("first, answered by a model that hangs"), RecordingChat()))
    while not fake_openai.requests_for("chat-model"):
        await asyncio.sleep(0.01)
    try:
        yield
    finally:
        hung.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await hung


async def test_at_a_stop_a_message_waiting_behind_a_hung_turn_is_kept_for_the_next_start(
    pipeline: MessagePipeline, app: App, fake_openai: FakeOpenAIServer
) -> None:
    async with a_hung_turn(pipeline, fake_openai):
        waiting = asyncio.create_task(pipeline.receive(arrival("second, waiting for its turn"), RecordingChat()))
        await asyncio.sleep(0.05)

        assert await pipeline.keep_waiting() == 1
        assert waiting.cancelled()
        spool = MessageSpool(app.settings.storage.data_dir)
        assert [kept.text for kept in spool.messages()] == ["second, waiting for its turn"]
    assert await pipeline.keep_waiting() == 0

    assert app.companion.store_spooled_messages() == 1
    said = [message.content for message in app.working_memory.window("xiaoxiang", "chat:dm:101")]
    assert said == ["first, answered by a model that hangs", "second, waiting for its turn"]


async def test_a_message_waiting_behind_a_reply_is_on_disk_meanwhile_so_a_crash_does_not_lose_it(
    pipeline: MessagePipeline, app: App, fake_openai: FakeOpenAIServer
) -> None:
    spool = MessageSpool(app.settings.storage.data_dir)
    async with a_hung_turn(pipeline, fake_openai):
        assert spool.messages() == []  # the first had no one to wait behind: stored at once, never spooled
        asyncio.create_task(pipeline.receive(arrival("my flight is LH-4040", source_id="chat:7"), RecordingChat()))
        await asyncio.sleep(0.05)
        # what a kill -9 leaves: the next start stores it
        assert [(kept.text, kept.source_id) for kept in spool.messages()] == [("my flight is LH-4040", "chat:7")]

        assert await pipeline.keep_waiting() == 1  # a clean stop keeps it as it stands, once
        assert [kept.text for kept in spool.messages()] == ["my flight is LH-4040"]


async def test_a_message_that_waited_for_its_turn_leaves_the_spool_once_its_turn_stores_it(
    pipeline: MessagePipeline, app: App, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.set_delay("chat-model", 0.3)
    fake_openai.script("chat-model", "first answer", "second answer")
    chats = [RecordingChat(), RecordingChat()]
    first = asyncio.create_task(pipeline.receive(arrival("first"), chats[0]))
    await asyncio.sleep(0.05)
    await asyncio.gather(first, pipeline.receive(arrival("second", source_id="chat:8"), chats[1]))

    assert [chat.calls for chat in chats] == [[("reply", "first answer")], [("reply", "second answer")]]
    assert MessageSpool(app.settings.storage.data_dir).messages() == []
    assert app.companion.store_spooled_messages() == 0
    said = [message.content for message in app.working_memory.window("xiaoxiang", "chat:dm:101")]
    assert said == ["first", "first answer", "second", "second answer"]


async def test_at_a_stop_a_message_deleted_while_it_waited_is_not_kept_and_an_edited_one_is_kept_as_edited(
    pipeline: MessagePipeline, app: App, fake_openai: FakeOpenAIServer
) -> None:
    async with a_hung_turn(pipeline, fake_openai):
        for text, source_id in [("my pin is 1234", "chat:2"), ("meet at 5?", "chat:3")]:
            asyncio.create_task(pipeline.receive(arrival(text, source_id=source_id), RecordingChat()))
        await asyncio.sleep(0.05)
        pipeline.changed("chat:2", None)
        pipeline.changed("chat:3", "meet at 6?")

        assert await pipeline.keep_waiting() == 2
        assert [kept.text for kept in MessageSpool(app.settings.storage.data_dir).messages()] == ["meet at 6?"]


async def test_messages_kept_out_of_order_at_a_stop_are_stored_in_the_order_they_arrived(app: App) -> None:
    # a stop keeps the messages waiting for their turn first, then those an outage held, which came before them
    for text, number in [("third, waiting for its turn", 3), ("second, held", 2), ("first, held", 1)]:
        incoming = MessagePipeline._incoming(arrival(text), "xiaoxiang")  # all sent within one second
        app.companion.keep_for_next_start(incoming, group=False, arrival=number)

    assert app.companion.store_spooled_messages() == 3

    said = [message.content for message in app.working_memory.window("xiaoxiang", "chat:dm:101")]
    assert said == ["first, held", "second, held", "third, waiting for its turn"]


async def test_a_kept_message_whose_persona_is_gone_waits_for_it_and_stops_no_start(app: App) -> None:
    spool = MessageSpool(app.settings.storage.data_dir)
    for persona_id, text in [("renamed", "said to a persona since removed"), ("xiaoxiang", "said to this one")]:
        app.companion.keep_for_next_start(MessagePipeline._incoming(arrival(text), persona_id), group=False)

    assert app.companion.store_spooled_messages() == 1  # the start goes on

    said = [message.content for message in app.working_memory.window("xiaoxiang", "chat:dm:101")]
    assert said == ["said to this one"]  # not under another persona than the one it was said to
    assert [(kept.persona_id, kept.text) for kept in spool.messages()] == [
        ("renamed", "said to a persona since removed")
    ]

"""Concurrent updates in per-chat order: the real PTB Application polling the fake Bot API; the processor alone."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from telegram import Update
from telegram.ext import Application

from bot.app import App
from bot.config import Settings
from bot.platforms.telegram.adapter import build_telegram_application
from bot.platforms.telegram.update_processor import PerChatUpdateProcessor, chat_of
from knowledge.conversations.spool import MessageSpool
from tests.fakes.clock import FakeTimer
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import BOT_USERNAME, TOKEN, Call, FakeBotAPI, polling
from tests.fakes.telegram_updates import person, text_update

ALICE = person(101, "Alice")
BOB = person(202, "Bob")
GROUP = {"id": -1001, "type": "supergroup", "title": "Friends"}
WAIT = 30.0  # seconds a waiting step may take before the test gives up (never reached when it passes)


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """A model answer may be held back on purpose here; the client must wait for it rather than retry."""
    return settings.changed(llm={"timeout": WAIT})


@pytest.fixture
def fake_telegram() -> Iterator[FakeBotAPI]:
    with FakeBotAPI() as server:
        yield server


@pytest.fixture
async def running_bot(app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer) -> AsyncIterator[Application]:
    """The Telegram application polling the fake Bot API, as `companion run` does."""
    fake_openai.set_default("monitor-model", "[SKIP]")
    async with polling(
        build_telegram_application(app.platform("telegram"), TOKEN, fake_telegram.url, timer=FakeTimer())
    ) as application:
        yield application
    await app.companion.tasks.drain()


def _last_user_text(body: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


async def _replies(fake_telegram: FakeBotAPI, count: int) -> list[Call]:
    return await asyncio.to_thread(fake_telegram.wait_for, "sendMessage", count, WAIT)


async def test_two_chats_are_answered_concurrently(
    running_bot: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    bob_asked = threading.Event()

    def answer(body: dict[str, Any]) -> str:
        # Alice's answer is held back until Bob's request reached the model: served one after
        # another, Bob's turn would only start once Alice had her reply, and this would time out.
        if _last_user_text(body) == "from Bob":
            bob_asked.set()
            return "hi Bob"
        return "hi Alice" if bob_asked.wait(WAIT) else "Bob never came"

    fake_openai.set_default("chat-model", answer)
    fake_telegram.push_update(text_update("from Alice", user=ALICE))
    fake_telegram.push_update(text_update("from Bob", user=BOB))
    await _replies(fake_telegram, 2)
    assert fake_telegram.sent_texts(ALICE["id"]) == ["hi Alice"]
    assert fake_telegram.sent_texts(BOB["id"]) == ["hi Bob"]


async def test_one_chats_messages_are_answered_one_after_another_in_order(
    running_bot: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    events: list[str] = []  # what the model was asked and what was sent, in the order it happened
    lock = threading.Lock()

    def answer(body: dict[str, Any]) -> str:
        said = _last_user_text(body)
        with lock:
            events.append(f"asked: {said}")
        return f"re: {said}"

    def sent(call: Call) -> None:
        if call.method == "sendMessage":
            with lock:
                events.append(f"sent: {call.params['text']}")

    fake_openai.set_default("chat-model", answer)
    fake_openai.set_delay("chat-model", 0.2)  # time enough for a later message to overtake, were it allowed
    fake_telegram.listen(sent)
    texts = ["one", "two", "three"]
    for text in texts:
        fake_telegram.push_update(text_update(text, user=ALICE))
    await _replies(fake_telegram, len(texts))
    assert events == [event for text in texts for event in (f"asked: {text}", f"sent: re: {text}")]


async def test_a_message_waiting_for_its_chats_turn_is_kept_on_disk_until_its_turn_stores_it(
    running_bot: Application, app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    first_may_end = threading.Event()

    def answer(body: dict[str, Any]) -> str:
        said = _last_user_text(body)
        if said == "first":
            first_may_end.wait(WAIT)  # a slow reply: the next messages wait for the chat's turn behind it
        return f"re: {said}"

    fake_openai.set_default("chat-model", answer)
    spool = MessageSpool(app.settings.storage.data_dir)
    fake_telegram.push_update(text_update("first", user=ALICE))
    await _until_true(lambda: bool(fake_openai.requests_for("chat-model")))
    for text in ("my flight is LH-4040", "/help", "and it leaves at 9"):  # a command stores nothing: not kept
        fake_telegram.push_update(text_update(text, user=ALICE))
    await _until_true(lambda: len(spool.messages()) == 2)
    # what a kill -9 leaves behind now: the next start stores them, in the order they arrived
    assert [(kept.text, kept.arrival) for kept in spool.messages()] == [
        ("my flight is LH-4040", 1),
        ("and it leaves at 9", 2),
    ]

    first_may_end.set()
    await _replies(fake_telegram, 4)
    await _until_true(lambda: not spool.path.exists())  # each left it once its turn stored it
    said = [message.content for message in app.working_memory.window("xiaoxiang", "telegram:chat:101")]
    assert said == [
        "first",
        "re: first",
        "my flight is LH-4040",
        "re: my flight is LH-4040",
        "and it leaves at 9",
        "re: and it leaves at 9",
    ]


async def test_an_edit_of_a_waiting_message_changes_what_is_kept_of_it_at_once(
    running_bot: Application, app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    first_may_end = threading.Event()

    def answer(body: dict[str, Any]) -> str:
        if _last_user_text(body) == "first":
            first_may_end.wait(WAIT)
        return "noted"

    fake_openai.set_default("chat-model", answer)
    spool = MessageSpool(app.settings.storage.data_dir)
    fake_telegram.push_update(text_update("first", user=ALICE))
    await _until_true(lambda: bool(fake_openai.requests_for("chat-model")))
    waiting = text_update("my flight is LH-4040", user=ALICE)
    fake_telegram.push_update(waiting)
    await _until_true(lambda: len(spool.messages()) == 1)
    edited = {**waiting["message"], "text": "my flight leaves at 9", "edit_date": waiting["message"]["date"] + 1}
    fake_telegram.push_update({"update_id": waiting["update_id"] + 1000, "edited_message": edited})
    # the edit waits behind the message it edits, but what a crash would leave has the new words already
    await _until_true(lambda: [kept.text for kept in spool.messages()] == ["my flight leaves at 9"])
    assert "LH-4040" not in spool.path.read_text(encoding="utf-8")

    first_may_end.set()
    await _replies(fake_telegram, 2)
    await _until_true(lambda: not spool.path.exists())

    def said() -> list[str]:
        return [message.content for message in app.working_memory.window("xiaoxiang", "telegram:chat:101")]

    await _until_true(lambda: said() == ["first", "noted", "my flight leaves at 9", "noted"])


async def test_what_a_bot_says_while_the_chat_waits_is_not_kept(
    running_bot: Application, app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    first_may_end = threading.Event()

    def answer(body: dict[str, Any]) -> str:
        if "first" in _last_user_text(body):
            first_may_end.wait(WAIT)
        return "noted"

    fake_openai.set_default("chat-model", answer)
    spool = MessageSpool(app.settings.storage.data_dir)
    mention = f"@{BOT_USERNAME}"

    def addressed(text: str, user: dict[str, Any]) -> dict[str, Any]:
        update = text_update(f"{mention} {text}", user=user, chat=GROUP)
        update["message"]["entities"] = [{"type": "mention", "offset": 0, "length": len(mention)}]
        return update

    fake_telegram.push_update(addressed("first", ALICE))
    await _until_true(lambda: bool(fake_openai.requests_for("chat-model")))
    other_bot = {**person(303, "Helper"), "is_bot": True}
    fake_telegram.push_update(addressed("beep, from a bot", other_bot))
    fake_telegram.push_update(addressed("and a second", ALICE))
    await _until_true(lambda: len(spool.messages()) == 1)
    assert [kept.text for kept in spool.messages()] == ["and a second"]  # a bot's words would be stored at a start

    first_may_end.set()
    await _replies(fake_telegram, 2)
    await _until_true(lambda: not spool.path.exists())


async def _until_true(condition: Callable[[], bool]) -> None:
    """Poll `condition` (it reads what other threads change) until it holds, or fail after `WAIT` seconds."""
    async with asyncio.timeout(WAIT):
        while not condition():
            await asyncio.sleep(0.01)


def _update(payload: dict[str, Any]) -> Update:
    return Update.de_json(payload, None)


def test_updates_keep_the_order_of_their_chat() -> None:
    message = text_update("hi", user=ALICE, chat=GROUP)
    assert chat_of(_update(message)) == GROUP["id"]
    assert chat_of(_update({"update_id": 1, "edited_message": message["message"]})) == GROUP["id"]
    press = {"id": "q1", "from": BOB, "chat_instance": "ci", "data": "forget:no:202", "message": message["message"]}
    assert chat_of(_update({"update_id": 2, "callback_query": press})) == GROUP["id"]  # the buttons' chat
    inline = {"id": "q2", "from": BOB, "query": "cats", "offset": ""}
    assert chat_of(_update({"update_id": 3, "inline_query": inline})) is None
    assert chat_of(object()) is None


def _handler(started: list[str], name: str, release: asyncio.Event | None = None) -> Callable[[], Awaitable[None]]:
    async def handle() -> None:
        started.append(name)
        if release is not None:
            await release.wait()

    return handle


async def _until(condition: Callable[[], bool]) -> None:
    """Let the event loop run until `condition` holds (no clock involved)."""
    while not condition():
        await asyncio.sleep(0)


async def test_a_chat_with_a_backlog_does_not_hold_back_other_chats() -> None:
    processor = PerChatUpdateProcessor(max_running=2)
    alice, bob = _update(text_update("a", user=ALICE)), _update(text_update("b", user=BOB))
    started: list[str] = []
    release = asyncio.Event()
    backlog = [
        asyncio.create_task(processor.process_update(alice, _handler(started, f"alice {index}", release)()))
        for index in range(5)
    ]
    await _until(lambda: started == ["alice 0"])
    await processor.process_update(bob, _handler(started, "bob")())  # runs although Alice has four waiting
    assert started == ["alice 0", "bob"]
    release.set()
    await asyncio.gather(*backlog)
    assert started == ["alice 0", "bob", "alice 1", "alice 2", "alice 3", "alice 4"]
    assert processor.busy_chats == 0  # no per-chat state outlives the chat's last update


async def test_at_most_max_running_updates_run_at_once() -> None:
    processor = PerChatUpdateProcessor(max_running=1)
    alice, bob = _update(text_update("a", user=ALICE)), _update(text_update("b", user=BOB))
    started: list[str] = []
    release = asyncio.Event()
    first = asyncio.create_task(processor.process_update(alice, _handler(started, "alice", release)()))
    second = asyncio.create_task(processor.process_update(bob, _handler(started, "bob")()))
    await _until(lambda: processor.busy_chats == 2)
    assert started == ["alice"] and not second.done()  # Bob waits for a free slot, not for Alice's chat
    release.set()
    await asyncio.gather(first, second)
    assert started == ["alice", "bob"] and processor.busy_chats == 0


def test_max_running_must_be_positive() -> None:
    with pytest.raises(ValueError):
        PerChatUpdateProcessor(max_running=0)

"""Degraded, not lossy: while the disk is full the user is told, and what they said is stored once it has room."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import phrasebook
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import FakeBotAPI
from tests.fakes.telegram_updates import person, text_update
from tests.reliability.processes import BotOnASmallDisk

ALICE = person(101, "Alice")


@pytest.fixture
def bot_on_a_small_disk(env: dict[str, str], data_dir: Path, isolated: Path):  # type: ignore[no-untyped-def]
    running = BotOnASmallDisk(env, data_dir, isolated / "bot.log")
    yield running
    running.kill()


def say(fake_telegram: FakeBotAPI, text: str) -> str:
    sent = len(fake_telegram.calls_to("sendMessage"))
    fake_telegram.push_update(text_update(text, user=ALICE))
    return fake_telegram.wait_for("sendMessage", count=sent + 1, timeout=30)[-1].params["text"]


def test_messages_sent_while_the_disk_is_full_are_held_told_and_stored_when_there_is_room(
    bot_on_a_small_disk: BotOnASmallDisk, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    bot = bot_on_a_small_disk.start()
    fake_openai.set_default("chat-model", "I hear you.")
    assert say(fake_telegram, "message one") == "I hear you."
    bot.fill()
    held = [say(fake_telegram, f"message {n}") for n in ("two", "three", "four", "five")]
    assert held == [phrasebook.HELD_NOT_SAVED] * 4, bot.output()
    bot.make_room()
    assert say(fake_telegram, "message six") == "I hear you."
    prompt = [m["content"] for m in fake_openai.requests_for("chat-model")[-1].messages if m["role"] == "user"]
    assert prompt[-6:] == [f"message {n}" for n in ("one", "two", "three", "four", "five", "six")]

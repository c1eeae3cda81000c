"""SIGTERM stops the bot promptly whatever the model is doing; nothing said is lost, pending work resumes."""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

from knowledge.conversations.spool import SPOOL_FILE
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import FakeBotAPI
from tests.fakes.telegram_updates import person, text_update
from tests.reliability.processes import Bot

ALICE = person(101, "Alice")
PROMPT_SHUTDOWN = 10.0  # seconds


def wait_for_request(fake_openai: FakeOpenAIServer, model: str, count: int = 1, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(fake_openai.requests_for(model)) < count:
        assert time.monotonic() < deadline, f"no request for {model}"
        time.sleep(0.05)


def wait_fetched(fake_telegram: FakeBotAPI, update: dict[str, object], timeout: float = 30) -> None:
    """Until the bot has taken `update` (it asked for the updates after it)."""
    deadline = time.monotonic() + timeout
    after = int(str(update["update_id"]))
    while not any(int(call.params.get("offset") or 0) > after for call in fake_telegram.calls_to("getUpdates")):
        assert time.monotonic() < deadline, "the update was not fetched"
        time.sleep(0.05)


def stored(data_dir: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(data_dir / "companion.sqlite3") as db:
        return db.execute(sql).fetchall()


def test_sigterm_returns_promptly_while_the_models_hang_and_pending_work_resumes(
    bot: Bot, env: dict[str, str], fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer, data_dir: Path
) -> None:
    env["COMPANION_LLM_TIMEOUT"] = "60"  # as deployed: the hang, not a short timeout, is what must not hold us
    fake_openai.script("chat-model", "Noted, a first answer.")
    fake_openai.hang("monitor-model")
    bot.start()
    fake_telegram.push_update(text_update("my cat is called Mochi", user=ALICE))
    wait_for_request(fake_openai, "monitor-model")  # answered; its monitor job now hangs
    fake_openai.hang("chat-model")
    fake_telegram.push_update(text_update("and my dog is called Rex", user=ALICE))
    wait_for_request(fake_openai, "chat-model", count=2)  # the second reply hangs too
    waiting = fake_telegram.push_update(text_update("and my bird is called Kiwi", user=ALICE))
    wait_fetched(fake_telegram, waiting)  # taken from Telegram, waiting behind the hung turn: never delivered again

    took = bot.stop(signal.SIGTERM)
    assert took < PROMPT_SHUTDOWN, bot.output()
    assert bot.process is not None and bot.process.returncode == 0, bot.output()
    said = [row[0] for row in stored(data_dir, "SELECT content FROM messages WHERE role = 'user' ORDER BY seq")]
    assert said == ["my cat is called Mochi", "and my dog is called Rex"]
    pending = "SELECT kind FROM jobs WHERE state = 'pending'"
    # kept for the next start: the first turn's job, and the abandoned second turn's, which runs without a reply
    assert stored(data_dir, pending) == [("monitor",), ("monitor",)]
    # the message still waiting for its turn is kept for the next start, not lost with the abandoned turn
    assert "and my bird is called Kiwi" in (data_dir / SPOOL_FILE).read_text(encoding="utf-8")

    fake_openai.set_default("monitor-model", "[ADD] Alice's cat is called Mochi")
    fake_openai.set_default("chat-model", "back")
    bot.start()
    deadline = time.monotonic() + 30
    while stored(data_dir, pending):
        assert time.monotonic() < deadline, "the pending monitor job did not resume"
        time.sleep(0.1)
    assert bot.stop(signal.SIGTERM) < PROMPT_SHUTDOWN
    said = [row[0] for row in stored(data_dir, "SELECT content FROM messages WHERE role = 'user' ORDER BY seq")]
    assert said == ["my cat is called Mochi", "and my dog is called Rex", "and my bird is called Kiwi"]


def test_messages_waiting_behind_a_reply_survive_a_kill_and_are_stored_in_order_at_the_next_start(
    bot: Bot, env: dict[str, str], fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer, data_dir: Path
) -> None:
    env["COMPANION_LLM_TIMEOUT"] = "60"
    fake_openai.set_default("monitor-model", "[SKIP]")
    fake_openai.hang("chat-model")
    bot.start()
    fake_telegram.push_update(text_update("first, answered by a model that hangs", user=ALICE))
    wait_for_request(fake_openai, "chat-model")
    later = ["my flight is LH-4040", "it leaves at 9", "from gate B12"]
    updates = [fake_telegram.push_update(text_update(text, user=ALICE)) for text in later]
    wait_fetched(fake_telegram, updates[-1])  # taken from Telegram, which will not deliver them again
    spool = data_dir / SPOOL_FILE
    deadline = time.monotonic() + 30
    while not spool.exists() or spool.read_text(encoding="utf-8").count("\n") < len(later):
        assert time.monotonic() < deadline, "the waiting messages were not kept"
        time.sleep(0.05)

    bot.stop(signal.SIGKILL)  # no clean stop: what is on disk now is all the next start has
    fake_openai.set_default("chat-model", "back")
    bot.start()
    user_said = "SELECT content FROM messages WHERE role = 'user' ORDER BY seq"
    deadline = time.monotonic() + 30
    while len(stored(data_dir, user_said)) < 1 + len(later):
        assert time.monotonic() < deadline, "the kept messages were not stored"
        time.sleep(0.1)
    assert bot.stop(signal.SIGTERM) < PROMPT_SHUTDOWN
    assert [row[0] for row in stored(data_dir, user_said)] == ["first, answered by a model that hangs", *later]
    assert not spool.exists()

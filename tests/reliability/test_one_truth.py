"""One data directory, one truth: the running bot obeys the operator's CLI, and owns its directory alone."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from core import phrasebook
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import FakeBotAPI
from tests.fakes.telegram_updates import person, text_update
from tests.reliability.processes import Bot, companion

ALICE = person(101, "Alice")
SCOPE = ["--persona", "xiaoxiang", "--user", "telegram:101"]


def memory_file(path: Path, *texts: str) -> Path:
    blocks = "".join(f"### [new] fact | 1.00 | 2026-01-01 00:00 | 0\n{text}\n\n" for text in texts)
    path.write_text(f"# Memories\n\n{blocks}", encoding="utf-8")
    return path


def say(fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer, text: str) -> str:
    """Alice says `text`; returns the system prompt the chat model was given for it."""
    asked = len(fake_openai.requests_for("chat-model"))
    sent = len(fake_telegram.calls_to("sendMessage"))
    fake_telegram.push_update(text_update(text, user=ALICE))
    fake_telegram.wait_for("sendMessage", count=sent + 1, timeout=30)
    [*_, prompt] = fake_openai.requests_for("chat-model")[asked:]
    return prompt.messages[0]["content"]


def memory_listing(fake_telegram: FakeBotAPI) -> str:
    sent = len(fake_telegram.calls_to("sendMessage"))
    update = text_update("/memory", user=ALICE)
    update["message"]["entities"] = [{"type": "bot_command", "offset": 0, "length": len("/memory")}]
    fake_telegram.push_update(update)
    return fake_telegram.wait_for("sendMessage", count=sent + 1, timeout=30)[-1].params["text"]


def test_the_running_bot_carries_out_the_cli_and_refuses_a_second_owner(
    bot: Bot, env: dict[str, str], fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_openai.set_default("chat-model", "好的，主人。")
    seeded = companion(
        env,
        "memory",
        "import",
        *SCOPE,
        str(memory_file(tmp_path / "seed.md", "Alice loves ramen", "Alice lives in Paris")),
    )
    assert seeded.returncode == 0, seeded.stderr  # no bot yet: the command held the directory itself
    bot.start()
    prompt = say(fake_telegram, fake_openai, "what do you know about my food, my city and my music?")
    assert "Alice loves ramen" in prompt and "Alice lives in Paris" in prompt

    listed = companion(env, "memory", "list", *SCOPE, "--json")  # read-only, while the bot runs
    ids = {record["content"]: record["id"] for record in json.loads(listed.stdout)}
    forgot = companion(env, "memory", "forget", *SCOPE, ids["Alice loves ramen"])
    assert forgot.stdout.startswith("Forgot 1 memories, 0 messages"), forgot.stderr
    edited = companion(env, "memory", "edit", *SCOPE, ids["Alice lives in Paris"], "--text", "Alice lives in Berlin")
    assert "Alice lives in Berlin" in edited.stdout, edited.stderr
    memory_file(tmp_path / "new.md", "Alice plays the cello")
    imported = companion(env, "memory", "import", *SCOPE, "new.md", cwd=tmp_path)  # a path relative to the caller
    assert "1 added" in imported.stdout, imported.stderr

    prompt = say(fake_telegram, fake_openai, "what do you know about my food, my city and my music?")
    assert "ramen" not in prompt and "Paris" not in prompt
    assert "Alice lives in Berlin" in prompt and "Alice plays the cello" in prompt
    listing = memory_listing(fake_telegram)
    assert "Berlin" in listing and "cello" in listing and "ramen" not in listing and "Paris" not in listing

    second = companion(env, "run")
    assert second.returncode == 1
    assert f"PID {bot.pid}" in second.stderr and len(second.stderr.strip().splitlines()) == 1, second.stderr

    bot.stop(signal.SIGKILL)  # the lock dies with its holder, the socket file stays behind
    bot.start()
    listing = memory_listing(fake_telegram)
    assert "Berlin" in listing and "cello" in listing and "ramen" not in listing

    # A confirmation is asked by the command's own process, then carried out by the bot.
    declined = companion(env, "memory", "forget", *SCOPE, "--all", stdin="n\n")
    assert "Forget every memory" in declined.stdout and declined.returncode == 1
    confirmed = companion(env, "memory", "forget", *SCOPE, "--all", stdin="y\n")
    assert "Forgot 2 memories" in confirmed.stdout, confirmed.stderr
    assert memory_listing(fake_telegram).startswith(phrasebook.NOTHING_REMEMBERED)  # then the time zone

"""Bad input never kills a conversation, and a start-up failure is one line that says what to do."""

from __future__ import annotations

from pathlib import Path

from bot.app import build_app
from bot.config import Settings
from knowledge.search.embedding import Embedder
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeOpenAIServer
from tests.reliability.processes import companion, on_a_full_disk


def test_undecodable_bytes_in_a_piped_chat_are_replaced_and_the_next_line_is_answered(
    env: dict[str, str], fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "first answer", "second answer")
    done = companion(env, "chat", "--user", "x", stdin=b"bad \xff\xfe\nnext\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["first answer", "second answer"]
    [first, second] = fake_openai.requests_for("chat-model")
    assert first.messages[-1]["content"] == "bad \ufffd\ufffd" and second.messages[-1]["content"] == "next"


async def test_a_full_disk_at_start_is_one_line_naming_the_file(
    env: dict[str, str], data_dir: Path, settings: Settings, embedder: Embedder
) -> None:
    used = await build_app(settings, embedder=embedder)  # a data directory in use, made in this process
    await (await used.companion.handle(make_message("hello"))).text()
    await used.aclose()
    (data_dir / "companion.lock").write_text("a page to reuse " * 100)  # so the disk refuses the database itself
    started = on_a_full_disk(env, data_dir, "chat", "--user", "x", stdin=b"hello again\n")
    assert started.returncode == 1
    [line] = started.stderr.strip().splitlines()
    assert "small-disk/data/companion.sqlite3: the disk" in line and "free some space" in line

"""Bad input never kills a conversation, and a start-up failure is one line that says what to do."""

from __future__ import annotations

from pathlib import Path

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


def test_a_full_disk_at_start_is_one_line_naming_the_file(
    env: dict[str, str], data_dir: Path, fake_openai: FakeOpenAIServer
) -> None:
    assert companion(env, "chat", "--user", "x", stdin="hello\n").returncode == 0  # a data directory in use
    (data_dir / "companion.sqlite3-wal").unlink(missing_ok=True)
    started = on_a_full_disk(env, data_dir, "chat", "--user", "x", stdin=b"hello again\n")
    assert started.returncode == 1
    [line] = started.stderr.strip().splitlines()
    assert "small-disk/data/" in line and "disk" in line and "free some space" in line

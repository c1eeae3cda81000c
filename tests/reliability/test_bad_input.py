"""Bad input never kills a conversation, and a start-up failure is one line that says what to do."""

from __future__ import annotations

from tests.fakes.openai_server import FakeOpenAIServer
from tests.reliability.processes import companion


def test_undecodable_bytes_in_a_piped_chat_are_replaced_and_the_next_line_is_answered(
    env: dict[str, str], fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "first answer", "second answer")
    done = companion(env, "chat", "--user", "x", stdin=b"bad \xff\xfe\nnext\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["first answer", "second answer"]
    [first, second] = fake_openai.requests_for("chat-model")
    assert first.messages[-1]["content"] == "bad \ufffd\ufffd" and second.messages[-1]["content"] == "next"

"""The OpenAI-compatible client against a real local HTTP server, and token counting."""

from __future__ import annotations

from typing import get_args

import pytest

from core.errors import LLMError
from core.llm import client as llm
from core.llm.client import ModelSettings, OpenAIClient, count_tokens
from core.types import ROLES, ChatMessage, ToolCall, ToolSpec
from personas.loader import ModelChoice, RoleName
from tests.fakes.openai_server import FakeCut, FakeError, FakeHang, FakeOpenAIServer, FakeToolCalls

HELLO = [ChatMessage("system", "You are terse."), ChatMessage("user", "hi")]


def client(fake: FakeOpenAIServer, *, retries: int = 2, timeout: float = 2.0) -> OpenAIClient:
    models = {role: ModelSettings(model=f"{role}-model", max_tokens=64) for role in ROLES}
    return OpenAIClient(base_url=fake.url, api_key=None, models=models, timeout=timeout, max_retries=retries)


async def test_each_role_calls_its_own_model(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script("chat-model", "hello from chat")
    fake_openai.script("monitor-model", "[SKIP]")
    llm = client(fake_openai)
    assert await llm.complete(HELLO, role="chat") == "hello from chat"
    assert await llm.complete(HELLO, role="monitor") == "[SKIP]"
    [chat_request] = fake_openai.requests_for("chat-model")
    assert chat_request.messages == [message.as_openai() for message in HELLO]
    assert chat_request.body["max_tokens"] == 64


async def test_streaming_yields_the_reply_in_pieces(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script("chat-model", "a reply long enough to arrive in several chunks")
    pieces = [piece async for piece in client(fake_openai).stream(HELLO, role="chat")]
    assert len(pieces) > 3
    assert "".join(pieces) == "a reply long enough to arrive in several chunks"
    assert fake_openai.requests_for("chat-model")[0].stream


LOOKUP = ToolSpec("lookup", "Look something up.", {"type": "object", "properties": {"q": {"type": "string"}}})


async def test_a_streamed_answer_may_end_in_tool_calls_and_the_results_go_back(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script("chat-model", FakeToolCalls((("lookup", {"q": "cat"}), ("lookup", {"q": "dog"})), "Hmm, "))
    llm = client(fake_openai)
    pieces = [piece async for piece in llm.stream(HELLO, role="chat", tools=[LOOKUP])]
    text = [piece for piece in pieces if isinstance(piece, str)]
    calls = [piece for piece in pieces if isinstance(piece, ToolCall)]
    assert "".join(text) == "Hmm, " and pieces[-2:] == calls  # the text as it came, then the calls
    assert [(call.name, call.arguments) for call in calls] == [("lookup", '{"q": "cat"}'), ("lookup", '{"q": "dog"}')]
    assert fake_openai.requests_for("chat-model")[0].body["tools"] == [LOOKUP.as_openai()]

    fake_openai.script("chat-model", "It is a cat.")
    followed = [
        *HELLO,
        ChatMessage("assistant", "Hmm, ", tool_calls=tuple(calls)),
        *(ChatMessage("tool", f"result {index}", tool_call_id=call.id) for index, call in enumerate(calls)),
    ]
    assert [piece async for piece in llm.stream(followed, role="chat")] == ["It i", "s a ", "cat."]
    sent = fake_openai.requests_for("chat-model")[1]
    assert "tools" not in sent.body  # none offered: none sent
    assert sent.messages[2]["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"q": "cat"}'}
    assert sent.messages[3] == {"role": "tool", "content": "result 0", "tool_call_id": calls[0].id}


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_transient_errors_are_retried(fake_openai: FakeOpenAIServer, status: int) -> None:
    fake_openai.script("chat-model", FakeError(status, times=2), "recovered")
    assert await client(fake_openai, retries=2).complete(HELLO, role="chat") == "recovered"
    assert len(fake_openai.requests_for("chat-model")) == 3


async def test_errors_after_the_last_retry_become_llm_errors(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script("chat-model", FakeError(429, times=3))
    with pytest.raises(LLMError, match="HTTP 429") as caught:
        await client(fake_openai, retries=2).complete(HELLO, role="chat")
    assert caught.value.role == "chat"
    assert len(fake_openai.requests_for("chat-model")) == 3


async def test_a_hanging_server_times_out(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script("chat-model", FakeHang())
    with pytest.raises(LLMError, match="Timeout"):
        await client(fake_openai, retries=0, timeout=0.3).complete(HELLO, role="chat")


async def test_a_failing_stream_becomes_an_llm_error(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script("chat-model", FakeError(500))
    with pytest.raises(LLMError):
        [piece async for piece in client(fake_openai, retries=0).stream(HELLO, role="chat")]


async def test_an_unreachable_endpoint_becomes_an_llm_error() -> None:
    models = {role: ModelSettings(model="m") for role in ROLES}
    llm = OpenAIClient(base_url="http://127.0.0.1:9/v1", api_key=None, models=models, timeout=1, max_retries=0)
    with pytest.raises(LLMError, match="Connection"):
        await llm.complete(HELLO, role="chat")


def test_tokens_are_counted_offline_in_any_language() -> None:
    assert count_tokens("") == 0
    assert 0 < count_tokens("hello world") < count_tokens("hello world, how are you today?")
    assert count_tokens("主人喜欢拉面") >= 4  # CJK costs about a token per character


def test_counts_are_remembered_without_the_text() -> None:
    """A prompt is counted several times a turn; what is remembered of a text is a digest, never the text."""
    text = "remember that my locker code is ZEBRA-4711-QX"
    assert count_tokens(text) == count_tokens(text) == len(llm._encoding().encode(text))
    assert count_tokens(text + "!") != count_tokens(text)
    kept = b"".join(llm._counted)
    assert len(kept) == 16 * len(llm._counted) and b"ZEBRA" not in kept


async def test_a_persona_may_choose_its_own_model_and_temperature(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script("fancy-model", "hi")
    llm = client(fake_openai)
    assert await llm.complete(HELLO, role="chat", choice=ModelChoice(model="fancy-model", temperature=1.1)) == "hi"
    [request] = fake_openai.requests_for("fancy-model")
    assert request.body["temperature"] == 1.1 and request.body["max_tokens"] == 64
    await llm.complete(HELLO, role="chat", choice=ModelChoice(temperature=0.1))
    assert fake_openai.requests_for("chat-model")[0].body["temperature"] == 0.1


async def test_token_usage_is_reported_per_call(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script("monitor-model", "[SKIP] nothing here")
    fake_openai.script("chat-model", "a streamed reply")
    calls: list[tuple[str, str, int, int]] = []
    models = {role: ModelSettings(model=f"{role}-model") for role in ROLES}
    llm = OpenAIClient(base_url=fake_openai.url, api_key=None, models=models, usage=lambda *call: calls.append(call))
    await llm.complete(HELLO, role="monitor")
    assert calls == [("monitor", "monitor-model", 4, 3)]  # the endpoint's own count (the fake counts words)
    assert "".join([piece async for piece in llm.stream(HELLO, role="chat")]) == "a streamed reply"
    prompt = sum(count_tokens(message.content) + 4 for message in HELLO)
    assert calls[1] == ("chat", "chat-model", prompt, count_tokens("a streamed reply"))  # streams: counted here


def test_persona_files_know_the_same_roles_as_the_pipeline() -> None:
    assert get_args(RoleName) == ROLES


async def test_a_stream_cut_before_its_end_is_an_llm_error(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script("chat-model", FakeCut("a reply that never finishes", chunks=2))
    pieces: list[str] = []
    with pytest.raises(LLMError, match="cut off"):
        async for piece in client(fake_openai, retries=0).stream(HELLO, role="chat"):
            pieces.append(piece)
    assert pieces == ["a re", "ply "]  # what came before the cut was streamed; the end never came

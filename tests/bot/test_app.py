"""The composition root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bot.app import model_settings
from bot.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_with_an_endpoint_the_embedded_model_is_never_imported() -> None:
    code = (
        "import sys; from bot.config import load_settings; from bot.app import build_llm; "
        "build_llm(load_settings()); assert 'llama_cpp' not in sys.modules, 'llama_cpp was imported'"
    )
    env = {**os.environ, "OPENAI_BASE_URL": "http://127.0.0.1:8080/v1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_background_roles_default_to_the_chat_model_and_can_each_be_set() -> None:
    base = Settings(openai_base_url="http://127.0.0.1:1/v1", chat_model="big")
    assert {settings.model for settings in model_settings(base).values()} == {"big"}
    split = Settings(
        openai_base_url="http://127.0.0.1:1/v1",
        chat_model="big",
        monitor_model="cheap-monitor",
        summarizer_model="cheap-summary",
        reviewer_model="careful-review",
    )
    assert {role: settings.model for role, settings in model_settings(split).items()} == {
        "chat": "big",
        "monitor": "cheap-monitor",
        "summarizer": "cheap-summary",
        "reviewer": "careful-review",
    }

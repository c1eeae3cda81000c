"""Secrets never reach a log: the root redactor rewrites records of every logger, at every level."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import httpx
import pytest

from bot.config import Settings
from bot.log_redaction import REDACTED, redact_secrets
from tests.fakes.openai_server import FakeOpenAIServer

TOKEN = "123456:ABC-the-bot-token_xyz"
API_KEY = "sk-proj-abcdefghijklmnopqrstuv"


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    """A handler on the root logger, as `companion` sets one up, that writes to a string."""
    root = logging.getLogger()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    settings = Settings(
        telegram={"token": TOKEN}, llm={"api_key": API_KEY}, discord={"token": "MTAx.discord-token-value"}
    )
    redactor = redact_secrets(settings.secrets())
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.removeFilter(redactor)
        root.setLevel(old_level)


@pytest.mark.parametrize("level", [logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR])
def test_a_token_in_an_httpx_url_is_redacted_at_every_level(logged: io.StringIO, level: int) -> None:
    url = f"https://api.telegram.org/bot{TOKEN}/getUpdates"
    logging.getLogger("httpx").log(level, 'HTTP Request: POST %s "HTTP/1.1 200 OK"', url)
    output = logged.getvalue()
    assert TOKEN not in output and "ABC-the-bot-token" not in output
    assert f"https://api.telegram.org/bot{REDACTED}/getUpdates" in output


def test_keys_in_messages_exceptions_and_other_loggers_are_redacted(logged: io.StringIO) -> None:
    logging.getLogger("openai._base_client").debug(
        "Request options: {'headers': {'Authorization': 'Bearer %s'}}", API_KEY
    )
    logging.getLogger("telegram.ext").info("another bot: 987654:ZYXWVUTSRQPONMLKJIHGFEDCBA")
    try:
        raise ConnectionError(f"cannot reach https://api.telegram.org/bot{TOKEN}/getMe with key {API_KEY}")
    except ConnectionError:
        logging.getLogger("bot.platforms.telegram.adapter").exception("polling failed")
    logging.getLogger().warning("the discord token MTAx.discord-token-value was refused")
    output = logged.getvalue()
    for secret in (TOKEN, API_KEY, "ZYXWVUTSRQPONMLKJIHGFEDCBA", "MTAx.discord-token-value"):
        assert secret not in output
    assert "polling failed" in output and "ConnectionError: cannot reach" in output and REDACTED in output


def test_ordinary_text_is_left_alone(logged: io.StringIO) -> None:
    logging.getLogger("core.background.tasks").info(
        "monitor job %s failed (%s); retrying in %.0fs", "job_1", "timeout", 2.0
    )
    assert logged.getvalue() == "INFO core.background.tasks: monitor job job_1 failed (timeout); retrying in 2s\n"


def test_httpx_itself_logs_no_token(logged: io.StringIO, fake_openai: FakeOpenAIServer) -> None:
    httpx.get(f"{fake_openai.url}/bot{TOKEN}/getMe")  # httpx logs every request's URL at INFO
    output = logged.getvalue()
    assert "HTTP Request: GET" in output and f"/bot{REDACTED}/getMe" in output and TOKEN not in output

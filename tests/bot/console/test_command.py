"""`companion web` as an operator runs it, and `companion run` with COMPANION_WEB_PORT: a process that prints its
address (and a new token once), answers, and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from bot.console.access import TOKEN_FILE
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import TOKEN, FakeBotAPI
from tests.servers import free_port

ANNOUNCED = re.compile(r"console: (http://127\.0\.0\.1:\d+/) \((.*)\)")


def start(
    data_dir: Path, fake_openai: FakeOpenAIServer, *command: str, **env: str
) -> tuple[subprocess.Popen[str], str, str]:
    """`companion <command>` started; returns the process, the console's address and what it said of the token."""
    env = {**os.environ, "COMPANION_DATA_DIR": str(data_dir), "COMPANION_LLM_BASE_URL": fake_openai.url, **env}
    process = subprocess.Popen(
        [sys.executable, "-c", "from bot.cli.main import main; main()", *command],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    found: list[re.Match[str]] = []

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            if match := ANNOUNCED.search(line):
                found.append(match)
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(120)
    assert found, "companion web did not announce its address"
    return process, found[0][1], found[0][2]


def stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    _, said = process.communicate(timeout=60)
    assert process.returncode == 0, said
    return said


def test_companion_web_serves_announces_a_new_token_once_and_stops_on_sigterm(
    isolated: Path, fake_openai: FakeOpenAIServer
) -> None:
    data_dir = isolated / "data"
    process, url, about_token = start(data_dir, fake_openai, "web", "--port", "0")
    try:
        token = (data_dir / TOKEN_FILE).read_text().strip()
        assert f"shown once: {token}" in about_token
        assert httpx.get(url + "healthz").text == "ok"
        assert httpx.get(url + "api/scopes").status_code == 401
        assert httpx.get(url + "api/scopes", headers={"authorization": f"Bearer {token}"}).json() == []
    finally:
        assert "console stopped" in stop(process)
    process, url, about_token = start(data_dir, fake_openai, "web", "--port", "0")
    stop(process)
    assert token not in about_token and TOKEN_FILE in about_token  # shown once only


def test_companion_run_serves_the_console_beside_the_bots_when_its_port_is_set(
    isolated: Path, fake_openai: FakeOpenAIServer, fake_telegram: FakeBotAPI
) -> None:
    port = free_port()
    process, url, _ = start(
        isolated / "data",
        fake_openai,
        "run",
        COMPANION_WEB_PORT=str(port),
        COMPANION_WEB_TOKEN="run-token",
        COMPANION_TELEGRAM_TOKEN=TOKEN,
        COMPANION_TELEGRAM_BASE_URL=fake_telegram.url,
    )
    try:
        assert url == f"http://127.0.0.1:{port}/"
        assert httpx.get(url + "api/scopes", headers={"authorization": "Bearer run-token"}).json() == []
        fake_telegram.wait_for("getUpdates", timeout=60)  # the bot is up too, not still starting
    finally:
        stop(process)

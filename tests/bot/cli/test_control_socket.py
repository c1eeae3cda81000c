"""The control socket: a request is taken at once and answered however long it runs; an owner that takes
nothing (stopped with SIGSTOP, or hung) is reported within seconds instead of waited for ever."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from bot.cli import control_socket
from bot.cli.control_socket import ControlServer, NotAnsweringError, Request, Response, send, socket_path


async def test_a_request_is_answered_however_long_its_command_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control_socket, "ACCEPT_SECONDS", 0.2)

    async def slow(request: Request) -> Response:
        await asyncio.sleep(0.5)  # longer than the owner has to take the request
        return {"echo": request["say"]}

    server = ControlServer(tmp_path, slow)
    await server.start()
    try:
        assert await asyncio.to_thread(send, tmp_path, {"say": "hi"}) == {"echo": "hi"}
    finally:
        await server.aclose()


def test_an_owner_that_takes_no_request_is_reported_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control_socket, "ACCEPT_SECONDS", 0.2)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as frozen:  # listening, never accepting: as stopped
        frozen.bind(str(socket_path(tmp_path)))
        frozen.listen()
        with pytest.raises(NotAnsweringError, match="did not take the request"):
            send(tmp_path, {"say": "hi"})


def test_nobody_listening_is_none(tmp_path: Path) -> None:
    assert send(tmp_path, {"say": "hi"}) is None

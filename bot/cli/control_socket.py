"""The control socket: a local unix socket in the data directory, where its owner takes requests.

One request per connection, one JSON object on one line each way: the client sends its request,
the server says at once that it took it (an empty line), then answers with one response and closes.
Only the owner of the data directory (the holder of its lock) listens, so a socket file left by a
killed process is simply not answered; an owner that is stopped or hung (the kernel still accepts
connections for it) does not take the request within `ACCEPT_SECONDS`, and the client says so
instead of waiting for ever. A command may then run as long as it needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SOCKET_FILE = "control.sock"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a request carries a command line; a response, what the command printed
ACCEPT_SECONDS = 10.0  # a running owner takes a request at once; one that does not is stopped or hung
SHORT_PATH_BYTES = 100  # unix socket addresses are limited to 108 bytes on Linux (104 on macOS)
Request = dict[str, Any]
Response = dict[str, Any]
Handler = Callable[[Request], Awaitable[Response]]


def socket_path(data_dir: Path) -> Path:
    """Where the owner of `data_dir` listens."""
    return data_dir / SOCKET_FILE


@contextlib.contextmanager
def _address(path: Path) -> Iterator[str]:
    """An address for `path` that fits the socket address limit: a long one is reached through its directory's
    file descriptor (Linux `/proc/self/fd`), so deep data directories (such as test temp dirs) work."""
    if len(os.fsencode(path)) < SHORT_PATH_BYTES or not Path("/proc/self/fd").is_dir():
        yield str(path)
        return
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{directory}/{path.name}"
    finally:
        os.close(directory)


class ControlServer:
    """Listens on the data directory's control socket and answers each request with `handler`."""

    def __init__(self, data_dir: Path, handler: Handler) -> None:
        self.path = socket_path(data_dir)
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._serving: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Listen (the caller holds the data directory's lock, so a file already there is stale)."""
        self.path.unlink(missing_ok=True)
        old_umask = os.umask(0o077)  # only this user may connect: the socket carries out memory commands
        try:
            with _address(self.path) as address:
                self._server = await asyncio.start_unix_server(self._serve, path=address, limit=MAX_MESSAGE_BYTES)
        finally:
            os.umask(old_umask)

    async def aclose(self, *, grace: float = 5.0) -> None:
        """Stop listening; requests being carried out get `grace` seconds to finish."""
        if self._server is None:
            return
        self._server.close()
        if self._serving:
            await asyncio.wait(self._serving, timeout=grace)
        self.path.unlink(missing_ok=True)
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        try:
            line = await reader.readline()
            if not line.strip():
                return  # a client that connected and said nothing
            writer.write(b"\n")  # taken: the client now waits as long as the command runs
            await writer.drain()
            try:
                response = await self._handler(json.loads(line))
            except Exception as error:
                log.exception("a control request failed")
                response = {"error": f"{type(error).__name__}: {error}"}
            writer.write(json.dumps(response, ensure_ascii=False).encode() + b"\n")
            await writer.drain()
        except ConnectionError:
            log.warning("a control client went away before its answer")
        finally:
            writer.close()
            self._serving.discard(task)


def send(data_dir: Path, request: Request) -> Response | None:
    """Send `request` to the owner of `data_dir` and wait for its answer; None if nobody listens."""
    path = socket_path(data_dir)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        try:
            with _address(path) as address:
                client.connect(address)
        except (FileNotFoundError, ConnectionRefusedError):
            return None
        client.sendall(json.dumps(request, ensure_ascii=False).encode() + b"\n")
        client.shutdown(socket.SHUT_WR)
        client.settimeout(ACCEPT_SECONDS)
        with client.makefile("rb") as stream:
            try:
                taken = stream.readline()
            except TimeoutError as error:
                raise NotAnsweringError(f"it did not take the request within {ACCEPT_SECONDS:.0f} s") from error
            client.settimeout(None)
            answer = stream.read()
    if not taken or not answer:
        raise ConnectionError("the running companion closed the control socket without answering")
    reply: dict[str, Any] | None = json.loads(answer)
    return reply


class NotAnsweringError(ConnectionError):
    """The owner of the data directory is alive (it holds the lock) but takes no request: stopped or hung."""

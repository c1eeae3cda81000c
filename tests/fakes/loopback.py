"""What every fake HTTP server of the tests shares: a real server on 127.0.0.1, in a daemon thread."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self


class LoopbackHTTPServer(ThreadingHTTPServer):
    """A `ThreadingHTTPServer` that takes many connections at once, as a real server does.

    socketserver listens with a backlog of 5: hundreds of clients connecting at once (a benchmark's users)
    overflow it, and the kernel then resets connections the clients believe open (a "read error").
    """

    request_queue_size = 1024


class LoopbackServer:
    """Start, stop and address a `ThreadingHTTPServer` on a free loopback port; subclasses make the server."""

    thread_name = "fake-server"

    def __init__(self) -> None:
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def _make_server(self) -> ThreadingHTTPServer:
        raise NotImplementedError

    def _before_stop(self) -> None:
        """Wake handlers that wait on something, so shutdown does not hang."""

    def start(self) -> Self:
        self._httpd = self._make_server()
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=self.thread_name, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None or self._thread is None:
            return
        self._before_stop()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def root_url(self) -> str:
        """`http://127.0.0.1:<port>` of the running server."""
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and lets a client hang up mid-request (a timeout, a cancelled call)."""

    # HTTP/1.1 so clients keep connections alive.
    protocol_version = "HTTP/1.1"
    # Headers and body go out as separate writes; Nagle would add ~40 ms per response.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass

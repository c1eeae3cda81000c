"""A fake of the one Discord REST call `companion doctor --online` makes: who the bot token belongs to."""

from __future__ import annotations

import json
from http.server import ThreadingHTTPServer

from tests.fakes.loopback import LoopbackHTTPServer, LoopbackServer, QuietHandler

BOT_NAME = "Xiaoxiang"


class FakeDiscordAPI(LoopbackServer):
    """Answers `GET /api/v10/users/@me` for `token` (as `Authorization: Bot <token>`), 401 for any other."""

    thread_name = "fake-discord"

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    @property
    def url(self) -> str:
        """The API base URL, as discord.com/api/v10 is for the real one."""
        return f"{self.root_url}/api/v10"

    def _make_server(self) -> ThreadingHTTPServer:
        fake = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                if self.path != "/api/v10/users/@me":
                    self._send(404, {"message": "404: Not Found", "code": 0})
                elif self.headers.get("Authorization") != f"Bot {fake.token}":
                    self._send(401, {"message": "401: Unauthorized", "code": 0})
                else:
                    self._send(200, {"id": "42", "username": BOT_NAME, "bot": True})

            def _send(self, status: int, payload: dict[str, object]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return LoopbackHTTPServer(("127.0.0.1", 0), Handler)

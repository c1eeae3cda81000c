"""In-process fake of the Telegram Bot API for tests.

It serves real HTTP on 127.0.0.1 so the production python-telegram-bot `Application` (request encoding,
update parsing, polling, file downloads, flood-limit retries) is exercised end to end: point it there with
`ApplicationBuilder().token(TOKEN).base_url(f"{fake.url}/bot")`. Every call is recorded, in order, with
the status it got: `refuse(method)` answers the next calls of a method with 429 "retry after", as Telegram
does under its flood limits (or another error), and `add_file` serves a file (a photo) for `getFile` and
its download.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote

from telegram.ext import Application

from tests.fakes.loopback import LoopbackHTTPServer, LoopbackServer, QuietHandler

TOKEN = "1:T"
BOT_USERNAME = "companion_test_bot"
# PTB sends string parameters as they are and everything else JSON-encoded; these stay strings.
_STRING_PARAMS = frozenset(
    {"text", "caption", "action", "callback_query_id", "inline_message_id", "parse_mode", "url", "command"}
)
MESSAGE_LIMIT = 4096
_LONG_POLL_CAP = 0.2  # seconds a getUpdates with no updates waits, so tests and shutdown stay fast


@dataclass(frozen=True)
class Call:
    method: str
    params: dict[str, Any]
    status: int = 200  # what the fake answered: 200, or an error such as 429 "retry after"
    result: Any = None  # what it answered with (a sent message, True, ...)

    @property
    def accepted(self) -> bool:
        return self.status == 200


class FakeBotAPI(LoopbackServer):
    """A scriptable Bot API server: `push_update(dict)` queues updates; `.calls` records requests."""

    thread_name = "fake-telegram"

    def __init__(self, token: str = TOKEN, username: str = BOT_USERNAME) -> None:
        super().__init__()
        self.token = token
        self.bot_id = int(token.split(":", 1)[0])
        self.username = username
        self._lock = threading.Condition()
        self.reset()

    def _make_server(self) -> ThreadingHTTPServer:
        return LoopbackHTTPServer(("127.0.0.1", 0), _handler_for(self))

    @property
    def url(self) -> str:
        """The server root; the Bot API base URL is `f"{url}/bot"`."""
        return self.root_url

    # --- scripting and inspection -----------------------------------------

    def reset(self) -> None:
        with self._lock:
            self._updates: list[dict[str, Any]] = []
            self._next_update_id = 1
            self._next_message_id = 1000
            self._calls: list[Call] = []
            # People who never started a private chat with the bot: Telegram refuses to message them.
            self.unreachable: set[int] = set()
            self._listeners: list[Callable[[Call], None]] = []
            self._refusals: dict[str, list[tuple[int, int]]] = {}  # method -> (status, retry_after) to come
            self._files: dict[str, bytes] = {}

    def push_update(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update for getUpdates; an `update_id` is assigned when missing."""
        with self._lock:
            update = {"update_id": self._next_update_id, **update}
            self._next_update_id = max(self._next_update_id, update["update_id"]) + 1
            self._updates.append(update)
            self._lock.notify_all()
        return update

    @property
    def bot_user(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "Companion",
            "username": self.username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def calls_to(self, method: str) -> list[Call]:
        return [call for call in self.calls if call.method == method]

    def sent_texts(self, chat_id: int | None = None) -> list[str]:
        """The texts of every accepted sendMessage (to `chat_id`, when given), in order."""
        return [
            call.params["text"]
            for call in self.calls_to("sendMessage")
            if call.accepted and (chat_id is None or call.params.get("chat_id") == chat_id)
        ]

    def final_texts(self, chat_id: int | None = None) -> list[str]:
        """What each accepted message (to `chat_id`, when given) says in the end, after its edits, in the
        order the messages were sent: what a person reads once a growing reply is done."""
        texts: dict[tuple[Any, Any], str] = {}
        for call in self.calls:
            if not call.accepted or (chat_id is not None and call.params.get("chat_id") != chat_id):
                continue
            if call.method == "sendMessage":
                texts[(call.params["chat_id"], call.result["message_id"])] = call.params["text"]
            elif call.method == "editMessageText":
                key = (call.params.get("chat_id"), call.params.get("message_id"))
                if key in texts:
                    texts[key] = call.params["text"]
        return list(texts.values())

    def refuse(self, method: str, *, times: int = 1, status: int = 429, retry_after: int = 1) -> None:
        """Refuse the next `times` calls of `method`: 429 "retry after `retry_after` seconds" (Telegram's
        flood limits), or another `status` (400, 500, ...)."""
        with self._lock:
            self._refusals.setdefault(method, []).extend([(status, retry_after)] * times)

    def add_file(self, file_id: str, data: bytes) -> None:
        """Serve `data` as the file `file_id` (a photo's size, a document) for getFile and its download."""
        with self._lock:
            self._files[file_id] = data

    def file(self, path: str) -> bytes | None:
        with self._lock:
            return self._files.get(path.removeprefix("files/"))

    def listen(self, listener: Callable[[Call], None]) -> None:
        """Have `listener` called with every call as it is recorded, in order, on the server's thread.

        It runs under the server's lock, so it must be quick: append to a list, `call_soon_threadsafe`.
        """
        with self._lock:
            self._listeners.append(listener)

    def wait_for(self, method: str, count: int = 1, timeout: float = 5.0) -> list[Call]:
        """Block until `count` calls of `method` were recorded (for polling tests)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                found = [call for call in self._calls if call.method == method]
                if len(found) >= count:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"expected {count} {method} call(s), got {len(found)}")
                self._lock.wait(remaining)

    # --- the API ------------------------------------------------------------

    def _answer(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, payload = self._reply_to(method, params)
        call = Call(method, params, status, payload.get("result"))
        with self._lock:
            self._calls.append(call)
            for listener in self._listeners:
                listener(call)
            self._lock.notify_all()
        return status, payload

    def _reply_to(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            refusals = self._refusals.get(method)
            refusal = refusals.pop(0) if refusals else None
        if refusal is not None:
            status, retry_after = refusal
            if status != 429:
                return status, {"ok": False, "error_code": status, "description": "Bad Request: refused by the test"}
            description = f"Too Many Requests: retry after {retry_after}"
            refused = {"ok": False, "error_code": 429, "description": description}
            return 429, {**refused, "parameters": {"retry_after": retry_after}}
        if method == "getUpdates":
            return 200, {"ok": True, "result": list(self._take_updates(params))}
        if method == "getMe":
            return 200, {"ok": True, "result": self.bot_user}
        if method == "getFile":
            file_id = str(params.get("file_id"))
            data = self.file(file_id)
            if data is None:
                return 400, {"ok": False, "error_code": 400, "description": "Bad Request: invalid file_id"}
            found = {
                "file_id": file_id,
                "file_unique_id": file_id,
                "file_size": len(data),
                "file_path": f"files/{file_id}",
            }
            return 200, {"ok": True, "result": found}
        if method == "sendMessageDraft":  # a private chat's reply as it grows: only checked, nothing is kept
            if len(str(params.get("text", "")).encode("utf-16-le")) // 2 > MESSAGE_LIMIT:
                return 400, {"ok": False, "error_code": 400, "description": "Bad Request: text is too long"}
            return 200, {"ok": True, "result": True}
        if method in ("sendMessage", "editMessageText"):
            text = str(params.get("text", ""))
            if not text.strip():
                return 400, {"ok": False, "error_code": 400, "description": "Bad Request: message text is empty"}
            if len(text.encode("utf-16-le")) // 2 > MESSAGE_LIMIT:  # like Telegram: refused, not truncated
                return 400, {"ok": False, "error_code": 400, "description": "Bad Request: message is too long"}
            if int(params.get("chat_id", 0)) in self.unreachable:
                description = "Forbidden: bot can't initiate conversation with a user"
                return 403, {"ok": False, "error_code": 403, "description": description}
            return 200, {"ok": True, "result": self._message(params)}
        if method == "getMyCommands":
            return 200, {"ok": True, "result": []}
        return 200, {"ok": True, "result": True}  # sendChatAction, answerCallbackQuery, deleteWebhook, ...

    def _take_updates(self, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        offset = int(params.get("offset") or 0)
        wait = min(float(params.get("timeout") or 0), _LONG_POLL_CAP)
        with self._lock:
            self._updates = [update for update in self._updates if update["update_id"] >= offset]
            if not self._updates and wait > 0:
                self._lock.wait(wait)
            pending = [update for update in self._updates if update["update_id"] >= offset]
        yield from pending

    def _message(self, params: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._next_message_id += 1
            message_id = params.get("message_id") or self._next_message_id
        chat_id = params.get("chat_id")
        chat_type = "private" if isinstance(chat_id, int) and chat_id > 0 else "group"
        return {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": chat_type, "title": None if chat_type == "private" else "Group"},
            "from": self.bot_user,
            "text": params.get("text", ""),
        }


@asynccontextmanager
async def polling(application: Application) -> AsyncIterator[Application]:  # type: ignore[type-arg]
    """`application` started and polling its Bot API server, as `companion run` runs it; stopped on exit."""
    async with application:
        await application.start()
        assert application.updater is not None
        await application.updater.start_polling(poll_interval=0.0, timeout=1)
        try:
            yield application
        finally:
            await application.updater.stop()
            await application.stop()


def _decode(params: dict[str, str]) -> dict[str, Any]:
    decoded: dict[str, Any] = {}
    for key, value in params.items():
        if key in _STRING_PARAMS:
            decoded[key] = value
            continue
        try:
            decoded[key] = json.loads(value)
        except ValueError:
            decoded[key] = value
    return decoded


def _handler_for(fake: FakeBotAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:
            downloads, path = f"/file/bot{fake.token}/", unquote(self.path)  # PTB quotes the token's colon
            if not path.startswith(downloads):
                self.do_POST()
                return
            data = fake.file(path[len(downloads) :])
            if data is None:
                self._send(404, {"ok": False, "error_code": 404, "description": "Not Found"})
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8")
            prefix = f"/bot{fake.token}/"
            if not self.path.startswith(prefix):
                self._send(404, {"ok": False, "error_code": 404, "description": "Not Found"})
                return
            method = self.path[len(prefix) :].split("?", 1)[0]
            if "json" in (self.headers.get("Content-Type") or ""):
                params = json.loads(body or "{}")
            else:
                params = _decode(dict(parse_qsl(body, keep_blank_values=True)))
            status, payload = fake._answer(method, params)
            self._send(status, payload)

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler

"""In-process fake of the OpenAI HTTP API for tests.

It serves real HTTP on 127.0.0.1 so the production `openai` client (retries,
timeouts, SSE parsing) is exercised end to end instead of being mocked away.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import ThreadingHTTPServer
from typing import Any, TypeAlias

from tests.fakes.loopback import LoopbackHTTPServer, LoopbackServer, QuietHandler

DEFAULT_MODEL = "fake-model"
DEFAULT_REPLY = "ok"

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


@dataclass(frozen=True)
class FakeError:
    """Answer with an OpenAI-style error `times` times before the next queued item."""

    status: int
    times: int = 1
    message: str = "fake error"
    # Real OpenAI sends retry hints; a tiny one keeps the client's retries fast in tests.
    retry_after_ms: int | None = 10


@dataclass(frozen=True)
class FakeHang:
    """Accept the request and never answer until the server stops (for timeout tests)."""


@dataclass(frozen=True)
class FakeCut:
    """Stream the first `chunks` content chunks of `reply`, then end the HTTP response cleanly without the
    stop chunk or `[DONE]`: a stream cut short by a dying server or a proxy."""

    reply: str
    chunks: int = 1


@dataclass(frozen=True)
class FakeToolCalls:
    """Answer by calling tools, as a model does when it was offered some: each call a (name, arguments)
    pair, the arguments a dict (sent as JSON) or raw text (to send malformed JSON); `content` first, if any."""

    calls: tuple[tuple[str, dict[str, Any] | str], ...]
    content: str = ""

    def openai_calls(self) -> list[dict[str, Any]]:
        """The calls as OpenAI's `tool_calls`, each with an id of its own."""
        return [
            {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
            }
            for name, args in self.calls
        ]


def recall_call(query: str, **more: str) -> FakeToolCalls:
    """One call of the companion's `recall` tool."""
    return FakeToolCalls((("recall", {"query": query, **more}),))


Answer: TypeAlias = str | FakeToolCalls
Reply: TypeAlias = Answer | Callable[[dict[str, Any]], Answer]
Item: TypeAlias = Reply | FakeError | FakeHang | FakeCut


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    model: str | None
    body: dict[str, Any]
    stream: bool
    messages: list[dict[str, Any]]
    # set once the answer has been sent whole, so a test can tell what a client did before the model finished
    finished: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)


class FakeOpenAIServer(LoopbackServer):
    """Scriptable OpenAI-compatible server; see `script`, `set_default`, `set_delay`, `hang`.

    `chunk_delay` seconds pass between streamed chunks (of `chunk_size` characters, about a token each):
    1/30 streams like a model writing 30 tokens a second.
    """

    chunk_size = 4  # characters per streamed content chunk
    thread_name = "fake-openai"

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.reset()

    def _make_server(self) -> ThreadingHTTPServer:
        self._stopping.clear()
        return _HTTPServer(self)

    def _before_stop(self) -> None:
        self._stopping.set()  # wakes delayed and hanging handlers

    @property
    def url(self) -> str:
        return f"{self.root_url}/v1"

    # --- scripting -------------------------------------------------------

    def reset(self) -> None:
        """Forget scripts, defaults, delays and recorded requests (the server may be shared)."""
        with self._lock:
            self._queues: dict[str, deque[Item]] = {}
            self._defaults: dict[str, Item] = {}
            self._delays: dict[str, float] = {}
            self._requests: list[RecordedRequest] = []
            self.default_reply: Reply = DEFAULT_REPLY
            self.delay = 0.0
            self.chunk_delay = 0.0

    def script(self, model: str, *replies: Item) -> None:
        """Queue replies (str, FakeToolCalls, callable(body) -> either, FakeError, FakeHang or FakeCut) for
        `model`, FIFO."""
        with self._lock:
            self._queues.setdefault(model, deque()).extend(replies)

    def set_default(self, model: str, reply: Item) -> None:
        """Answer used for `model` once its queue is empty."""
        with self._lock:
            self._defaults[model] = reply

    def set_delay(self, model: str, seconds: float) -> None:
        """Per-model delay; overrides `server.delay` for that model."""
        with self._lock:
            self._delays[model] = seconds

    def hang(self, model: str) -> None:
        """Make every request for `model` hang until the server stops; a queued FakeHang hangs once."""
        self.set_default(model, FakeHang())

    @property
    def models(self) -> list[str]:
        with self._lock:
            scripted = set(self._queues) | set(self._defaults) | set(self._delays)
        return [DEFAULT_MODEL, *sorted(scripted - {DEFAULT_MODEL})]

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_for(self, model: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.model == model]

    # --- used by the request handler --------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_item(self, model: str) -> Item:
        with self._lock:
            queue = self._queues.get(model)
            if not queue:
                return self._defaults.get(model, self.default_reply)
            head = queue[0]
            if isinstance(head, FakeError) and head.times > 1:
                queue[0] = replace(head, times=head.times - 1)
            else:
                queue.popleft()
            return head

    def _delay_for(self, model: str) -> float:
        with self._lock:
            return self._delays.get(model, self.delay)

    def _pause_between_chunks(self) -> bool:
        """Wait `chunk_delay`; False when the server is stopping meanwhile."""
        return self.chunk_delay <= 0 or not self._stopping.wait(self.chunk_delay)

    def _answer(self, model: str, body: dict[str, Any]) -> Answer | FakeError | FakeCut | None:
        """Pick the answer for a chat request; None means the server is stopping."""
        if self._stopping.wait(self._delay_for(model)):
            return None
        item = self._next_item(model)
        if isinstance(item, FakeHang):
            self._stopping.wait()
            return None
        if isinstance(item, (str, FakeToolCalls, FakeError, FakeCut)):
            return item
        return item(body)


class _HTTPServer(LoopbackHTTPServer):
    # Idle keep-alive connections and hung requests must not block stop().
    block_on_close = False

    def __init__(self, fake: FakeOpenAIServer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class _Handler(QuietHandler):
    server: _HTTPServer

    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/v1/models":
            self._send_error(FakeError(404, message=f"unknown path {self.path}"))
            return
        self.server.fake._record(RecordedRequest(self.path, None, {}, False, []))
        models = self.server.fake.models
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in models]
        self._send_json(200, {"object": "list", "data": data})

    def do_POST(self) -> None:
        body = self._read_json()
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_error(FakeError(404, message=f"unknown path {self.path}"))
            return
        model = str(body.get("model", DEFAULT_MODEL))
        stream = bool(body.get("stream"))
        messages = list(body.get("messages", []))
        request = RecordedRequest(self.path, model, body, stream, messages)
        self.server.fake._record(request)
        answer = self.server.fake._answer(model, body)
        if answer is None:
            self.close_connection = True
        elif isinstance(answer, FakeError):
            self._send_error(answer)
        elif isinstance(answer, FakeCut):
            events = _chunks(model, answer.reply, body, self.server.fake.chunk_size)
            self._send_stream(itertools.islice(events, 1 + answer.chunks), done=False)
        elif stream:
            self._send_stream(_chunks(model, answer, body, self.server.fake.chunk_size))
        else:
            self._send_json(200, _completion(model, answer, body))
        request.finished.set()

    def _read_json(self) -> dict[str, Any]:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        return json.loads(raw) if raw else {}

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, error: FakeError) -> None:
        headers = {} if error.retry_after_ms is None else {"retry-after-ms": str(error.retry_after_ms)}
        self._send_json(error.status, _error_body(error), headers)

    def _send_stream(self, events: Iterator[dict[str, Any]], *, done: bool = True) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for index, event in enumerate(events):
            if index and not self.server.fake._pause_between_chunks():
                self.close_connection = True
                return
            self._write_chunk(f"data: {json.dumps(event)}\n\n".encode())
        if done:
            self._write_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))


# --- OpenAI payloads --------------------------------------------------------


def _text_of(content: Any) -> str:
    """Message content is a string or a list of typed parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _usage(body: dict[str, Any], reply: Answer) -> dict[str, int]:
    """Rough token counts: one token per whitespace-separated word."""
    prompt = sum(len(_text_of(m.get("content")).split()) for m in body.get("messages", []))
    completion = len(_written(reply).split())
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _written(reply: Answer) -> str:
    if isinstance(reply, str):
        return reply
    return " ".join([reply.content, *(str(args) for _, args in reply.calls)])


def _completion(model: str, reply: Answer, body: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply}
    finish = "stop"
    if isinstance(reply, FakeToolCalls):
        message = {"role": "assistant", "content": reply.content or None, "tool_calls": reply.openai_calls()}
        finish = "tool_calls"
    choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
    return {**_envelope(model, "chat.completion"), "choices": [choice], "usage": _usage(body, reply)}


def _chunks(model: str, reply: Answer, body: dict[str, Any], size: int) -> Iterator[dict[str, Any]]:
    """Stream events: role, content pieces, each tool call (its id and name, then its arguments in pieces),
    a stop chunk and usage if the client asked for it."""
    envelope = _envelope(model, "chat.completion.chunk")

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {**envelope, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    text = reply if isinstance(reply, str) else reply.content
    yield chunk({"role": "assistant", "content": ""})
    for start in range(0, len(text), size):
        yield chunk({"content": text[start : start + size]})
    calls = reply.openai_calls() if isinstance(reply, FakeToolCalls) else []
    for index, call in enumerate(calls):
        opening = {"index": index, "id": call["id"], "type": "function"}
        yield chunk({"tool_calls": [{**opening, "function": {"name": call["function"]["name"], "arguments": ""}}]})
        arguments = call["function"]["arguments"]
        for start in range(0, len(arguments), size):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[start : start + size]}}]})
    yield chunk({}, "tool_calls" if calls else "stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        yield {**envelope, "choices": [], "usage": _usage(body, reply)}


def _envelope(model: str, kind: str) -> dict[str, Any]:
    ident = f"chatcmpl-fake-{uuid.uuid4().hex[:12]}"
    return {"id": ident, "object": kind, "created": int(time.time()), "model": model}


def _error_body(error: FakeError) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(error.status, "server_error" if error.status >= 500 else "invalid_request_error")
    return {"error": {"message": error.message, "type": kind, "param": None, "code": str(error.status)}}

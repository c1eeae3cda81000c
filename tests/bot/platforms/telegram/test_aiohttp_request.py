"""The bot's Bot API calls on aiohttp: what PTB's own request does, against real servers on this machine."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from telegram import Bot, InputFile
from telegram.error import NetworkError, RetryAfter, TimedOut

from bot.platforms.telegram.aiohttp_request import AiohttpRequest
from tests.fakes.telegram_server import TOKEN, FakeBotAPI

Handler = Callable[[web.Request], Awaitable[web.Response]]


async def test_a_bot_on_aiohttp_sends_and_is_told_of_flood_limits() -> None:
    with FakeBotAPI() as fake:
        async with Bot(TOKEN, base_url=f"{fake.url}/bot", request=AiohttpRequest()) as bot:
            sent = await bot.send_message(42, "hello there", reply_to_message_id=7)
            fake.refuse("sendMessage", retry_after=3)
            with pytest.raises(RetryAfter) as refused:
                await bot.send_message(42, "again")
        [call] = [call for call in fake.calls if call.method == "sendMessage" and call.accepted]
        assert call.params["chat_id"] == 42 and call.params["text"] == "hello there"
        assert sent.text == "hello there" and sent.chat.id == 42
        assert refused.value.retry_after == 3


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_no_server_is_a_network_error() -> None:
    request = AiohttpRequest()
    with pytest.raises(NetworkError, match="aiohttp.ClientConnectorError"):
        async with Bot(TOKEN, base_url=f"http://127.0.0.1:{_unused_port()}/bot", request=request):
            pass  # starting asks the server who the bot is


async def _who_am_i(request: web.Request) -> web.Response:
    bot = {"id": int(TOKEN.split(":")[0]), "is_bot": True, "first_name": "Companion", "username": "companion_bot"}
    return web.json_response({"ok": True, "result": bot})


@asynccontextmanager
async def _bot_answered_by(method: str, handler: Handler, *, pool_size: int = 256) -> AsyncIterator[Bot]:
    """A started bot on aiohttp whose Bot API is an aiohttp server answering `method` with `handler`."""
    app = web.Application()
    app.router.add_post("/bot{token}/getMe", _who_am_i)
    app.router.add_post(f"/bot{{token}}/{method}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = _unused_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        request = AiohttpRequest(pool_size=pool_size)
        async with Bot(TOKEN, base_url=f"http://127.0.0.1:{port}/bot", request=request) as bot:
            yield bot
    finally:
        await runner.cleanup()


async def test_a_server_that_does_not_answer_in_time_is_a_timeout() -> None:
    async def silent(request: web.Request) -> web.Response:
        await asyncio.sleep(1)
        return web.json_response({"ok": True, "result": True})

    async with _bot_answered_by("sendChatAction", silent) as bot:
        with pytest.raises(TimedOut):
            await bot.send_chat_action(42, "typing", read_timeout=0.2)


async def test_a_file_goes_as_multipart_with_the_other_parameters() -> None:
    received: dict[str, object] = {}

    async def upload(request: web.Request) -> web.Response:
        form = await request.post()
        document = form["document"]
        assert isinstance(document, web.FileField)
        received.update(chat_id=form["chat_id"], caption=form["caption"], name=document.filename)
        received["content"] = document.file.read()
        message = {"message_id": 1, "date": 0, "chat": {"id": 42, "type": "private"}, "caption": form["caption"]}
        return web.json_response({"ok": True, "result": message})

    async with _bot_answered_by("sendDocument", upload) as bot:
        await bot.send_document(42, InputFile(b"my memories", filename="export.json"), caption="yours")
    assert received == {"chat_id": "42", "caption": "yours", "name": "export.json", "content": b"my memories"}


async def test_a_call_that_could_not_have_a_connection_in_time_is_tried_again_then_timed_out() -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(float((await request.post())["chat_id"]) / 1000)
        return web.json_response({"ok": True, "result": True})

    quick = {"connect_timeout": 0.05, "pool_timeout": 0.05}
    async with _bot_answered_by("sendChatAction", slow, pool_size=1) as bot:
        # the one connection is busy for 150 ms: the second call waits past its timeout once or twice, then goes
        busy = asyncio.create_task(bot.send_chat_action(150, "typing"))
        await asyncio.sleep(0.02)
        assert await bot.send_chat_action(1, "typing", **quick)
        await busy
        # busy for a second: three tries of 100 ms, then the call is not sent
        busy = asyncio.create_task(bot.send_chat_action(1000, "typing"))
        await asyncio.sleep(0.02)
        with pytest.raises(TimedOut):
            await bot.send_chat_action(1, "typing", **quick)
        await busy

"""Platforms at scale: Telegram webhooks shared by two processes behind one proxy, Discord shards per process, and
a forget question asked by one process and answered through another."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from typing import Any

import discord.ext.test as dpytest
import httpx
import pytest
from click.testing import CliRunner
from discord.ext import commands

from bot.app import App
from bot.cli.main import cli
from bot.platforms.commands import EXPIRED
from bot.platforms.discord.adapter import CompanionCog, Shards, build_discord_bot
from bot.platforms.discord.views import ForgetQuestion
from bot.platforms.telegram.adapter import Webhook, run_telegram
from bot.platforms.terminal import TerminalChat
from core import phrasebook
from knowledge.records import Scope
from tests.cluster.conftest import OpenApp
from tests.fakes.discord import FakeInteraction, configure, press_custom_id, started_bot
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import CHAT, MONITOR, chat_history, wait_until
from tests.fakes.telegram_server import TOKEN, FakeBotAPI
from tests.fakes.telegram_updates import person, private_chat, text_update
from tests.servers import free_port

ALICE = person(7, "Alice")
SECRET = "webhook-secret"


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeBotAPI]:
    with FakeBotAPI() as server:
        yield server


async def serving(app: App, fake: FakeBotAPI, port: int) -> asyncio.Task[None]:
    """`companion run`'s Telegram part in webhook mode, listening on `port`; returns once it listens."""
    webhook = Webhook(f"https://bot.example/telegram/{port}", "127.0.0.1", port, SECRET)
    task = asyncio.create_task(run_telegram(app.platform("telegram"), TOKEN, fake.url, webhook=webhook))
    await wait_until(
        lambda: len([call for call in fake.calls_to("setWebhook") if str(port) in call.params["url"]]) == 1
    )
    return task


async def post(port: int, update: dict[str, Any], secret: str = SECRET) -> int:
    """What the proxy does with an update Telegram posted: hand it to one process's webhook server."""
    # Telegram waits for a webhook's answer far longer than httpx's 5 s, which a loaded machine can pass
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            f"http://127.0.0.1:{port}/telegram/{port}",
            json=update,
            headers={"X-Telegram-Bot-Api-Secret-Token": secret},
        )
    return response.status_code


async def test_two_processes_behind_one_proxy_answer_a_chat_in_order(
    open_app: OpenApp, fake_openai: FakeOpenAIServer, fake_telegram: FakeBotAPI
) -> None:
    fake_openai.set_default(MONITOR, "[SKIP]")
    fake_openai.script(CHAT, "Reply one.", "Reply two.")
    fake_openai.set_delay(CHAT, 0.3)
    first, second = await open_app("a"), await open_app("b")
    ports = free_port(), free_port()
    servers = [await serving(app, fake_telegram, port) for app, port in zip((first, second), ports)]
    try:
        assert await post(ports[0], text_update("Message one", user=ALICE, chat=private_chat(ALICE))) == 200
        await wait_until(lambda: len(fake_openai.requests_for(CHAT)) == 1)
        assert await post(ports[1], text_update("Message two", user=ALICE, chat=private_chat(ALICE))) == 200
        await asyncio.to_thread(fake_telegram.wait_for, "sendMessage", 2)
        assert await post(ports[1], text_update("forged", user=ALICE), secret="wrong") == 403
    finally:
        for task in servers:
            task.cancel()
        await asyncio.gather(*servers, return_exceptions=True)
    assert fake_telegram.sent_texts(ALICE["id"]) == ["Reply one.", "Reply two."]
    assert chat_history(fake_openai.requests_for(CHAT)[1])[-3:] == ["Message one", "Reply one.", "Message two"]
    assert len(fake_openai.requests_for(CHAT)) == 2


async def test_each_process_runs_its_own_discord_shards(app: App) -> None:
    bot = build_discord_bot(app.platform("discord"), shards=Shards(4, (1, 3)))
    assert isinstance(bot, commands.AutoShardedBot)
    assert bot.shard_count == 4 and bot.shard_ids == [1, 3]
    await bot.setup_hook()
    assert bot.get_cog("CompanionCog") is not None  # the same cog answers on every shard
    assert not isinstance(build_discord_bot(app.platform("discord")), commands.AutoShardedBot)  # unsharded by default


@pytest.mark.parametrize(
    ("options", "complaint"),
    [(["--shards", "2", "--shard-ids", "0,2"], "between 0 and 1"), (["--shard-ids", "0"], "needs --shards")],
)
def test_shard_options_are_checked(options: list[str], complaint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPANION_DISCORD_TOKEN", "x")
    done = CliRunner().invoke(cli, ["run", *options])
    assert done.exit_code == 2 and complaint in done.output


async def test_a_forget_question_asked_by_one_process_is_answered_through_another_on_discord(
    open_app: OpenApp, fake_openai: FakeOpenAIServer
) -> None:
    asking_app, answering_app = await open_app("a"), await open_app("b")
    asking_bot = await started_bot(asking_app.platform("discord"))
    configure(asking_bot, "Alice")
    answering_bot = await started_bot(answering_app.platform("discord"))  # a process running other shards
    try:
        alice = dpytest.get_config().members[0]
        channel = dpytest.get_config().channels[0]
        scope = Scope("xiaoxiang", f"discord:{alice.id}")
        asking_app.companion.knowledge.add(scope, "Alice's ex is called Tom", category="fact", source="user")
        asking_app.companion.knowledge.add(scope, "Alice loves ramen", category="fact", source="user")
        asking = FakeInteraction(alice, channel)
        await CompanionCog.forget.callback(asking_bot.get_cog("CompanionCog"), asking, what="Tom")  # type: ignore[arg-type]
        [question] = asking.log
        assert isinstance(question.view, ForgetQuestion)

        pressing = FakeInteraction(alice, channel, client=answering_bot)
        await press_custom_id(question.view.yes.custom_id, pressing)
        assert pressing.log[-1].content == phrasebook.forgot(1)
        assert [record.content for record in asking_app.companion.knowledge.memories(scope)] == ["Alice loves ramen"]
        again = FakeInteraction(alice, channel, client=asking_bot)
        await press_custom_id(question.view.yes.custom_id, again)
        assert again.log[-1].content == EXPIRED  # taken once, whichever process the answer reached
    finally:
        await dpytest.empty_queue()


async def test_a_forget_question_at_the_terminal_is_the_shared_one_another_process_can_take(
    open_app: OpenApp,
) -> None:
    terminal_app, other = await open_app("a"), await open_app("b")
    alice = Scope("xiaoxiang", "cli:alice")
    terminal_app.companion.knowledge.add(alice, "Alice's ex is called Tom", category="fact", source="user")
    lines = ["/forget Tom"]

    async def read_line(prompt: str) -> str | None:
        if prompt.endswith("Type 'yes' to confirm: "):  # while alice reads the question, another process forgets
            await other.companion.forget_everything(alice)
            terminal_app.companion.knowledge.add(alice, "Alice likes Tom's band", category="fact", source="user")
            return "yes"
        return lines.pop(0) if lines else None

    out = io.StringIO()
    chat = TerminalChat(
        terminal_app.companion, persona_id=None, user_name="alice", read_line=read_line, output=out, interactive=False
    )
    await chat.run()
    assert out.getvalue().endswith(f"{EXPIRED}\n")
    assert [record.content for record in other.companion.knowledge.memories(alice)] == ["Alice likes Tom's band"]

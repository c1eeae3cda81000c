"""Fixtures of the platform tests: each platform's adapter running against its fake, over the test app."""

from __future__ import annotations

from collections.abc import AsyncIterator

import discord.ext.test as dpytest
import pytest
from discord.ext import commands
from telegram.ext import Application

from bot.app import App
from bot.platforms.discord.adapter import CompanionCog
from bot.platforms.telegram.adapter import build_telegram_application
from tests.fakes.clock import FakeTimer
from tests.fakes.discord import configure, started_bot
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import TOKEN, FakeBotAPI


@pytest.fixture
def timer() -> FakeTimer:
    """Paces growing replies without waiting; what it was asked to wait is recorded."""
    return FakeTimer()


@pytest.fixture
async def telegram(
    app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer, timer: FakeTimer
) -> AsyncIterator[Application]:
    """The PTB application over the app, fed updates with `feed` (no polling)."""
    fake_openai.set_default("monitor-model", "[SKIP]")
    application = build_telegram_application(
        app.platform("telegram"), TOKEN, fake_telegram.url, polling=False, timer=timer
    )
    await application.initialize()  # getMe, answered by the fake
    yield application
    await app.companion.tasks.drain()
    await application.shutdown()


@pytest.fixture
async def discord_bot(app: App, fake_openai: FakeOpenAIServer, timer: FakeTimer) -> AsyncIterator[commands.Bot]:
    """The discord.py bot over the app, under dpytest with the members Alice and Bob."""
    fake_openai.set_default("monitor-model", "[SKIP]")
    bot = await started_bot(app.platform("discord"), timer)
    configure(bot, "Alice", "Bob")
    yield bot
    await app.companion.tasks.drain()
    await dpytest.empty_queue()


@pytest.fixture
def cog(discord_bot: commands.Bot) -> CompanionCog:
    found = discord_bot.get_cog("CompanionCog")
    assert isinstance(found, CompanionCog)
    return found

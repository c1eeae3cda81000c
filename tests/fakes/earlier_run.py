"""What an earlier run of the bot left in the data directory, for tests of the command line (outside an event loop)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from bot.app import App, build_app
from bot.config import load_settings
from core.clock import Clock

T = TypeVar("T")


def earlier_run(work: Callable[[App], T], *, clock: Clock | None = None) -> T:
    """`work` done with an app on the configured data directory, which is closed again before this returns."""

    async def run() -> T:
        async with await build_app(load_settings(), clock=clock) as app:
            return work(app)

    return asyncio.run(run())

"""Fixtures of the console tests: a user with memories and messages, and the console over the test app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from bot.app import App
from bot.console.access import Access
from bot.console.server import console_app
from knowledge.records import Scope

TOKEN = "operator-token-for-tests"
SCRIPT = "<script>alert('owned')</script>"


@dataclass
class Clock:
    """Seconds for the console's sessions and login brake, moved by hand."""

    at: float = 1000.0

    def __call__(self) -> float:
        return self.at


def seed(app: App, scope: Scope, name: str, *facts: str) -> list[str]:
    """A user who wrote once (so they are listed) and the facts remembered about them; returns their ids."""
    app.working_memory.append(
        scope.persona_id,
        f"dm:{scope.user_id}",
        role="user",
        user_id=scope.user_id,
        speaker_name=name,
        content="hello",
        sent_at=app.clock.now(),
    )
    return [app.knowledge.add(scope, fact, category="fact", source="user").id for fact in facts]


@pytest.fixture
def seconds() -> Clock:
    return Clock()


@pytest.fixture
async def client(app: App, seconds: Clock) -> AsyncIterator[httpx.AsyncClient]:
    """A browser-less client of the console, not logged in."""
    transport = httpx.ASGITransport(app=console_app(app, Access(TOKEN, now=seconds)))
    async with httpx.AsyncClient(transport=transport, base_url="http://console.test") as opened:
        yield opened


BEARER = {"authorization": f"Bearer {TOKEN}"}

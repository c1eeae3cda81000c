"""The terminal adapter's check-ins: one due is shown when a chat starts, in place of the greeting."""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from click.testing import CliRunner

from bot.app import App
from bot.platforms.terminal import TerminalChat
from core import phrasebook
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAIServer

BERLIN = ZoneInfo("Europe/Berlin")


def chat(app: App, *lines: str) -> tuple[TerminalChat, io.StringIO]:
    """A terminal chat of alice's reading `lines`, interactive (it greets), printing to the returned buffer."""
    pending = list(lines)

    async def read_line(prompt: str) -> str | None:
        return pending.pop(0) if pending else None

    out = io.StringIO()
    terminal = TerminalChat(
        app.companion, persona_id=None, user_name="alice", read_line=read_line, output=out, interactive=True
    )
    return terminal, out


async def test_a_checkin_due_is_shown_at_the_next_chat_start_once_and_listed_for_the_operator(
    app: App, clock: FakeClock, fake_openai: FakeOpenAIServer, runner: CliRunner
) -> None:
    fake_openai.set_default("monitor-model", "[SKIP]")
    fake_openai.script("chat-model", "Hello!")
    first, out = chat(app, "/timezone Europe/Berlin", "/checkins on", "I have an interview on Monday at 10")
    await first.run()
    assert phrasebook.checkins_switched(True) in out.getvalue()
    monday = datetime(2026, 1, 5, 10, tzinfo=BERLIN)
    app.companion.knowledge.add(first.scope, "alice has an interview", category="fact", source="user", about=monday)

    clock.advance(seconds=(monday + timedelta(hours=5) - clock.now()).total_seconds())
    fake_openai.set_default("chat-model", "How did the interview go?")
    second, out = chat(app)
    await second.run()
    assert "小祥: How did the interview go?" in out.getvalue()
    third, out = chat(app)
    await third.run()
    assert "How did the interview go?" not in out.getvalue()  # once

    [sent] = app.journal.checkins.listing(since=monday)
    assert sent.state == "sent" and sent.rule == "plan_passed"
    assert sent.to_dict()["user_id"] == "cli:alice"

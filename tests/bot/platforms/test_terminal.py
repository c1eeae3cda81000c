"""The terminal adapter: a check-in due is shown when a chat starts, in place of the greeting; `/forget <what>`
asks the question every platform stores, answered by typing yes; a line that answers no question is never lost."""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from click.testing import CliRunner

from bot.app import App
from bot.platforms.commands import EXPIRED
from bot.platforms.terminal import NOT_AN_ANSWER, TerminalChat
from core import phrasebook
from knowledge.forget.requests import REQUEST_TTL
from knowledge.records import Scope
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


async def forget_at_the_terminal(app: App, what: str, meanwhile: Callable[[], Awaitable[object]]) -> str:
    """alice types `/forget <what>`; `meanwhile` runs while the question waits for her yes; returns what it printed."""
    answers = [f"/forget {what}"]

    async def read_line(prompt: str) -> str | None:
        if prompt.endswith("Type 'yes' to confirm: "):
            await meanwhile()
            return "yes"
        return answers.pop(0) if answers else None

    out = io.StringIO()
    await TerminalChat(
        app.companion, persona_id=None, user_name="alice", read_line=read_line, output=out, interactive=False
    ).run()
    return out.getvalue()


async def test_forget_what_asks_the_stored_question_which_expires_within_the_hour(
    app: App, clock: FakeClock, alice: Scope
) -> None:
    app.companion.knowledge.add(alice, "Alice's ex is called Tom", category="fact", source="user")

    async def an_hour_passes() -> None:
        clock.advance(seconds=(REQUEST_TTL + timedelta(minutes=1)).total_seconds())

    printed = await forget_at_the_terminal(app, "Tom", an_hour_passes)
    assert "I remember this:\n- Alice's ex is called Tom" in printed and printed.endswith(f"{EXPIRED}\n")
    assert [record.content for record in app.companion.knowledge.memories(alice)] == ["Alice's ex is called Tom"]

    async def nothing() -> None:
        pass

    assert (await forget_at_the_terminal(app, "Tom", nothing)).endswith(f"{phrasebook.forgot(1)}\n")
    assert app.companion.knowledge.memories(alice) == []


async def test_forgetting_everything_elsewhere_meanwhile_takes_the_terminals_question(app: App, alice: Scope) -> None:
    app.companion.knowledge.add(alice, "Alice's ex is called Tom", category="fact", source="user")
    app.companion.knowledge.add(alice, "Alice loves ramen", category="fact", source="user")

    async def everything_forgotten() -> None:  # by the same person, on another platform or process
        await app.companion.forget_everything(alice)
        app.companion.knowledge.add(alice, "Alice likes Tom's band", category="fact", source="user")

    printed = await forget_at_the_terminal(app, "Tom", everything_forgotten)
    assert printed.endswith(f"{EXPIRED}\n")  # the question went with everything; what is new stays
    assert [record.content for record in app.companion.knowledge.memories(alice)] == ["Alice likes Tom's band"]


async def test_a_line_that_does_not_answer_the_forget_question_declines_it_and_is_then_answered(
    app: App, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default("monitor-model", "[SKIP]")
    fake_openai.script("chat-model", "Noted!")
    app.companion.knowledge.add(alice, "Alice loves ramen", category="fact", source="user")
    terminal, out = chat(app, "/forget", "remember also EOF-2", "/forget ramen", "/memory", "/forget", "/quit", "hi")
    await terminal.run()
    await app.companion.tasks.drain()

    printed = out.getvalue()
    declined = f"{NOT_AN_ANSWER}\n{phrasebook.FORGETTING_NOTHING}\n"
    assert printed.count(declined) == 3  # the message, a command, and /quit each closed the question before them
    assert "小祥: Noted!" in printed  # the line was answered as the message it is
    assert any(message.content == "remember also EOF-2" for message in app.history.messages(alice))
    assert "- Alice loves ramen" in printed and "[fact] Alice loves ramen" in printed  # /forget ramen, then /memory
    assert "Alice loves ramen" in [record.content for record in app.companion.knowledge.memories(alice)]
    assert len(fake_openai.requests_for("chat-model")) == 1  # /quit ended the chat: "hi" was not read


async def test_yes_and_no_in_each_accepted_language_answer_the_question_and_nothing_else(
    app: App, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    app.companion.knowledge.add(alice, "Alice loves ramen", category="fact", source="user")
    terminal, out = chat(app, "/forget ramen", "No.", "/forget ramen", "不", "/forget ramen", "", "/forget ramen", "是")
    await terminal.run()

    printed = out.getvalue()
    assert NOT_AN_ANSWER not in printed and printed.count(phrasebook.FORGETTING_NOTHING) == 3
    assert printed.endswith(f"{phrasebook.forgot(1)}\n")
    assert app.companion.knowledge.memories(alice) == []
    assert fake_openai.requests_for("chat-model") == []  # no answer was taken for a message


async def test_quit_ignores_the_words_after_it(app: App, fake_openai: FakeOpenAIServer) -> None:
    terminal, out = chat(app, "/quit now", "hello")
    await terminal.run()
    assert "I don't know the command" not in out.getvalue()
    assert fake_openai.requests_for("chat-model") == []

"""One person across platforms: the terminal, Telegram (PTB against the fake Bot API) and Discord (dpytest, the real
slash-command callbacks) linked by `/link` codes into one memory, on the fake clock."""

from __future__ import annotations

import io
import re
from typing import Any

import discord.ext.test as dpytest
from discord.ext import commands
from telegram.ext import Application

from bot.app import App
from bot.platforms.discord.adapter import CompanionCog
from bot.platforms.discord.views import ForgetQuestion
from bot.platforms.terminal import TerminalChat
from core import phrasebook
from knowledge.forget.privacy_scan import scan_directory
from knowledge.people.links import is_person
from knowledge.records import Scope
from tests.fakes.clock import FakeClock
from tests.fakes.discord import FakeInteraction, press
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import FakeBotAPI
from tests.fakes.telegram_updates import feed

ALICE_TG = {"id": 101, "is_bot": False, "first_name": "Alice"}
CODE = re.compile(r"/link ([2-9A-Z]{6})")
TERMINAL = Scope("xiaoxiang", "cli:alice")
TELEGRAM = Scope("xiaoxiang", "telegram:101")
SECRET = "my locker code is 4471"


def tg_message(text: str, update_id: int) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "message_id": update_id,
        "date": 1_800_000_000 + update_id,
        "chat": {"id": ALICE_TG["id"], "type": "private", "first_name": "Alice"},
        "from": ALICE_TG,
        "text": text,
    }
    if text.startswith("/"):
        payload["entities"] = [{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}]
    return {"update_id": update_id, "message": payload}


async def terminal(app: App, *lines: str) -> str:
    """alice's terminal chat fed `lines`; returns what it printed."""
    pending = list(lines)

    async def read_line(prompt: str) -> str | None:
        return pending.pop(0) if pending else None

    out = io.StringIO()
    await TerminalChat(
        app.companion, persona_id=None, user_name="alice", read_line=read_line, output=out, interactive=False
    ).run()
    return out.getvalue()


def code_in(text: str) -> str:
    found = CODE.search(text)
    assert found is not None, text
    return found[1]


def system_prompt(fake_openai: FakeOpenAIServer) -> str:
    return str(fake_openai.requests_for("chat-model")[-1].messages[0]["content"])


async def test_terminal_telegram_and_discord_become_one_memory_and_forget_together(
    app: App,
    telegram: Application,
    fake_telegram: FakeBotAPI,
    discord_bot: commands.Bot,
    cog: CompanionCog,
    fake_openai: FakeOpenAIServer,
    clock: FakeClock,
) -> None:
    kb = app.knowledge
    fake_openai.set_default("chat-model", "Okay!")
    kb.add(TERMINAL, "Alice has a cat named Mochi", category="fact", source="user")
    kb.add(TERMINAL, f"Alice said {SECRET}", category="fact", source="user")
    kb.add(TELEGRAM, "Alice has a cat named Mochi", category="fact", source="user")  # both knew it
    kb.add(TELEGRAM, "Alice plays the cello", category="fact", source="user")
    await terminal(app, "/timezone Europe/Berlin", "hello from the terminal")
    await feed(telegram, tg_message("/timezone Asia/Tokyo", 1))

    # the terminal asks for a code; Telegram sends it: one person, one memory, the terminal's zone kept (older)
    code = code_in(await terminal(app, "/link"))
    await feed(telegram, tg_message(f"/link {code}", 2))
    answer = fake_telegram.sent_texts()[-1]
    assert "Linked: cli:alice, telegram:101" in answer and "both knew, kept once" in answer
    assert "time zone" in answer and "the account I knew first" in answer
    person = app.companion.scope(None, "telegram:101")
    assert is_person(person.user_id) and person == app.companion.scope(None, "cli:alice")
    contents = sorted(record.content for record in kb.memories(person))
    assert contents == sorted(["Alice has a cat named Mochi", f"Alice said {SECRET}", "Alice plays the cello"])
    assert kb.memories(TERMINAL) == [] and kb.memories(TELEGRAM) == []
    assert app.user_settings.chosen_time_zone(person) == "Europe/Berlin"

    # the next Telegram prompt holds what the terminal knew, and the terminal's past conversation is its history
    await feed(telegram, tg_message("how is my cat Mochi?", 3))
    assert "Alice has a cat named Mochi" in system_prompt(fake_openai)
    assert any(message.content == "hello from the terminal" for message in app.history.messages(person))

    # Telegram asks for a code; Discord's DM sends it: the third identity joins the same person
    clock.advance(minutes=5)
    await feed(telegram, tg_message("/link", 4))
    code = code_in(fake_telegram.sent_texts()[-1])
    alice_dc = dpytest.get_config().members[0]
    dm = await alice_dc.create_dm()
    linking = FakeInteraction(alice_dc, dm)
    await CompanionCog.link.callback(cog, linking, code=code)  # type: ignore[arg-type]
    assert "Linked:" in (linking.log[0].content or "") and linking.log[0].ephemeral
    assert app.companion.scope(None, f"discord:{alice_dc.id}") == person
    await dpytest.message("do you remember my cello?", channel=dm, member=alice_dc)
    assert "Alice plays the cello" in system_prompt(fake_openai)

    listing = FakeInteraction(alice_dc, dm)
    await CompanionCog.memory.callback(cog, listing)  # type: ignore[arg-type]
    assert f"Linked accounts (one memory): cli:alice, telegram:101, discord:{alice_dc.id}" in (
        listing.log[0].content or ""
    )

    # discretion holds across platforms: what was said in private stays out of a Discord server
    assert discord_bot.user is not None
    await dpytest.message(f"<@{discord_bot.user.id}> what do you know about me?", member=alice_dc)
    server_prompt = system_prompt(fake_openai)
    assert "cello" not in server_prompt and "Mochi" not in server_prompt and SECRET not in server_prompt

    # a message held through a database outage at a stop is kept under the identity that said it
    app.companion.keep_for_next_start(make_message(f"also, {SECRET}", user_id="telegram:101"), group=False)
    assert (
        app.settings.storage.data_dir / "held-messages.jsonl"
        in scan_directory(app.settings.storage.data_dir, SECRET).in_files
    )

    # /forget from Discord forgets the person everywhere, the links with it
    asking = FakeInteraction(alice_dc, dm)
    await CompanionCog.forget.callback(cog, asking)  # type: ignore[arg-type]
    confirm = asking.log[0].view
    assert isinstance(confirm, ForgetQuestion)
    await press(confirm, confirm.yes, FakeInteraction(alice_dc, dm))
    await app.companion.tasks.drain()
    assert kb.memories(person) == [] and app.history.messages(person) == []
    assert app.links.people() == {}
    assert app.companion.scope(None, "telegram:101") == TELEGRAM  # a stranger again
    kb.compact()
    report = scan_directory(app.settings.storage.data_dir, SECRET)
    assert report.in_files == {} and report.in_rows == {}, (report.in_files, report.in_rows)


async def test_a_wrong_or_expired_code_links_nothing_and_says_nothing_of_whose_it_was(
    app: App, telegram: Application, fake_telegram: FakeBotAPI, clock: FakeClock
) -> None:
    app.knowledge.add(TERMINAL, "Alice has a cat named Mochi", category="fact", source="user")
    code = code_in(await terminal(app, "/link"))
    wrong = "".join("2" if letter != "2" else "3" for letter in code)

    await feed(telegram, tg_message(f"/link {wrong}", 1))
    clock.advance(minutes=10, seconds=1)
    await feed(telegram, tg_message(f"/link {code}", 2))

    answers = fake_telegram.sent_texts()
    assert answers == [phrasebook.link_refused("unknown")] * 2
    assert not any("alice" in answer.lower() or "Mochi" in answer for answer in answers)
    assert app.links.people() == {}
    assert app.companion.scope(None, "telegram:101") == TELEGRAM
    assert [record.content for record in app.knowledge.memories(TERMINAL)] == ["Alice has a cat named Mochi"]


async def test_unlink_starts_fresh_and_the_memory_stays_with_the_rest(
    app: App, telegram: Application, fake_telegram: FakeBotAPI
) -> None:
    app.knowledge.add(TERMINAL, "Alice has a cat named Mochi", category="fact", source="user")
    code = code_in(await terminal(app, "/link"))
    await feed(telegram, tg_message(f"/link {code}", 1))
    person = app.companion.scope(None, "cli:alice")

    await feed(telegram, tg_message("/unlink", 2))

    assert fake_telegram.sent_texts()[-1] == phrasebook.unlinked(["cli:alice"])
    assert app.companion.scope(None, "telegram:101") == TELEGRAM and app.knowledge.memories(TELEGRAM) == []
    assert [record.content for record in app.knowledge.memories(person)] == ["Alice has a cat named Mochi"]
    assert app.companion.scope(None, "cli:alice") == person
    assert phrasebook.NOT_LINKED in await terminal(app, "/unlink")  # the last identity is the person

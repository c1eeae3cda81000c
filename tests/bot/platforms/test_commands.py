"""One command set for every platform: Telegram, Discord and the terminal offer the same commands, answer them
in the same words, and send each answer where the command set says (`/memory` asked in a group is answered
privately). A forget question is one stored question whatever platform asks it."""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable
from datetime import timedelta

import discord.ext.test as dpytest
import pytest
from telegram.ext import Application, CommandHandler

from bot.app import App
from bot.platforms import terminal
from bot.platforms.commands import (
    CHECKINS_PRIVATE_ONLY,
    COMMANDS,
    EXPIRED,
    FORGET,
    Call,
    ChatCommands,
    Command,
    Visibility,
    help_text,
)
from bot.platforms.discord import adapter as discord_adapter
from bot.platforms.discord.adapter import CompanionCog
from bot.platforms.telegram import adapter as telegram_adapter
from bot.platforms.terminal import TerminalChat
from bot.routing import Place, PlaceRules, Router
from core import phrasebook
from core.types import ConversationRef, UserRef
from knowledge.forget.requests import REQUEST_TTL
from knowledge.records import Scope
from tests.fakes.clock import FakeClock
from tests.fakes.discord import FakeInteraction
from tests.fakes.telegram_server import FakeBotAPI
from tests.fakes.telegram_updates import feed, person, text_update

# A command typed on a platform, and the text its answer shows there.
Typed = Callable[[Command, str], Awaitable[str]]
NAMES = {command.name for command in COMMANDS}


def test_every_platform_offers_the_same_commands(app: App, telegram: Application, cog: CompanionCog) -> None:
    on_telegram = {
        name for handler in telegram.handlers[0] if isinstance(handler, CommandHandler) for name in handler.commands
    }
    assert on_telegram == NAMES | {"start"}  # Telegram's first contact is /start
    assert {command.command for command in telegram_adapter.MENU} == NAMES
    assert {command.name for command in cog.get_app_commands()} == NAMES | {"persona"}  # the operator's, per server
    for help_shown in (telegram_adapter.HELP_TEXT, discord_adapter.HELP_TEXT, terminal.HELP_TEXT):
        assert all(command.help in help_shown for command in COMMANDS)


@pytest.fixture
def on_telegram(telegram: Application, fake_telegram: FakeBotAPI) -> Typed:
    alice = person(101, "Alice")

    async def typed(command: Command, argument: str) -> str:
        await feed(telegram, text_update(f"/{command.name} {argument}".strip(), user=alice))
        return fake_telegram.sent_texts(alice["id"])[-1]

    return typed


@pytest.fixture
def on_discord(cog: CompanionCog) -> Typed:
    async def typed(command: Command, argument: str) -> str:
        alice = dpytest.get_config().members[0]
        asking = FakeInteraction(alice, await alice.create_dm())
        slash = getattr(CompanionCog, command.name)
        await slash.callback(cog, asking, *([argument] if argument else []))
        [answer] = asking.log
        assert answer.ephemeral or command.name == "new"
        return answer.content or ""

    return typed


@pytest.fixture
def on_terminal(app: App) -> Typed:
    async def typed(command: Command, argument: str) -> str:
        lines = [f"/{command.name} {argument}".strip()]

        async def read_line(prompt: str) -> str | None:
            return lines.pop(0) if lines else None

        out = io.StringIO()
        chat = TerminalChat(
            app.companion, persona_id=None, user_name="alice", read_line=read_line, output=out, interactive=False
        )
        await chat.run()
        return out.getvalue().removesuffix("\n")

    return typed


@pytest.fixture(params=["on_telegram", "on_discord", "on_terminal"])
def typed(request: pytest.FixtureRequest) -> Typed:
    """A command typed on each platform in turn."""
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


async def test_a_command_is_answered_in_the_same_words_on_every_platform(typed: Typed) -> None:
    by_name = {command.name: command for command in COMMANDS}
    assert await typed(by_name["timezone"], "Mars/Base") == phrasebook.unknown_time_zone("Mars/Base")
    assert await typed(by_name["share"], "") == phrasebook.sharing_status(False)
    assert await typed(by_name["checkins"], "") == phrasebook.checkins_status(False)
    assert await typed(FORGET, "sailing") == phrasebook.nothing_about("sailing")
    assert (await typed(by_name["memory"], "")).startswith(phrasebook.NOTHING_REMEMBERED)
    help_shown = await typed(by_name["help"], "")
    assert all(command.help in help_shown for command in COMMANDS)


# --- what the command set decides, whatever the platform ------------------------------------------------

ALICE = UserRef("chat", "101")
DM = Place(ConversationRef("chat", "dm", "101"))
GROUP = Place(ConversationRef("chat", "group", "-5"), ids=(-5,), private=False)


def commands_of(app: App, *, whispers: bool = False, rules: PlaceRules | None = None) -> ChatCommands:
    router = Router(rules or PlaceRules(), None, "xiaoxiang")
    return ChatCommands(app.companion, router, help=help_text("Talk to me."), whispers=whispers)


async def test_what_is_private_is_answered_privately_even_when_asked_in_a_group(app: App) -> None:
    commands = commands_of(app)
    for command in ("memory", "share", "timezone"):
        reply = await commands.run(command, Call(ALICE, "Alice", GROUP))
        assert reply is not None and reply.visibility is Visibility.PRIVATE
    greeting = await commands.run("new", Call(ALICE, "Alice", GROUP))
    assert greeting is not None and greeting.visibility is Visibility.PUBLIC


async def test_checkins_belong_to_the_private_chat(app: App) -> None:
    asked_in_group = await commands_of(app).run("checkins", Call(ALICE, "Alice", GROUP, "on"))
    assert asked_in_group is not None and asked_in_group.text == CHECKINS_PRIVATE_ONLY
    assert app.companion.user_settings.chosen_checkins(Scope("xiaoxiang", "chat:101")) is None  # nothing changed
    # a platform that can answer the caller alone in a group (Discord) switches them there
    whispered = await commands_of(app, whispers=True).run("checkins", Call(ALICE, "Alice", GROUP, "on"))
    assert whispered is not None and whispered.text == phrasebook.checkins_switched(True)


async def test_a_refusal_is_told_to_the_caller_alone_or_not_at_all(app: App) -> None:
    only_bob = PlaceRules(allowed_users=[202])
    assert await commands_of(app, rules=only_bob).run("new", Call(ALICE, "Alice", GROUP)) is None
    for whispers, place in ((False, DM), (True, GROUP)):
        refused = await commands_of(app, rules=only_bob, whispers=whispers).run("new", Call(ALICE, "Alice", place))
        assert refused is not None and refused.text == phrasebook.NOT_ALLOWED


async def test_a_forget_question_names_the_caller_only_where_others_read_it(app: App) -> None:
    in_group = await commands_of(app).run("forget", Call(ALICE, "Alice", GROUP))
    in_private = await commands_of(app).run("forget", Call(ALICE, "Alice", DM))
    assert in_group is not None and in_group.question is not None and in_private is not None
    assert in_group.question.text == phrasebook.forget_everything_question("Alice")
    assert in_private.question is not None and in_private.question.text == phrasebook.forget_everything_question()


async def test_a_forget_question_is_answered_once_by_its_owner_within_the_hour(app: App, clock: FakeClock) -> None:
    commands = commands_of(app)
    alice = Scope("xiaoxiang", str(ALICE))
    for fact in ("Alice's ex is called Tom", "Tom still writes to Alice", "Alice loves ramen"):
        app.companion.knowledge.add(alice, fact, category="fact", source="user")
    asked = await commands.run("forget", Call(ALICE, "Alice", DM, "Tom"))
    assert asked is not None and asked.question is not None
    assert asked.visibility is Visibility.PRIVATE and "Alice's ex is called Tom" in asked.text
    yes, no = asked.question.yes.data, asked.question.no.data
    assert not commands.owns(yes, UserRef("chat", "202")) and commands.owns(yes, ALICE)

    clock.advance(seconds=(REQUEST_TTL + timedelta(minutes=1)).total_seconds())
    assert await commands.answer(yes, Call(ALICE, "Alice", DM)) == EXPIRED
    assert len(app.companion.knowledge.memories(alice)) == 3  # an expired question deletes nothing

    asked = await commands.run("forget", Call(ALICE, "Alice", DM, "Tom"))
    assert asked is not None and asked.question is not None
    yes = asked.question.yes.data
    assert await commands.answer(yes, Call(ALICE, "Alice", GROUP)) == phrasebook.forgot(2)  # from any chat
    assert await commands.answer(yes, Call(ALICE, "Alice", DM)) == EXPIRED  # an answer is taken once
    assert [record.content for record in app.companion.knowledge.memories(alice)] == ["Alice loves ramen"]
    assert await commands.answer(no, Call(ALICE, "Alice", DM)) == phrasebook.FORGETTING_NOTHING


async def test_forgetting_everything_takes_the_open_questions_with_it(app: App) -> None:
    commands = commands_of(app)
    alice = Scope("xiaoxiang", str(ALICE))
    app.companion.knowledge.add(alice, "Alice's ex is called Tom", category="fact", source="user")
    asked = await commands.run("forget", Call(ALICE, "Alice", DM, "Tom"))
    everything = await commands.run("forget", Call(ALICE, "Alice", DM))
    assert asked is not None and asked.question is not None and everything is not None and everything.question
    assert (await commands.answer(everything.question.yes.data, Call(ALICE, "Alice", DM))).startswith("Done.")
    assert await commands.answer(asked.question.yes.data, Call(ALICE, "Alice", DM)) == EXPIRED

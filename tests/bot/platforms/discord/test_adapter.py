"""The Discord adapter: the real discord.py client under dpytest, and the real slash-command callbacks."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from pathlib import Path
from typing import Any

import discord
import discord.ext.test as dpytest
import pytest
from discord.ext import commands

from bot.app import App, build_app
from bot.config import ConfigError, DiscordSettings, Settings
from bot.platforms.commands import EXPIRED, NOT_YOUR_BUTTON
from bot.platforms.discord.adapter import ADMINS_ONLY, CompanionCog, build_discord_bot
from bot.platforms.discord.reply import EDIT_PACE
from bot.platforms.discord.views import ForgetQuestion, MemoryPages
from bot.platforms.render import DISCORD_LIMIT, split_message
from bot.routing import PersonaChoices, PlaceRules
from core import phrasebook
from core.errors import UserFacingError
from core.phrasebook import NOT_ALLOWED
from knowledge.conversations.spool import MessageSpool
from knowledge.records import Scope
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock, FakeTimer
from tests.fakes.discord import (
    FakeInteraction,
    HttpLog,
    configure,
    edit,
    message_with_file,
    press,
    press_custom_id,
    record_http,
    reply_to,
    started_bot,
)
from tests.fakes.images import describing, photo_bytes
from tests.fakes.openai_server import FakeCut, FakeOpenAIServer
from tests.fakes.personas import personas_with_a_tutor

NO_PINGS = {"parse": []}  # discord.AllowedMentions.none(): not @everyone, not roles, not users


@pytest.fixture
def http(discord_bot: commands.Bot) -> HttpLog:
    return record_http(discord_bot)


def member(index: int) -> discord.Member:
    return dpytest.get_config().members[index]


def channel() -> discord.TextChannel:
    return dpytest.get_config().channels[0]


def scope_of(user: discord.abc.User) -> Scope:
    return Scope("xiaoxiang", f"discord:{user.id}")


def mention(bot: commands.Bot) -> str:
    assert bot.user is not None
    return f"<@{bot.user.id}>"


async def test_a_direct_message_is_answered_after_typing_and_pings_nobody(
    discord_bot: commands.Bot, http: HttpLog, app: App, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "Hello @everyone and <@&123>!")
    alice = member(0)
    dm = await alice.create_dm()
    await dpytest.message("hi there", channel=dm, member=alice)
    assert http.final_texts() == ["Hello @everyone and <@&123>!"]
    [sent] = http.sent()
    assert sent["allowed_mentions"] == NO_PINGS
    # typing first, then the reply; whether it also grows by edits depends on how its chunks arrive
    kinds = [kind for kind, _ in http.calls]
    assert kinds[:2] == ["typing", "send"] and set(kinds[2:]) <= {"edit"}
    assert all(edit.get("allowed_mentions", NO_PINGS) == NO_PINGS for edit in http.edits())
    assert fake_openai.requests_for("chat-model")[0].messages[-1]["content"] == "hi there"
    [row, _reply] = app.working_memory.window("xiaoxiang", f"discord:dm:{dm.id}")
    assert (row.user_id, row.speaker_name) == (f"discord:{alice.id}", "Alice")


async def test_a_typing_indicator_that_fails_does_not_cost_the_reply(
    discord_bot: commands.Bot, http: HttpLog, fake_openai: FakeOpenAIServer
) -> None:
    http.failing.add("typing")  # under saturation Discord may answer it with a gateway error
    fake_openai.script("chat-model", "Hello, Alice!")
    alice = member(0)
    await dpytest.message("hi there", channel=await alice.create_dm(), member=alice)
    assert http.calls[0][0] == "typing"  # it was tried first
    assert http.final_texts() == ["Hello, Alice!"]


async def test_server_messages_need_a_mention_or_a_reply(
    discord_bot: commands.Bot, http: HttpLog, app: App, fake_openai: FakeOpenAIServer
) -> None:
    await dpytest.message("just chatting among ourselves", member=member(0))
    assert http.sent() == [] and fake_openai.requests_for("chat-model") == []

    fake_openai.script("chat-model", "Yes, Alice?", "Still here, Bob.")
    await dpytest.message(f"{mention(discord_bot)} are you there?", member=member(0))
    ours = dpytest.get_message()
    await reply_to(ours, "and me?", member(1))
    assert http.final_texts() == ["Yes, Alice?", "Still here, Bob."]
    first = http.sent()[0]
    assert first["allowed_mentions"] == {**NO_PINGS, "replied_user": False}  # a reply, without a ping
    assert "message_reference" in first

    rows = app.working_memory.window("xiaoxiang", f"discord:channel:{channel().id}")
    people = [(row.speaker_name, row.content) for row in rows if row.role == "user"]
    # the mention stripped, the speaker kept (by the name the server shows)
    assert people == [(member(0).display_name, "are you there?"), (member(1).display_name, "and me?")]


async def test_every_message_channels_are_answered_without_a_mention(
    cog: CompanionCog, http: HttpLog, fake_openai: FakeOpenAIServer
) -> None:
    cog.router.rules = PlaceRules(every_message=[channel().id])
    fake_openai.script("chat-model", "I'm listening.")
    await dpytest.message("nobody mentioned you", member=member(0))
    assert http.final_texts() == ["I'm listening."]


async def test_bots_are_ignored(discord_bot: commands.Bot, http: HttpLog, fake_openai: FakeOpenAIServer) -> None:
    other = dpytest.get_config().members[1]
    other._user.bot = True  # type: ignore[attr-defined]
    await dpytest.message(f"{mention(discord_bot)} beep", member=other)
    assert http.sent() == [] and fake_openai.requests_for("chat-model") == []


async def test_a_long_reply_is_split_at_the_discord_limit(
    discord_bot: commands.Bot, http: HttpLog, fake_openai: FakeOpenAIServer
) -> None:
    long_reply = "\n".join(f"Line {i}: " + "la " * 40 for i in range(60))  # about 7,700 characters
    fake_openai.script("chat-model", long_reply)
    await dpytest.message(f"{mention(discord_bot)} sing", member=member(0))
    texts = http.final_texts()
    assert len(texts) >= 4
    assert all(len(text) <= DISCORD_LIMIT for text in texts)
    assert "\n".join(texts).split() == long_reply.split()
    assert all(payload["allowed_mentions"]["parse"] == [] for payload in http.sent())


async def test_attachments_alone_get_a_clear_answer_without_an_llm_call(
    discord_bot: commands.Bot, http: HttpLog, fake_openai: FakeOpenAIServer, tmp_path: Any
) -> None:
    picture = tmp_path / "cat.png"
    picture.write_bytes(b"not really a png")
    alice = member(0)
    await dpytest.message("", channel=await alice.create_dm(), member=alice, attachments=[str(picture)])
    assert http.texts() == [phrasebook.NOT_TEXT]
    assert fake_openai.requests_for("chat-model") == []


async def test_allow_lists_keep_strangers_out(
    app: App, discord_bot: commands.Bot, http: HttpLog, cog: CompanionCog, fake_openai: FakeOpenAIServer
) -> None:
    cog.router.rules = PlaceRules(allowed_users=[member(1).id])  # only Bob
    alice = member(0)
    await dpytest.message("hello?", channel=await alice.create_dm(), member=alice)
    await dpytest.message(f"{mention(discord_bot)} hello?", member=alice)
    assert http.texts() == [NOT_ALLOWED]  # told once in private, silent in the server
    assert fake_openai.requests_for("chat-model") == []

    cog.router.rules = PlaceRules(allowed_places=[12345])  # another server only
    fake_openai.script("chat-model", "hi")
    await dpytest.message(f"{mention(discord_bot)} hello?", member=alice)
    assert http.texts() == [NOT_ALLOWED]
    await dpytest.message("hello?", channel=await alice.create_dm(), member=alice)  # DMs stay open unless closed
    assert http.texts() == [NOT_ALLOWED, "hi"]


async def test_edits_and_deletes_change_what_the_conversation_remembers(
    discord_bot: commands.Bot, app: App, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "Okay!", "Sure.")
    await dpytest.message(f"{mention(discord_bot)} meet at 5?", member=member(0))
    alice_message = next(message for message in discord_bot.cached_messages if message.content.endswith("meet at 5?"))
    await edit(alice_message, f"{mention(discord_bot)} meet at 6?")
    conversation = f"discord:channel:{channel().id}"
    assert [row.content for row in app.working_memory.window("xiaoxiang", conversation)] == ["meet at 6?", "Okay!"]
    await dpytest.message(f"{mention(discord_bot)} my pin is 1234", member=member(0))
    pin = next(message for message in discord_bot.cached_messages if message.content.endswith("1234"))
    dpytest.back.delete_message(pin)
    await dpytest.run_all_events()
    assert "my pin is 1234" not in [row.content for row in app.working_memory.window("xiaoxiang", conversation)]


async def test_memory_is_ephemeral_paged_and_only_the_callers(cog: CompanionCog, kb: Any) -> None:
    alice, bob = member(0), member(1)
    for index in range(40):
        kb.add(scope_of(alice), f"Alice fact number {index}: " + "detail " * 10, category="fact", source="user")
    kb.add(scope_of(bob), "Bob plays the cello", category="fact", source="user")

    asking = FakeInteraction(alice, channel())
    await CompanionCog.memory.callback(cog, asking)  # type: ignore[arg-type]
    [first] = asking.log
    assert first.ephemeral and "page 1 of" in (first.content or "")
    assert "cello" not in (first.content or "")
    pages = first.view
    assert isinstance(pages, MemoryPages) and len(pages.pages) >= 2
    assert all(len(page) <= DISCORD_LIMIT for page in pages.pages)

    clicking = FakeInteraction(alice, channel())
    await press(pages, pages.next, clicking)
    assert "page 2 of" in (clicking.log[0].content or "")
    bob_clicks = FakeInteraction(bob, channel())
    await press(pages, pages.next, bob_clicks)
    assert bob_clicks.log[0].content == NOT_YOUR_BUTTON and bob_clicks.log[0].ephemeral

    bob_asks = FakeInteraction(bob, channel())
    await CompanionCog.memory.callback(cog, bob_asks)  # type: ignore[arg-type]
    assert "Bob plays the cello" in (bob_asks.log[0].content or "") and "Alice" not in (bob_asks.log[0].content or "")


async def test_forget_asks_first_and_then_deletes_only_the_callers_memories(cog: CompanionCog, kb: Any) -> None:
    alice, bob = member(0), member(1)
    kb.add(scope_of(alice), "Alice loves ramen", category="fact", source="user")
    kb.add(scope_of(bob), "Bob plays the cello", category="fact", source="user")

    asking = FakeInteraction(alice, channel())
    await CompanionCog.forget.callback(cog, asking)  # type: ignore[arg-type]
    [question] = asking.log
    assert question.ephemeral and "forget everything" in (question.content or "")
    confirm = question.view
    assert isinstance(confirm, ForgetQuestion)

    bob_presses = FakeInteraction(bob, channel())
    await press(confirm, confirm.yes, bob_presses)
    assert bob_presses.log[0].content == NOT_YOUR_BUTTON
    assert [record.content for record in kb.memories(scope_of(alice))] == ["Alice loves ramen"]

    alice_presses = FakeInteraction(alice, channel())
    await press(confirm, confirm.yes, alice_presses)
    assert (alice_presses.log[-1].content or "").startswith("Done. I forgot 1 memory")
    assert kb.memories(scope_of(alice)) == [] and kb.search(scope_of(alice), "ramen") == []
    assert [record.content for record in kb.memories(scope_of(bob))] == ["Bob plays the cello"]


async def test_forget_what_shows_the_matches_and_deletes_only_them(cog: CompanionCog, kb: Any) -> None:
    alice = member(0)
    kb.add(scope_of(alice), "Alice's ex is called Tom", category="fact", source="user")
    kb.add(scope_of(alice), "Alice loves ramen", category="fact", source="user")
    asking = FakeInteraction(alice, channel())
    await CompanionCog.forget.callback(cog, asking, what="Tom")  # type: ignore[arg-type]
    [question] = asking.log
    assert "Alice's ex is called Tom" in (question.content or "") and "ramen" not in (question.content or "")
    confirm = question.view
    assert isinstance(confirm, ForgetQuestion)
    await press(confirm, confirm.yes, FakeInteraction(alice, channel()))
    assert [record.content for record in kb.memories(scope_of(alice))] == ["Alice loves ramen"]

    nothing = FakeInteraction(alice, channel())
    await CompanionCog.forget.callback(cog, nothing, what="sailing")  # type: ignore[arg-type]
    assert nothing.log[0].content == "I don't remember anything about 'sailing'."


async def test_persona_is_for_server_managers_and_changes_who_answers(
    discord_bot: commands.Bot, cog: CompanionCog, http: HttpLog, fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    personas_with_a_tutor(cog.companion.personas.directory)  # the operator's own persona directory
    alice = member(0)
    refused = FakeInteraction(alice, channel(), manage_guild=False)
    await CompanionCog.persona.callback(cog, refused, persona="tutor")  # type: ignore[arg-type]
    assert refused.log[0].content == ADMINS_ONLY

    with pytest.raises(UserFacingError, match="unknown persona 'nobody'"):
        await CompanionCog.persona.callback(cog, FakeInteraction(alice, channel(), manage_guild=True), persona="nobody")  # type: ignore[arg-type]

    chosen = FakeInteraction(alice, channel(), manage_guild=True)
    await CompanionCog.persona.callback(cog, chosen, persona="tutor")  # type: ignore[arg-type]
    assert chosen.log[0].content == "From now on Professor Owl (tutor) answers in this channel."
    fake_openai.script("chat-model", "Hoot.")
    await dpytest.message(f"{mention(discord_bot)} who are you?", member=alice)
    assert "Professor Owl" in fake_openai.requests_for("chat-model")[-1].messages[0]["content"]
    # the choice outlives the process: a new router reads it back
    assert cog.router.choices.get([channel().id]) == "tutor"
    assert PersonaChoices(cog.router.choices.path).get([channel().id]) == "tutor"

    back = FakeInteraction(alice, channel(), manage_guild=True)
    await CompanionCog.persona.callback(cog, back, persona="default")  # type: ignore[arg-type]
    assert "(xiaoxiang)" in (back.log[0].content or "")


async def test_a_configured_persona_must_exist(app: App) -> None:
    app.settings.discord = DiscordSettings(personas={42: "nobody"})
    with pytest.raises(ConfigError, match="unknown persona 'nobody'"):
        build_discord_bot(app.platform("discord"))


async def test_in_a_shared_channel_one_users_memories_never_reach_anothers_prompt(
    discord_bot: commands.Bot, kb: Any, fake_openai: FakeOpenAIServer
) -> None:
    alice, bob = member(0), member(1)
    here = f"discord:channel:{channel().id}"  # both were learned in this channel, so it may hear of them
    kb.add(scope_of(alice), "Alice loves ramen", category="fact", source="user", learned_in=here)
    kb.add(scope_of(bob), "Bob plays the cello", category="fact", source="user", learned_in=here)
    fake_openai.script("chat-model", "Noted!", "Hi Bob")
    await dpytest.message(f"{mention(discord_bot)} I had ramen today", member=alice)
    await dpytest.message(f"{mention(discord_bot)} what do I like to eat? ramen?", member=bob)
    alice_prompt, bob_prompt = (request.messages[0]["content"] for request in fake_openai.requests_for("chat-model"))
    assert "Alice loves ramen" in alice_prompt and "Bob plays the cello" not in alice_prompt
    assert "Alice loves ramen" not in bob_prompt and "Bob plays the cello" in bob_prompt


async def test_a_message_event_replayed_after_a_reconnect_is_answered_once(
    discord_bot: commands.Bot, app: App, http: HttpLog, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "Noted!", "Second answer")
    await dpytest.message(f"{mention(discord_bot)} my locker code is 4711", member=member(0))
    sent = next(message for message in discord_bot.cached_messages if message.content.endswith("4711"))
    discord_bot.dispatch("message", sent)  # the gateway delivers the same MESSAGE_CREATE again
    await dpytest.run_all_events()
    await app.companion.tasks.drain()
    conversation = f"discord:channel:{channel().id}"
    assert [row.content for row in app.working_memory.window("xiaoxiang", conversation)] == [
        "my locker code is 4711",
        "Noted!",
    ]
    assert http.final_texts() == ["Noted!"]
    assert len(fake_openai.requests_for("chat-model")) == 1


async def test_messages_of_one_channel_are_answered_in_order_even_when_they_arrive_together(
    discord_bot: commands.Bot, cog: CompanionCog, http: HttpLog, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.set_delay("chat-model", 0.2)
    fake_openai.script("chat-model", "First!", "Second!")
    for text in ("one", "two"):  # both dispatched before either is handled
        dpytest.back.make_message(f"{mention(discord_bot)} {text}", member(0), channel())
    await dpytest.run_all_events()
    assert http.final_texts() == ["First!", "Second!"]
    second_prompt = [message["content"] for message in fake_openai.requests_for("chat-model")[1].messages]
    assert "First!" in second_prompt  # the second turn was built after the first was answered
    assert cog.pipeline.order is not None and len(cog.pipeline.order) == 0  # nothing kept once the channel is quiet


async def test_at_a_stop_a_message_waiting_behind_a_hung_turn_is_kept_for_the_next_start(
    discord_bot: commands.Bot, app: App, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.hang("chat-model")
    for text in ("one, answered by a model that hangs", "two, waiting for its turn"):
        dpytest.back.make_message(f"{mention(discord_bot)} {text}", member(0), channel())
    while not fake_openai.requests_for("chat-model"):
        await asyncio.sleep(0.01)

    with contextlib.suppress(AttributeError):  # dpytest's bot has no gateway socket for close() to shut
        await discord_bot.close()
    kept = MessageSpool(app.settings.storage.data_dir).messages()
    assert [message.text for message in kept] == ["two, waiting for its turn"]


async def test_a_message_deleted_or_edited_while_it_waits_for_its_turn_is_withdrawn_or_stored_as_edited(
    discord_bot: commands.Bot, app: App, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.set_default("chat-model", "Okay!")
    fake_openai.set_delay("chat-model", 0.3)  # each reply takes a while (under the tests' timeout): the others wait
    for text in ("one, answered slowly", "my pin is 1234", "meet at 5?"):
        dpytest.back.make_message(f"{mention(discord_bot)} {text}", member(0), channel())
    while not fake_openai.requests_for("chat-model"):
        await asyncio.sleep(0.01)
    pin, meeting = (
        next(message for message in discord_bot.cached_messages if message.content.endswith(ending))
        for ending in ("1234", "meet at 5?")
    )
    dpytest.back.delete_message(pin)
    await edit(meeting, f"{mention(discord_bot)} meet at 6?")
    await dpytest.run_all_events()
    while len(fake_openai.requests_for("chat-model")) < 2:
        await asyncio.sleep(0.01)
    assert await asyncio.to_thread(fake_openai.requests_for("chat-model")[1].finished.wait, 10)
    await dpytest.run_all_events()

    conversation = f"discord:channel:{channel().id}"
    said = [row.content for row in app.working_memory.window("xiaoxiang", conversation) if row.role == "user"]
    assert said == ["one, answered slowly", "meet at 6?"]
    assert all("1234" not in str(request.messages) for request in fake_openai.requests_for("chat-model"))


async def test_share_is_ephemeral_and_lets_one_memory_come_up_in_the_server(
    discord_bot: commands.Bot, cog: CompanionCog, kb: Any, fake_openai: FakeOpenAIServer
) -> None:
    alice, bob = member(0), member(1)
    sister = kb.add(scope_of(alice), "Alice's sister is called Mei", category="fact", source="user")
    kb.add(scope_of(alice), "Alice's passport number is ZQX-4471", category="fact", source="user")
    fake_openai.set_default("chat-model", "Hm?")

    async def server_prompt() -> str:
        await dpytest.message(f"{mention(discord_bot)} who is my sister, and my passport?", member=alice)
        return str(fake_openai.requests_for("chat-model")[-1].messages[0]["content"])

    prompt = await server_prompt()  # both were told in private
    assert "Mei" not in prompt and "ZQX-4471" not in prompt

    bob_tries = FakeInteraction(bob, channel())
    await CompanionCog.share.callback(cog, bob_tries, setting=sister.id)  # type: ignore[arg-type]
    assert bob_tries.log[0].content == phrasebook.no_such_memory(sister.id)
    sharing = FakeInteraction(alice, channel())
    await CompanionCog.share.callback(cog, sharing, setting=sister.id)  # type: ignore[arg-type]
    [answer] = sharing.log
    assert answer.ephemeral and answer.content == phrasebook.memory_sharing(sister, True)
    prompt = await server_prompt()
    assert "Alice's sister is called Mei" in prompt and "ZQX-4471" not in prompt

    everything = FakeInteraction(alice, channel())
    await CompanionCog.share.callback(cog, everything, setting="on")  # type: ignore[arg-type]
    assert everything.log[0].content == phrasebook.sharing_switched(True) and everything.log[0].ephemeral
    assert "ZQX-4471" in await server_prompt()


async def test_timezone_is_an_ephemeral_command_that_refuses_an_unknown_zone(cog: CompanionCog) -> None:
    alice = member(0)
    unknown = FakeInteraction(alice, channel())
    await CompanionCog.timezone.callback(cog, unknown, zone="Mars/Base")  # type: ignore[arg-type]
    assert unknown.log[0].content == phrasebook.unknown_time_zone("Mars/Base") and unknown.log[0].ephemeral
    setting = FakeInteraction(alice, channel())
    await CompanionCog.timezone.callback(cog, setting, zone="america/new_york")  # type: ignore[arg-type]
    assert setting.log[0].content.startswith("Okay: your time zone is now America/New_York")
    asking = FakeInteraction(alice, channel())
    await CompanionCog.timezone.callback(cog, asking)  # type: ignore[arg-type]
    assert asking.log[0].content.startswith("Your time zone is America/New_York: it is") and asking.log[0].ephemeral
    other = FakeInteraction(member(1), channel())
    await CompanionCog.timezone.callback(cog, other)  # type: ignore[arg-type]
    assert not other.log[0].content.startswith("Your time zone is America/New_York")  # one user's choice is theirs


# --- replies that grow while the model writes them ----------------------------------------------------

STORY = " ".join(f"word{index}" for index in range(80))


def watch_updates(http: HttpLog, fake_openai: FakeOpenAIServer, timer: FakeTimer) -> tuple[list[bool], list[float]]:
    """Whether the model was still writing when the first words reached Discord, and when each send or edit came."""
    early: list[bool] = []
    times: list[float] = []

    def on_call(kind: str, payload: Any) -> None:
        if kind == "typing":
            return
        if not early:
            [request] = [request for request in fake_openai.requests_for("chat-model") if request.stream]
            early.append(not request.finished.is_set())
        times.append(timer.now())

    http.listeners.append(on_call)
    return early, times


async def test_a_reply_is_sent_early_then_edited_no_faster_than_discord_allows_and_pings_nobody(
    discord_bot: commands.Bot, http: HttpLog, app: App, fake_openai: FakeOpenAIServer, timer: FakeTimer
) -> None:
    fake_openai.script("chat-model", f"@everyone listen: {STORY}")
    fake_openai.chunk_delay = 0.002
    early, times = watch_updates(http, fake_openai, timer)
    await dpytest.message(f"{mention(discord_bot)} tell us a story", member=member(0))

    assert early == [True]  # the first words were on Discord before the model had finished
    [sent] = http.sent()
    edits = http.edits()
    assert edits and all(edit["message_id"] == http.sent_ids[0] for edit in edits)
    assert sent["allowed_mentions"] == {**NO_PINGS, "replied_user": False}
    assert all(edit["allowed_mentions"] == NO_PINGS for edit in edits)  # no edit can ping anyone either
    *paced, _final = times  # the final text goes as soon as the model is done
    assert all(later - earlier >= EDIT_PACE for earlier, later in itertools.pairwise(paced))
    assert all(len([at for at in times if start <= at < start + 5]) <= 5 for start in times)  # 5 per 5 s
    stored = app.working_memory.window("xiaoxiang", f"discord:channel:{channel().id}")[-1].content
    assert http.final_texts() == [f"@everyone listen: {STORY}"] == [stored]


async def test_a_reply_passing_the_limit_while_growing_goes_on_in_a_new_message(
    discord_bot: commands.Bot, http: HttpLog, app: App, fake_openai: FakeOpenAIServer
) -> None:
    long_reply = "\n".join(f"Line {index}: " + "la " * 40 for index in range(60))
    fake_openai.script("chat-model", long_reply)
    fake_openai.chunk_size, fake_openai.chunk_delay = 64, 0.001
    try:
        await dpytest.message(f"{mention(discord_bot)} sing", member=member(0))
    finally:
        fake_openai.chunk_size = FakeOpenAIServer.chunk_size
    stored = app.working_memory.window("xiaoxiang", f"discord:channel:{channel().id}")[-1].content
    assert http.final_texts() == split_message(stored, DISCORD_LIMIT)
    assert all(len(edit["content"]) <= DISCORD_LIMIT for edit in http.edits())


async def test_a_model_failing_mid_reply_leaves_what_it_said_and_the_apology(
    discord_bot: commands.Bot, http: HttpLog, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", FakeCut("Your cat, I think, is", chunks=6))
    await dpytest.message(f"{mention(discord_bot)} about my cat", member=member(0))
    [text] = http.final_texts()
    assert text.startswith("Your cat, I think, is\n\nSorry, I can't think straight") and "saved" in text


class TestStreamingOff:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return settings.changed(discord={"streaming": False})  # COMPANION_DISCORD_STREAMING=false

    async def test_a_reply_arrives_whole(
        self, discord_bot: commands.Bot, http: HttpLog, fake_openai: FakeOpenAIServer
    ) -> None:
        fake_openai.script("chat-model", STORY)
        fake_openai.chunk_delay = 0.002
        await dpytest.message(f"{mention(discord_bot)} a story", member=member(0))
        assert http.edits() == [] and http.texts() == [STORY]


# --- images and voice messages -------------------------------------------------------------------------


class TestImages:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        """A chat model that sees images, and a low limit on their size."""
        return settings.changed(llm={"vision": True}, image_max_bytes=200_000)

    async def test_an_image_attachment_reaches_a_vision_model_and_is_remembered_as_its_description(
        self, discord_bot: commands.Bot, http: HttpLog, app: App, fake_openai: FakeOpenAIServer, tmp_path: Path
    ) -> None:
        picture = tmp_path / "mochi.jpg"
        picture.write_bytes(photo_bytes(1600, 1200))
        fake_openai.set_default("chat-model", describing("So fluffy!", "A grey cat on a blue sofa."))
        alice = member(0)
        dm = await alice.create_dm()
        await message_with_file("meet Mochi", picture, channel=dm, member=alice, content_type="image/jpeg")

        [reply_request] = [request for request in fake_openai.requests_for("chat-model") if request.stream]
        text, image = reply_request.messages[-1]["content"]
        assert text == {"type": "text", "text": "[photo] meet Mochi"}
        assert image["image_url"]["url"].startswith("data:image/jpeg;base64,")
        assert http.final_texts() == ["So fluffy!"]
        said = app.working_memory.window("xiaoxiang", f"discord:dm:{dm.id}")[0]
        assert said.content == "[photo: A grey cat on a blue sofa.] meet Mochi"

    async def test_an_image_beyond_the_operators_limit_is_refused_before_it_is_read(
        self, discord_bot: commands.Bot, http: HttpLog, fake_openai: FakeOpenAIServer, tmp_path: Path
    ) -> None:
        picture = tmp_path / "huge.png"
        picture.write_bytes(b"\x89PNG" + b"\0" * 200_000)
        alice = member(0)
        await message_with_file("", picture, channel=await alice.create_dm(), member=alice, content_type="image/png")
        assert http.texts() == [phrasebook.image_too_large(picture.stat().st_size, 200_000)]
        assert fake_openai.requests_for("chat-model") == []

    async def test_a_voice_message_gets_a_clear_answer(
        self, discord_bot: commands.Bot, http: HttpLog, fake_openai: FakeOpenAIServer, tmp_path: Path
    ) -> None:
        voice = tmp_path / "voice-message.ogg"
        voice.write_bytes(b"OggS")
        alice = member(0)
        dm = await alice.create_dm()
        await message_with_file("", voice, channel=dm, member=alice, content_type="audio/ogg", voice=True)
        assert http.texts() == [phrasebook.CANT_HEAR_VOICE]
        assert fake_openai.requests_for("chat-model") == []


async def test_without_vision_an_image_gets_a_clear_answer_and_its_caption_is_answered(
    discord_bot: commands.Bot, http: HttpLog, fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    picture = tmp_path / "mochi.jpg"
    picture.write_bytes(photo_bytes(400, 300))
    fake_openai.script("chat-model", "Mochi is a lovely name!")
    alice = member(0)
    dm = await alice.create_dm()
    await message_with_file("meet Mochi", picture, channel=dm, member=alice, content_type="image/jpeg")
    assert http.final_texts() == [f"{phrasebook.CANT_SEE_IMAGES_READ_CAPTION}\n\nMochi is a lovely name!"]


async def test_checkins_turned_on_in_a_dm_go_to_that_dm_once_without_pinging_anyone(
    cog: CompanionCog, http: HttpLog, app: App, fake_openai: FakeOpenAIServer, clock: FakeClock
) -> None:
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    alice = member(0)
    dm = await alice.create_dm()
    asked_in_server = FakeInteraction(alice, channel())
    await CompanionCog.checkins.callback(cog, asked_in_server)  # type: ignore[arg-type]
    assert asked_in_server.log[0].content == phrasebook.checkins_status(False) and asked_in_server.log[0].ephemeral
    turning_on = FakeInteraction(alice, dm)
    await CompanionCog.checkins.callback(cog, turning_on, setting="on")  # type: ignore[arg-type]
    assert turning_on.log[0].content == phrasebook.checkins_switched(True)
    monday = datetime(2026, 1, 5, 10, tzinfo=ZoneInfo("UTC"))
    app.companion.knowledge.add(scope_of(alice), "Alice has an exam", category="fact", source="user", about=monday)
    fake_openai.set_default("chat-model", "How was the exam, @everyone?")
    while clock.now() < monday + timedelta(days=1):
        clock.advance(hours=1)
        await app.companion.checkins.plan()
        await app.companion.tasks.drain()
    assert http.final_texts() == ["How was the exam, @everyone?"]
    assert http.sent()[0]["allowed_mentions"] == NO_PINGS
    [message] = [each for each in app.working_memory.window("xiaoxiang", f"discord:dm:{dm.id}")]
    assert message.role == "assistant" and message.content == "How was the exam, @everyone?"


async def test_a_user_whose_dms_are_closed_has_checkins_turned_off_with_the_reason_kept(
    cog: CompanionCog, http: HttpLog, app: App, clock: FakeClock
) -> None:
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    alice = member(0)
    dm = await alice.create_dm()
    await CompanionCog.checkins.callback(cog, FakeInteraction(alice, dm), setting="on")  # type: ignore[arg-type]
    monday = datetime(2026, 1, 5, 10, tzinfo=ZoneInfo("UTC"))
    app.companion.knowledge.add(scope_of(alice), "Alice has an exam", category="fact", source="user", about=monday)
    http.failing.add("send")
    while clock.now() < monday + timedelta(days=1):
        clock.advance(hours=1)
        await app.companion.checkins.plan()
        await app.companion.tasks.drain()
    assert app.companion.user_settings.chosen_checkins(scope_of(alice)) is False
    [failed] = [
        each for each in app.journal.checkins.listing(since=monday - timedelta(days=1)) if each.state == "failed"
    ]
    assert "Cannot send messages to this user" in failed.note


async def test_a_forget_question_is_answered_after_a_restart_once_and_only_by_whoever_asked(
    settings: Settings, clock: FakeClock, embedder: Embedder, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.set_default("monitor-model", "[SKIP]")
    before = await build_app(settings, clock=clock, embedder=embedder)
    bot = await started_bot(before.platform("discord"))
    configure(bot, "Alice", "Bob")
    alice, bob = member(0), member(1)
    before.companion.knowledge.add(scope_of(alice), "Alice's ex is called Tom", category="fact", source="user")
    before.companion.knowledge.add(scope_of(alice), "Alice loves ramen", category="fact", source="user")
    asking = FakeInteraction(alice, channel())
    await CompanionCog.forget.callback(bot.get_cog("CompanionCog"), asking, what="Tom")  # type: ignore[arg-type]
    [question] = asking.log
    assert isinstance(question.view, ForgetQuestion) and question.view.timeout is None
    yes = question.view.yes.custom_id
    await before.aclose()  # the process stops; the question stays in the database

    after = await build_app(settings, clock=clock, embedder=embedder)
    try:
        restarted = await started_bot(after.platform("discord"))
        bob_presses = FakeInteraction(bob, channel(), client=restarted)
        await press_custom_id(yes, bob_presses)
        assert [(each.content, each.ephemeral) for each in bob_presses.log] == [(NOT_YOUR_BUTTON, True)]
        pressing = FakeInteraction(alice, channel(), client=restarted)
        await press_custom_id(yes, pressing)
        assert pressing.log[-1].content == phrasebook.forgot(1) and pressing.log[-1].view is None
        remembered = after.companion.knowledge.memories(scope_of(alice))
        assert [record.content for record in remembered] == ["Alice loves ramen"]
        again = FakeInteraction(alice, channel(), client=restarted)
        await press_custom_id(yes, again)
        assert again.log[-1].content == EXPIRED  # an answer is taken once
    finally:
        await after.aclose()
        await dpytest.empty_queue()

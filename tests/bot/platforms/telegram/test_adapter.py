"""The Telegram adapter: the real PTB Application against a local fake Bot API server."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner
from telegram.ext import Application

from bot.app import App, build_app
from bot.cli.main import cli
from bot.config import Settings, TelegramSettings
from bot.platforms.commands import CHECKINS_PRIVATE_ONLY, EXPIRED, NOT_YOUR_BUTTON
from bot.platforms.render import TELEGRAM_LIMIT, split_message, units
from bot.platforms.telegram.adapter import (
    HELP_TEXT,
    MENU,
    NEEDS_PRIVATE_CHAT,
    SENT_PRIVATELY,
    build_telegram_application,
    start_checkins,
)
from bot.platforms.telegram.reply import GROUP_PACE
from core import phrasebook
from core.phrasebook import NOT_ALLOWED
from knowledge.records import Scope
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock, FakeTimer
from tests.fakes.images import describing, photo_bytes
from tests.fakes.openai_server import FakeCut, FakeError, FakeOpenAIServer
from tests.fakes.personas import personas_with_a_tutor
from tests.fakes.telegram_server import BOT_USERNAME, TOKEN, Call, FakeBotAPI
from tests.fakes.telegram_updates import feed

ALICE = {"id": 101, "is_bot": False, "first_name": "Alice", "last_name": "Smith"}
BOB = {"id": 202, "is_bot": False, "first_name": "Bob"}
OTHER_BOT = {"id": 303, "is_bot": True, "first_name": "Spam", "username": "spam_bot"}
GROUP = {"id": -1001, "type": "supergroup", "title": "Friends"}
ALICE_SCOPE = Scope("xiaoxiang", "telegram:101")
BOB_SCOPE = Scope("xiaoxiang", "telegram:202")
_ids = itertools.count(1)


def private(user: dict[str, Any]) -> dict[str, Any]:
    return {"id": user["id"], "type": "private", "first_name": user["first_name"]}


def message(text: str | None, *, user: dict[str, Any], chat: dict[str, Any], **extra: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "message_id": next(_ids),
        "date": int(time.time()),
        "chat": chat,
        "from": user,
        **extra,
    }
    if text is not None:
        payload["text"] = text
        entities = []
        if text.startswith("/"):
            entities.append({"type": "bot_command", "offset": 0, "length": len(text.split()[0])})
        mention = f"@{BOT_USERNAME}"
        if mention in text and not text.startswith("/"):
            entities.append({"type": "mention", "offset": text.index(mention), "length": len(mention)})
        if entities:
            payload["entities"] = entities
    return {"update_id": next(_ids), "message": payload}


def button(data: str, *, user: dict[str, Any], sent: dict[str, Any]) -> dict[str, Any]:
    return {
        "update_id": next(_ids),
        "callback_query": {"id": str(next(_ids)), "from": user, "chat_instance": "ci", "data": data, "message": sent},
    }


async def test_a_private_message_is_answered_in_its_chat_after_a_typing_action(
    telegram: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "Hello, 主人!")
    await feed(telegram, message("hi there", user=ALICE, chat=private(ALICE)))
    assert fake_telegram.sent_texts() == ["Hello, 主人!"]
    sent = fake_telegram.calls_to("sendMessage")[0].params
    assert sent["chat_id"] == ALICE["id"]
    assert "parse_mode" not in sent  # plain text: model output can never break MarkdownV2
    methods = [call.method for call in fake_telegram.calls]
    assert methods.index("sendChatAction") < methods.index("sendMessage")
    assert fake_telegram.calls_to("sendChatAction")[0].params == {"chat_id": ALICE["id"], "action": "typing"}
    assert fake_openai.requests_for("chat-model")[0].messages[-1]["content"] == "hi there"


async def test_a_broken_emoji_is_kept_as_a_replacement_character_and_answered(
    telegram: Application, app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "I see a broken emoji.", "Two messages, both kept.")
    await feed(telegram, message("look \ud83d here", user=ALICE, chat=private(ALICE)))  # a lone surrogate
    await feed(telegram, message("and the next one", user=ALICE, chat=private(ALICE)))
    assert fake_telegram.sent_texts() == ["I see a broken emoji.", "Two messages, both kept."]
    window = app.working_memory.window("xiaoxiang", f"telegram:chat:{ALICE['id']}")
    assert [stored.content for stored in window if stored.role == "user"] == ["look \ufffd here", "and the next one"]


async def test_a_long_reply_is_split_at_the_telegram_limit(
    telegram: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    long_reply = " ".join(f"word{i:05d}" for i in range(1000))  # 10,000 characters
    assert len(long_reply) >= 9999
    fake_openai.script("chat-model", long_reply)
    await feed(telegram, message("tell me a long story", user=ALICE, chat=private(ALICE)))
    texts = fake_telegram.sent_texts(ALICE["id"])
    assert len(texts) >= 3
    assert all(units(text) <= TELEGRAM_LIMIT for text in texts)
    assert " ".join(texts).split() == long_reply.split()


async def test_model_markup_is_sent_verbatim_as_plain_text(
    telegram: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "*half bold_ [oops](")
    await feed(telegram, message("format me", user=ALICE, chat=private(ALICE)))
    assert fake_telegram.sent_texts() == ["*half bold_ [oops]("]


async def test_group_messages_need_a_mention_or_a_reply(
    telegram: Application, app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    await feed(telegram, message("just chatting among ourselves", user=ALICE, chat=GROUP))
    assert fake_telegram.calls_to("sendMessage") == []
    assert fake_openai.requests_for("chat-model") == []

    fake_openai.script("chat-model", "Yes, Alice?", "Still here, Bob.")
    await feed(telegram, message(f"@{BOT_USERNAME} are you there?", user=ALICE, chat=GROUP))
    bot_message = {
        "message_id": 999,
        "date": int(time.time()),
        "chat": GROUP,
        "from": fake_telegram.bot_user,
        "text": "Yes?",
    }
    await feed(telegram, message("and me?", user=BOB, chat=GROUP, reply_to_message=bot_message))
    assert fake_telegram.final_texts(GROUP["id"]) == ["Yes, Alice?", "Still here, Bob."]

    rows = app.working_memory.window("xiaoxiang", f"telegram:chat:{GROUP['id']}")
    people = [(row.speaker_name, row.user_id, row.content) for row in rows if row.role == "user"]
    assert people == [
        ("Alice Smith", "telegram:101", "are you there?"),  # the mention is stripped, the speaker kept
        ("Bob", "telegram:202", "and me?"),
    ]


async def test_in_a_shared_group_each_user_sees_and_forgets_only_their_own_memories(
    telegram: Application, app: App, kb: Any, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    here = f"telegram:chat:{GROUP['id']}"  # both were learned in this group, so it may hear of them
    kb.add(ALICE_SCOPE, "Alice loves ramen", category="fact", source="user", learned_in=here)
    kb.add(BOB_SCOPE, "Bob plays the cello", category="fact", source="user", learned_in=here)
    fake_openai.script("chat-model", "Noted!")
    await feed(telegram, message(f"@{BOT_USERNAME} I had ramen today", user=ALICE, chat=GROUP))
    await app.companion.tasks.drain()
    # Alice's memory is not in the prompt built for Bob's turn.
    fake_openai.script("chat-model", "Hi Bob")
    await feed(telegram, message(f"@{BOT_USERNAME} what do I like to eat? ramen?", user=BOB, chat=GROUP))
    bob_prompt = fake_openai.requests_for("chat-model")[-1].messages[0]["content"]
    assert "Alice loves ramen" not in bob_prompt and "Bob plays the cello" in bob_prompt

    await feed(telegram, message("/memory", user=BOB, chat=GROUP))
    assert fake_telegram.sent_texts(GROUP["id"])[-1] == SENT_PRIVATELY  # the room never reads it
    listing = fake_telegram.sent_texts(BOB["id"])[-1]
    assert "Bob plays the cello" in listing and "ramen" not in listing
    assert not [text for text in fake_telegram.sent_texts(GROUP["id"]) if "cello" in text]

    await feed(telegram, message("/forget", user=ALICE, chat=GROUP))
    ask = fake_telegram.calls_to("sendMessage")[-1].params
    buttons = [b["callback_data"] for row in ask["reply_markup"]["inline_keyboard"] for b in row]
    assert buttons == [f"forget:yes:{ALICE['id']}", f"forget:no:{ALICE['id']}"]
    asked = {
        "message_id": 555,
        "date": int(time.time()),
        "chat": GROUP,
        "from": fake_telegram.bot_user,
        "text": ask["text"],
    }

    edits = len(fake_telegram.calls_to("editMessageText"))  # the replies' own, as they grew
    await feed(telegram, button(buttons[0], user=BOB, sent=asked))  # Bob presses Alice's button
    refusal = fake_telegram.calls_to("answerCallbackQuery")[-1].params
    assert refusal["text"] == NOT_YOUR_BUTTON and refusal["show_alert"] is True
    assert len(fake_telegram.calls_to("editMessageText")) == edits  # the question is left as it was
    assert [record.content for record in kb.memories(ALICE_SCOPE)] == ["Alice loves ramen"]

    await feed(telegram, button(buttons[0], user=ALICE, sent=asked))
    edited = fake_telegram.calls_to("editMessageText")[-1].params
    assert edited["text"].startswith("Done. I forgot 1 memory")
    assert kb.search(ALICE_SCOPE, "ramen") == [] and kb.memories(ALICE_SCOPE) == []
    assert app.working_memory.log.count(ALICE_SCOPE) == 0
    assert [record.content for record in kb.memories(BOB_SCOPE)] == ["Bob plays the cello"]
    assert app.working_memory.log.count(BOB_SCOPE) > 0


async def test_forget_no_keeps_everything(telegram: Application, kb: Any, fake_telegram: FakeBotAPI) -> None:
    kb.add(ALICE_SCOPE, "Alice loves ramen", category="fact", source="user")
    await feed(telegram, message("/forget", user=ALICE, chat=private(ALICE)))
    asked = {
        "message_id": 5,
        "date": int(time.time()),
        "chat": private(ALICE),
        "from": fake_telegram.bot_user,
        "text": "?",
    }
    await feed(telegram, button(f"forget:no:{ALICE['id']}", user=ALICE, sent=asked))
    assert fake_telegram.calls_to("editMessageText")[-1].params["text"] == "Okay, I won't forget anything."
    assert len(kb.memories(ALICE_SCOPE)) == 1


async def test_new_starts_a_fresh_conversation(
    telegram: Application, app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.set_default("summarizer-model", "We said hi.")
    await feed(telegram, message("hi", user=ALICE, chat=private(ALICE)))
    await feed(telegram, message("/new", user=ALICE, chat=private(ALICE)))
    assert app.working_memory.window("xiaoxiang", f"telegram:chat:{ALICE['id']}") == []
    assert len(fake_telegram.sent_texts()) == 2


async def test_a_sticker_in_private_gets_a_clear_answer_and_is_ignored_in_groups(
    telegram: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    sticker = {
        "file_id": "s1",
        "file_unique_id": "u1",
        "type": "regular",
        "width": 512,
        "height": 512,
        "is_animated": False,
        "is_video": False,
    }
    await feed(telegram, message(None, user=ALICE, chat=GROUP, sticker=sticker))
    assert fake_telegram.calls_to("sendMessage") == []
    await feed(telegram, message(None, user=ALICE, chat=private(ALICE), sticker=sticker))
    assert fake_telegram.sent_texts() == [phrasebook.NOT_TEXT]
    assert fake_openai.requests_for("chat-model") == []


async def test_messages_from_bots_are_ignored(
    telegram: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    await feed(telegram, message("hello bot", user=OTHER_BOT, chat=private(OTHER_BOT)))
    await feed(telegram, message(f"@{BOT_USERNAME} hello", user=OTHER_BOT, chat=GROUP))
    await feed(telegram, message("/memory", user=OTHER_BOT, chat=GROUP))
    assert [call.method for call in fake_telegram.calls] == ["getMe"]
    assert fake_openai.requests_for("chat-model") == []


async def test_unknown_commands_get_the_help(telegram: Application, fake_telegram: FakeBotAPI) -> None:
    await feed(telegram, message("/dance", user=ALICE, chat=private(ALICE)))
    assert fake_telegram.sent_texts() == [f"I don't know the command /dance.\n\n{HELP_TEXT}"]
    await feed(telegram, message("/dance", user=ALICE, chat=GROUP))  # may be meant for another bot
    assert len(fake_telegram.sent_texts()) == 1
    await feed(telegram, message(f"/dance@{BOT_USERNAME}", user=ALICE, chat=GROUP))
    assert len(fake_telegram.sent_texts()) == 2
    await feed(telegram, message("/help", user=ALICE, chat=private(ALICE)))
    assert fake_telegram.sent_texts()[-1] == HELP_TEXT


async def test_an_empty_mention_gets_a_clear_answer(
    telegram: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    await feed(telegram, message(f"@{BOT_USERNAME}", user=ALICE, chat=GROUP))
    assert "empty" in fake_telegram.sent_texts()[0]
    assert fake_openai.requests_for("chat-model") == []


async def test_an_llm_failure_sends_the_apology(
    telegram: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", FakeError(500, times=3))
    await feed(telegram, message("are you there?", user=ALICE, chat=private(ALICE)))
    [text] = fake_telegram.sent_texts()
    assert text.startswith("Sorry") and "saved" in text


async def test_polling_against_the_fake_server_end_to_end(
    app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "Polled and answered.")
    application = build_telegram_application(app.platform("telegram"), TOKEN, fake_telegram.url)
    async with application:
        await application.start()
        assert application.updater is not None
        await application.updater.start_polling(poll_interval=0.0, timeout=1)
        fake_telegram.push_update(message("hello by polling", user=ALICE, chat=private(ALICE)))
        try:
            await asyncio.to_thread(fake_telegram.wait_for, "sendMessage")
        finally:
            await application.updater.stop()
            await application.stop()
    assert fake_telegram.sent_texts(ALICE["id"]) == ["Polled and answered."]
    await app.companion.tasks.drain()


async def test_forget_what_deletes_only_the_callers_matching_memories(
    telegram: Application, kb: Any, fake_telegram: FakeBotAPI
) -> None:
    kb.add(ALICE_SCOPE, "Alice loves ramen", category="fact", source="user")
    kb.add(ALICE_SCOPE, "Alice has a cat called Mochi", category="fact", source="user")
    kb.add(BOB_SCOPE, "Bob loves ramen too", category="fact", source="user")
    await feed(telegram, message("/forget ramen", user=ALICE, chat=GROUP))
    assert fake_telegram.sent_texts(GROUP["id"]) == [SENT_PRIVATELY]  # the room never reads the matches
    ask = fake_telegram.calls_to("sendMessage")[-2]
    assert ask.params["chat_id"] == ALICE["id"]
    assert "Alice loves ramen" in ask.params["text"] and "Bob" not in ask.params["text"]
    [yes, _no] = [b["callback_data"] for row in ask.params["reply_markup"]["inline_keyboard"] for b in row]
    chat = private(ALICE)
    asked = {"message_id": 7, "date": int(time.time()), "chat": chat, "from": fake_telegram.bot_user, "text": "?"}

    await feed(telegram, button(yes, user=BOB, sent=asked))
    assert fake_telegram.calls_to("answerCallbackQuery")[-1].params["text"] == NOT_YOUR_BUTTON
    await feed(telegram, button(yes, user=ALICE, sent=asked))
    assert fake_telegram.calls_to("editMessageText")[-1].params["text"] == "Done. I forgot 1 memory."
    assert [record.content for record in kb.memories(ALICE_SCOPE)] == ["Alice has a cat called Mochi"]
    assert [record.content for record in kb.memories(BOB_SCOPE)] == ["Bob loves ramen too"]

    await feed(telegram, button(yes, user=ALICE, sent=asked))  # pressed again: nothing left to do
    assert fake_telegram.calls_to("editMessageText")[-1].params["text"] == EXPIRED


def test_companion_run_serves_telegram_and_stops_cleanly_on_sigterm(
    fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer, isolated: Path
) -> None:
    fake_openai.script("chat-model", "主人好呀～")
    fake_telegram.push_update(message("hello", user=ALICE, chat=private(ALICE)))
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[4]),
        "COMPANION_TELEGRAM_TOKEN": TOKEN,
        "COMPANION_TELEGRAM_BASE_URL": fake_telegram.url,
        "COMPANION_LLM_BASE_URL": fake_openai.url,
        "COMPANION_CHAT_MODEL": "chat-model",
        "COMPANION_MONITOR_MODEL": "monitor-model",
    }
    bot = subprocess.Popen(
        [sys.executable, "-c", "from bot.cli.main import main; main()", "run"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        fake_telegram.wait_for("sendMessage", timeout=60)
    finally:
        bot.send_signal(signal.SIGTERM)
        _, stderr = bot.communicate(timeout=60)
    assert bot.returncode == 0, stderr
    assert fake_telegram.sent_texts(ALICE["id"]) == ["主人好呀～"]
    assert "stopped" in stderr


def test_companion_run_without_a_platform_says_what_to_set() -> None:
    result = CliRunner().invoke(cli, ["run"])
    assert result.exit_code == 1
    assert "COMPANION_TELEGRAM_TOKEN" in result.output and "COMPANION_DISCORD_TOKEN" in result.output


async def test_memory_asked_in_a_group_by_someone_the_bot_cannot_message_stays_private(
    telegram: Application, kb: Any, fake_telegram: FakeBotAPI
) -> None:
    kb.add(ALICE_SCOPE, "Alice loves ramen", category="fact", source="user")
    fake_telegram.unreachable.add(ALICE["id"])
    await feed(telegram, message("/memory", user=ALICE, chat=GROUP))
    assert fake_telegram.sent_texts(GROUP["id"]) == [NEEDS_PRIVATE_CHAT]


@pytest.fixture
async def ruled(app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer) -> AsyncIterator[Application]:
    """The application under operator rules: a tutor persona in the group, every message answered there,
    and only Alice and Bob allowed."""
    personas_with_a_tutor(app.companion.personas.directory)  # the operator's own persona directory
    app.settings.telegram = TelegramSettings(
        personas={GROUP["id"]: "tutor"}, every_message=[GROUP["id"]], allowed_users=[ALICE["id"], BOB["id"]]
    )
    fake_openai.set_default("monitor-model", "[SKIP]")
    application = build_telegram_application(
        app.platform("telegram"), TOKEN, fake_telegram.url, polling=False, timer=FakeTimer()
    )
    await application.initialize()
    yield application
    await app.companion.tasks.drain()
    await application.shutdown()


async def test_operator_rules_choose_the_persona_and_answer_every_message_in_a_chat(
    ruled: Application, app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "Hoot, Alice.", "主人好～")
    await feed(ruled, message("no mention at all", user=ALICE, chat=GROUP))
    await feed(ruled, message("hi", user=ALICE, chat=private(ALICE)))
    assert fake_telegram.final_texts(GROUP["id"]) == ["Hoot, Alice."]
    group_prompt, private_prompt = (
        request.messages[0]["content"] for request in fake_openai.requests_for("chat-model")
    )
    assert "Professor Owl" in group_prompt and "小祥" in private_prompt
    assert app.working_memory.window("tutor", f"telegram:chat:{GROUP['id']}")[0].speaker_name == "Alice Smith"


async def test_people_outside_the_allow_list_are_refused_but_can_still_forget(
    ruled: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    stranger = {"id": 404, "is_bot": False, "first_name": "Eve"}
    await feed(ruled, message("hello?", user=stranger, chat=private(stranger)))
    await feed(ruled, message(f"@{BOT_USERNAME} hello?", user=stranger, chat=GROUP))
    assert fake_telegram.sent_texts() == [NOT_ALLOWED]  # told in private, silent in the group
    assert fake_openai.requests_for("chat-model") == []
    await feed(ruled, message("/forget", user=stranger, chat=private(stranger)))
    assert "forget everything" in fake_telegram.sent_texts()[-1]


async def test_an_edited_message_replaces_what_the_conversation_remembers(
    telegram: Application, app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "See you then!")
    sent = message("meet at 5?", user=ALICE, chat=private(ALICE))
    await feed(telegram, sent)
    edited = {**sent["message"], "text": "meet at 6?", "edit_date": int(time.time())}
    await feed(telegram, {"update_id": next(_ids), "edited_message": edited})
    window = app.working_memory.window("xiaoxiang", f"telegram:chat:{ALICE['id']}")
    assert [row.content for row in window] == ["meet at 6?", "See you then!"]
    assert fake_telegram.sent_texts() == ["See you then!"]  # not answered twice


async def test_a_message_delivered_twice_is_stored_and_answered_once(
    telegram: Application, app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    """Telegram delivers an update again when its webhook was not acknowledged, or when polling resumes
    after a crash before the update was confirmed: same chat, same message id, a new update id."""
    fake_openai.script("chat-model", "Noted!", "Second answer")
    sent = message("my locker code is 4711", user=ALICE, chat=private(ALICE))
    await feed(telegram, sent)
    await feed(telegram, {**sent, "update_id": next(_ids)})
    await app.companion.tasks.drain()
    window = app.working_memory.window("xiaoxiang", f"telegram:chat:{ALICE['id']}")
    assert [row.content for row in window] == ["my locker code is 4711", "Noted!"]
    assert fake_telegram.sent_texts() == ["Noted!"]
    assert len(fake_openai.requests_for("chat-model")) == 1
    assert len(fake_openai.requests_for("monitor-model")) == 1  # nothing learned twice either


async def test_share_lets_one_memory_or_everything_come_up_in_a_group_and_answers_only_the_caller(
    telegram: Application, kb: Any, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    sister = kb.add(ALICE_SCOPE, "Alice's sister is called Mei", category="fact", source="user")
    kb.add(ALICE_SCOPE, "Alice's passport number is ZQX-4471", category="fact", source="user")
    fake_openai.set_default("chat-model", "Hm?")

    async def group_prompt() -> str:
        await feed(telegram, message(f"@{BOT_USERNAME} who is my sister, and my passport?", user=ALICE, chat=GROUP))
        return str(fake_openai.requests_for("chat-model")[-1].messages[0]["content"])

    prompt = await group_prompt()  # both were told in private
    assert "Mei" not in prompt and "ZQX-4471" not in prompt

    await feed(telegram, message(f"/share {sister.id}", user=BOB, chat=GROUP))  # not Bob's to share
    assert fake_telegram.sent_texts(BOB["id"])[-1] == phrasebook.no_such_memory(sister.id)
    await feed(telegram, message(f"/share {sister.id}", user=ALICE, chat=GROUP))
    assert fake_telegram.sent_texts(GROUP["id"])[-1] == SENT_PRIVATELY  # the answer quotes the memory
    assert fake_telegram.sent_texts(ALICE["id"])[-1] == phrasebook.memory_sharing(sister, True)
    prompt = await group_prompt()
    assert "Alice's sister is called Mei" in prompt and "ZQX-4471" not in prompt

    await feed(telegram, message("/share on", user=ALICE, chat=private(ALICE)))
    assert fake_telegram.sent_texts(ALICE["id"])[-1] == phrasebook.sharing_switched(True)
    assert "ZQX-4471" in await group_prompt()
    await feed(telegram, message("/share off", user=ALICE, chat=private(ALICE)))
    await feed(telegram, message(f"/share {sister.id} off", user=ALICE, chat=private(ALICE)))
    assert fake_telegram.sent_texts(ALICE["id"])[-2:] == [
        phrasebook.sharing_switched(False),
        phrasebook.memory_sharing(sister, False),
    ]
    prompt = await group_prompt()
    assert "Mei" not in prompt and "ZQX-4471" not in prompt
    await feed(telegram, message("/share", user=ALICE, chat=private(ALICE)))
    assert fake_telegram.sent_texts(ALICE["id"])[-1] == phrasebook.sharing_status(False)
    assert "/share" in HELP_TEXT


async def test_timezone_is_answered_in_private_refuses_an_unknown_zone_and_dates_the_users_prompt(
    telegram: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.set_default("chat-model", "Hm?")
    await feed(telegram, message("/timezone Mars/Base", user=ALICE, chat=private(ALICE)))
    assert fake_telegram.sent_texts(ALICE["id"])[-1] == phrasebook.unknown_time_zone("Mars/Base")
    await feed(telegram, message("/timezone Asia/Tokyo", user=ALICE, chat=GROUP))
    assert fake_telegram.sent_texts(GROUP["id"])[-1] == SENT_PRIVATELY  # where someone lives is theirs to tell
    assert fake_telegram.sent_texts(ALICE["id"])[-1].startswith("Okay: your time zone is now Asia/Tokyo, where it is")
    sent = int(time.time())
    await feed(telegram, {**message("hello", user=ALICE, chat=private(ALICE)), "date": sent})
    prompt = str(fake_openai.requests_for("chat-model")[-1].messages[0]["content"])
    local = datetime.fromtimestamp(sent, ZoneInfo("Asia/Tokyo"))
    assert f"## Now\n{local:%A} {local.day} {local:%B %Y}, {local:%H:%M}" in prompt
    await feed(telegram, message("/memory", user=ALICE, chat=private(ALICE)))
    assert "Your time zone is Asia/Tokyo:" in fake_telegram.sent_texts(ALICE["id"])[-1]
    assert "/timezone" in HELP_TEXT and "timezone" in [command.command for command in MENU]


# --- replies that grow while the model writes them ----------------------------------------------------

STORY = " ".join(f"word{index}" for index in range(80))  # 80 words, a stream of about 130 chunks


def stored_reply(app: App, chat_id: int) -> str:
    return app.working_memory.window("xiaoxiang", f"telegram:chat:{chat_id}")[-1].content


def first_draft_before_the_model_finished(fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer) -> list[bool]:
    """Records, when the first visible text reaches Telegram, whether the model's stream was still going."""
    seen: list[bool] = []

    def on_call(call: Call) -> None:
        if call.method in ("sendMessageDraft", "sendMessage") and not seen:
            [request] = [request for request in fake_openai.requests_for("chat-model") if request.stream]
            seen.append(not request.finished.is_set())

    fake_telegram.listen(on_call)
    return seen


async def test_a_private_reply_grows_as_a_draft_then_arrives_whole_as_the_stored_reply(
    telegram: Application, app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", STORY)
    fake_openai.chunk_delay = 0.002
    early = first_draft_before_the_model_finished(fake_telegram, fake_openai)
    await feed(telegram, message("tell me a story", user=ALICE, chat=private(ALICE)))

    assert early == [True]  # the first words were on screen before the model had finished
    methods = [call.method for call in fake_telegram.calls if call.method != "getMe"]
    assert methods[0] == "sendChatAction" and methods[-1] == "sendMessage"
    assert methods.count("sendMessage") == 1 and methods.count("sendMessageDraft") > 1
    drafts = fake_telegram.calls_to("sendMessageDraft")
    assert all(STORY.startswith(draft.params["text"]) for draft in drafts)
    assert len({draft.params["draft_id"] for draft in drafts}) == 1  # one draft, animated as it grows
    assert all(draft.params["chat_id"] == ALICE["id"] and "parse_mode" not in draft.params for draft in drafts)
    assert fake_telegram.sent_texts() == [STORY] == [stored_reply(app, ALICE["id"])]


async def test_a_group_reply_is_sent_early_then_edited_no_faster_than_a_group_allows(
    telegram: Application, app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer, timer: FakeTimer
) -> None:
    fake_openai.script("chat-model", STORY)
    fake_openai.chunk_delay = 0.002
    early = first_draft_before_the_model_finished(fake_telegram, fake_openai)
    updates: list[float] = []
    fake_telegram.listen(
        lambda call: updates.append(timer.now()) if call.method in ("sendMessage", "editMessageText") else None
    )
    await feed(telegram, message(f"@{BOT_USERNAME} tell us a story", user=ALICE, chat=GROUP))

    assert early == [True]
    [sent] = fake_telegram.calls_to("sendMessage")
    assert "reply_parameters" in sent.params  # the first part quotes the message it answers
    edits = fake_telegram.calls_to("editMessageText")
    assert edits and all(edit.params["message_id"] == sent.result["message_id"] for edit in edits)
    assert all("parse_mode" not in edit.params for edit in [sent, *edits])
    *paced, _final = updates  # the final text goes as soon as the model is done
    assert all(later - earlier >= GROUP_PACE for earlier, later in itertools.pairwise(paced))
    assert fake_telegram.final_texts(GROUP["id"]) == [STORY] == [stored_reply(app, GROUP["id"])]
    assert [call.method for call in fake_telegram.calls].count("sendMessageDraft") == 0  # drafts are for private chats


async def test_a_reply_passing_the_limit_while_growing_goes_on_in_a_new_message_at_a_boundary(
    telegram: Application, app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    sentences = "The cat slept on the warm windowsill all afternoon. " * 12
    paragraphs = [f"Chapter {index}. {sentences}".strip() for index in range(16)]
    long_reply = "\n\n".join(paragraphs)
    fake_openai.script("chat-model", long_reply)
    fake_openai.chunk_size = 64
    fake_openai.chunk_delay = 0.002
    try:
        await feed(telegram, message("a long story please", user=ALICE, chat=private(ALICE)))
    finally:
        fake_openai.chunk_size = FakeOpenAIServer.chunk_size
    assert fake_telegram.sent_texts() == split_message(long_reply, TELEGRAM_LIMIT)
    assert all(text.startswith("Chapter") for text in fake_telegram.sent_texts())  # cut between paragraphs
    drafts = fake_telegram.calls_to("sendMessageDraft")
    assert all(units(draft.params["text"]) <= TELEGRAM_LIMIT for draft in drafts)
    assert len({draft.params["draft_id"] for draft in drafts}) == len(fake_telegram.sent_texts())
    assert "\n\n".join(fake_telegram.sent_texts()) == long_reply == stored_reply(app, ALICE["id"])


@pytest.mark.parametrize("chat", [private(ALICE), GROUP], ids=["private", "group"])
async def test_a_model_failing_mid_reply_leaves_what_it_said_and_the_apology_never_a_draft(
    telegram: Application, app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer, chat: dict[str, Any]
) -> None:
    fake_openai.script("chat-model", FakeCut("Let me think about your cat, she is", chunks=9))
    await feed(telegram, message(f"@{BOT_USERNAME} about my cat", user=ALICE, chat=chat))
    [text] = fake_telegram.final_texts(chat["id"])
    assert text.startswith("Let me think about your cat, she is\n\nSorry, I can't think straight")
    assert "saved" in text
    delivered = [call for call in fake_telegram.calls if call.method != "sendChatAction"]
    assert delivered[-1].method in ("sendMessage", "editMessageText") and delivered[-1].params["text"] == text
    window = app.working_memory.window("xiaoxiang", f"telegram:chat:{chat['id']}")
    assert [row.role for row in window] == ["user"]  # the message is kept; a broken answer is not


async def test_with_streaming_off_the_reply_arrives_whole_without_drafts_or_edits(
    app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer, timer: FakeTimer
) -> None:
    app.settings.telegram.streaming = False
    application = build_telegram_application(
        app.platform("telegram"), TOKEN, fake_telegram.url, polling=False, timer=timer
    )
    await application.initialize()
    try:
        fake_openai.script("chat-model", STORY, STORY)
        await feed(application, message("tell me a story", user=ALICE, chat=private(ALICE)))
        await feed(application, message(f"@{BOT_USERNAME} and us?", user=ALICE, chat=GROUP))
    finally:
        await app.companion.tasks.drain()
        await application.shutdown()
    assert fake_telegram.calls_to("sendMessageDraft") == [] and fake_telegram.calls_to("editMessageText") == []
    assert fake_telegram.sent_texts() == [STORY, STORY]


# --- flood limits -------------------------------------------------------------------------------------


async def test_a_retry_after_delays_the_reply_and_never_loses_it(
    telegram: Application, app: App, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "Here I am!")
    fake_telegram.refuse("sendMessage", times=2, retry_after=1)
    await feed(telegram, message("are you there?", user=ALICE, chat=private(ALICE)))
    assert [call.status for call in fake_telegram.calls_to("sendMessage")] == [429, 429, 200]
    assert fake_telegram.sent_texts() == ["Here I am!"]  # waited for, not turned into an apology


async def test_drafts_and_typing_refused_under_flood_limits_cost_the_reply_nothing(
    telegram: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", STORY)
    fake_openai.chunk_delay = 0.002
    fake_telegram.refuse("sendChatAction", retry_after=30)
    fake_telegram.refuse("sendMessageDraft", times=2, retry_after=30)
    await feed(telegram, message("tell me a story", user=ALICE, chat=private(ALICE)))
    assert fake_telegram.sent_texts() == [STORY]  # nobody waited 30 s for a draft: they were skipped


async def test_a_failing_typing_action_never_costs_the_reply(
    telegram: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "Still here.")
    fake_telegram.refuse("sendChatAction", status=400)
    await feed(telegram, message("hello?", user=ALICE, chat=private(ALICE)))
    assert fake_telegram.calls_to("sendChatAction")[0].status == 400
    assert fake_telegram.sent_texts() == ["Still here."]


# --- photos and voice notes -------------------------------------------------------------------------------


def photo_update(caption: str | None, *, user: dict[str, Any], chat: dict[str, Any], big: bytes) -> dict[str, Any]:
    """A photo as Telegram delivers it: several sizes of one picture, the caption beside them."""
    sizes = [
        {"file_id": "photo-s", "file_unique_id": "s", "width": 320, "height": 240, "file_size": 9_000},
        {"file_id": "photo-m", "file_unique_id": "m", "width": 800, "height": 600, "file_size": 60_000},
        {"file_id": "photo-x", "file_unique_id": "x", "width": 1280, "height": 960, "file_size": len(big)},
    ]
    update = message(None, user=user, chat=chat, photo=sizes)
    if caption is not None:
        update["message"]["caption"] = caption
        if f"@{BOT_USERNAME}" in caption:
            mention = {"type": "mention", "offset": caption.index("@"), "length": len(BOT_USERNAME) + 1}
            update["message"]["caption_entities"] = [mention]
    return update


@pytest.fixture
async def seeing_telegram(
    settings: Settings, clock: FakeClock, embedder: Embedder, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> AsyncIterator[tuple[App, Application]]:
    """The application over an app whose chat model sees images (COMPANION_VISION=1)."""
    seeing = await build_app(settings.changed(llm={"vision": True}), clock=clock, embedder=embedder, backoff=(0.01,))
    fake_openai.set_default("monitor-model", "[SKIP]")
    application = build_telegram_application(
        seeing.platform("telegram"), TOKEN, fake_telegram.url, polling=False, timer=FakeTimer()
    )
    await application.initialize()
    yield seeing, application
    await seeing.companion.tasks.drain()
    await application.shutdown()
    await seeing.aclose()


async def test_a_photo_with_a_caption_reaches_a_vision_model_and_is_remembered_as_its_description(
    seeing_telegram: tuple[App, Application], fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    seeing, application = seeing_telegram
    fake_telegram.add_file("photo-x", photo_bytes(1280, 960))
    fake_openai.set_default("chat-model", describing("What a fluffy grey cat!", "A grey cat on a blue sofa."))
    await feed(application, photo_update("meet Mochi", user=ALICE, chat=private(ALICE), big=photo_bytes(1280, 960)))

    assert [call.params["file_id"] for call in fake_telegram.calls_to("getFile")] == ["photo-x"]  # the size we show
    [reply_request] = [request for request in fake_openai.requests_for("chat-model") if request.stream]
    text, image = reply_request.messages[-1]["content"]
    assert text == {"type": "text", "text": "[photo] meet Mochi"}
    assert image["type"] == "image_url" and image["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert fake_telegram.sent_texts() == ["What a fluffy grey cat!"]
    [said, _] = seeing.working_memory.window("xiaoxiang", f"telegram:chat:{ALICE['id']}")
    assert said.content == "[photo: A grey cat on a blue sofa.] meet Mochi"


async def test_without_vision_a_photo_gets_a_clear_answer_and_its_caption_is_still_answered(
    telegram: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    fake_telegram.add_file("photo-x", photo_bytes(1280, 960))
    fake_openai.script("chat-model", "Mochi is a lovely name!")
    await feed(telegram, photo_update("meet Mochi", user=ALICE, chat=private(ALICE), big=photo_bytes(1280, 960)))
    await feed(telegram, photo_update(None, user=ALICE, chat=private(ALICE), big=photo_bytes(1280, 960)))
    assert fake_telegram.sent_texts() == [
        f"{phrasebook.CANT_SEE_IMAGES_READ_CAPTION}\n\nMochi is a lovely name!",
        phrasebook.CANT_SEE_IMAGES,
    ]
    [request] = fake_openai.requests_for("chat-model")
    assert request.messages[-1]["content"] == "[photo] meet Mochi"  # the caption alone, and that a photo came


async def test_a_photo_beyond_the_operators_limit_is_refused_before_it_is_downloaded(
    seeing_telegram: tuple[App, Application], fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    seeing, application = seeing_telegram
    huge = b"\xff" * (seeing.settings.image_max_bytes + 1)
    await feed(application, photo_update("look", user=ALICE, chat=private(ALICE), big=huge))
    assert fake_telegram.calls_to("getFile") == [] and fake_openai.requests_for("chat-model") == []
    assert fake_telegram.sent_texts() == [phrasebook.image_too_large(len(huge), seeing.settings.image_max_bytes)]


async def test_in_a_group_a_photo_is_answered_only_when_its_caption_mentions_the_bot(
    seeing_telegram: tuple[App, Application], fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    _, application = seeing_telegram
    fake_telegram.add_file("photo-x", photo_bytes(1280, 960))
    fake_openai.set_default("chat-model", describing("Cute!", "A grey cat."))
    await feed(application, photo_update("our cat", user=ALICE, chat=GROUP, big=photo_bytes(1280, 960)))
    assert fake_telegram.calls_to("getFile") == [] and fake_telegram.calls_to("sendMessage") == []
    await feed(
        application, photo_update(f"@{BOT_USERNAME} our cat", user=ALICE, chat=GROUP, big=photo_bytes(1280, 960))
    )
    assert fake_telegram.final_texts(GROUP["id"]) == ["Cute!"]


async def test_a_voice_note_gets_a_clear_answer(
    telegram: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer
) -> None:
    voice = {"file_id": "v1", "file_unique_id": "v1", "duration": 3, "mime_type": "audio/ogg", "file_size": 4000}
    await feed(telegram, message(None, user=ALICE, chat=private(ALICE), voice=voice))
    await feed(telegram, message(None, user=ALICE, chat=GROUP, voice=voice))  # people talking to each other
    assert fake_telegram.sent_texts() == [phrasebook.CANT_HEAR_VOICE]
    assert fake_openai.requests_for("chat-model") == []


# --- check-ins ------------------------------------------------------------------------------------

BERLIN = ZoneInfo("Europe/Berlin")
MONDAY_TEN = datetime(2026, 1, 5, 10, 0, tzinfo=BERLIN)


def said_now(text: str, clock: FakeClock, *, user: dict[str, Any], chat: dict[str, Any]) -> dict[str, Any]:
    """A message sent at the app clock's moment."""
    return message(text, user=user, chat=chat, date=int(clock.now().timestamp()))


async def until(app: App, clock: FakeClock, moment: datetime) -> None:
    """The clock moves to `moment` half an hour at a time, each step running the planning pass and its jobs."""
    while clock.now() < moment:
        clock.advance(minutes=30)
        await app.companion.checkins.plan()
        await app.companion.tasks.drain()


async def test_a_checkin_goes_once_to_the_private_chat_of_a_user_who_said_checkins_on_and_never_to_a_group(
    app: App, telegram: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer, clock: FakeClock
) -> None:
    start_checkins(app.companion, telegram)
    fake_openai.set_default("chat-model", "Hello!")
    await feed(telegram, said_now("/timezone Europe/Berlin", clock, user=ALICE, chat=private(ALICE)))
    await feed(telegram, said_now("/checkins", clock, user=ALICE, chat=private(ALICE)))
    assert fake_telegram.sent_texts(ALICE["id"])[-1] == phrasebook.checkins_status(False)  # off by default
    await feed(telegram, said_now("/checkins on", clock, user=ALICE, chat=GROUP))
    assert fake_telegram.sent_texts(GROUP["id"])[-1] == CHECKINS_PRIVATE_ONLY
    await feed(telegram, said_now("/checkins on", clock, user=ALICE, chat=private(ALICE)))
    assert fake_telegram.sent_texts(ALICE["id"])[-1] == phrasebook.checkins_switched(True)
    await feed(telegram, said_now("I have an interview on Monday at 10", clock, user=ALICE, chat=private(ALICE)))
    app.companion.knowledge.add(ALICE_SCOPE, "主人 has an interview", category="fact", source="user", about=MONDAY_TEN)
    # Bob said yes too, but only ever talks in the group: there is nowhere private to write to him
    app.companion.user_settings.set_checkins(BOB_SCOPE, True)
    await feed(telegram, said_now(f"@{BOT_USERNAME} my exam is on Monday", clock, user=BOB, chat=GROUP))
    app.companion.knowledge.add(BOB_SCOPE, "Bob has an exam", category="fact", source="user", about=MONDAY_TEN)
    group_messages = len(fake_telegram.sent_texts(GROUP["id"]))

    fake_openai.set_default("chat-model", "How did the interview go?")
    await until(app, clock, datetime(2026, 1, 7, 12, tzinfo=BERLIN))
    assert fake_telegram.sent_texts(ALICE["id"]).count("How did the interview go?") == 1
    assert len(fake_telegram.sent_texts(GROUP["id"])) == group_messages
    assert "Check-ins are on" in (await app.companion.memory_listing(ALICE_SCOPE))


async def test_a_user_who_blocked_the_bot_is_switched_off_with_the_reason_kept(
    app: App, telegram: Application, fake_telegram: FakeBotAPI, fake_openai: FakeOpenAIServer, clock: FakeClock
) -> None:
    start_checkins(app.companion, telegram)
    fake_openai.set_default("chat-model", "Hello!")
    await feed(telegram, said_now("/timezone Europe/Berlin", clock, user=ALICE, chat=private(ALICE)))
    await feed(telegram, said_now("/checkins on", clock, user=ALICE, chat=private(ALICE)))
    app.companion.knowledge.add(ALICE_SCOPE, "主人 has an interview", category="fact", source="user", about=MONDAY_TEN)
    fake_telegram.unreachable.add(ALICE["id"])  # Telegram answers 403 Forbidden
    await until(app, clock, datetime(2026, 1, 6, 18, tzinfo=BERLIN))
    assert fake_telegram.calls_to("sendMessage")[-1].status == 403
    assert app.companion.user_settings.chosen_checkins(ALICE_SCOPE) is False
    [failed] = app.journal.checkins.listing(since=MONDAY_TEN)
    assert failed.state == "failed" and "Forbidden" in failed.note
    fake_telegram.unreachable.clear()
    assert "Forbidden" in (await app.companion.memory_listing(ALICE_SCOPE))

"""A turn end to end: real HTTP to the fake LLM, real chromadb, real SQLite."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

import pytest

from bot.app import App, build_app
from bot.config import Settings
from core.companion import MAX_MESSAGE_CHARS, Companion, UnknownPersonaError
from core.phrasebook import EMPTY_MESSAGE, too_long
from knowledge.memory.chroma_store import ChromaKnowledgeBase
from knowledge.records import Scope
from knowledge.search.embedding import Embedder
from personas.loader import PERSONA_DIR
from tests.fakes.clock import FakeClock
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeError, FakeHang, FakeOpenAIServer


def stored_texts(settings: Settings) -> list[str]:
    """What SQLite holds, read through a separate connection as a restarted process would."""
    with sqlite3.connect(settings.storage.data_dir / "companion.sqlite3") as db:
        return [row[0] for row in db.execute("SELECT content FROM messages ORDER BY seq")]


async def test_a_turn_streams_the_reply_and_stores_both_sides(
    companion: Companion, fake_openai: FakeOpenAIServer, settings: Settings
) -> None:
    fake_openai.script("chat-model", "主人好呀～今天想吃拉面吗？")
    result = await companion.handle(make_message("我回来啦"))
    assert await result.text() == "主人好呀～今天想吃拉面吗？"
    assert result.completed
    assert stored_texts(settings) == ["我回来啦", "主人好呀～今天想吃拉面吗？"]
    [request] = fake_openai.requests_for("chat-model")
    assert request.stream
    assert "小祥" in request.messages[0]["content"]
    assert request.messages[-1] == {"role": "user", "content": "我回来啦"}


async def test_the_message_is_stored_before_the_llm_is_called(
    companion: Companion, fake_openai: FakeOpenAIServer, settings: Settings
) -> None:
    seen: list[list[str]] = []

    def reply(body: dict[str, Any]) -> str:
        seen.append(stored_texts(settings))
        return "noted"

    fake_openai.script("chat-model", reply)
    await (await companion.handle(make_message("my flight is at 9"))).text()
    assert seen == [["my flight is at 9"]]


async def test_the_conversation_survives_a_restart(
    app: App, settings: Settings, clock: FakeClock, embedder: Embedder, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "Nice to meet you, Alice!", "Your cat is Mochi.")
    await (await app.companion.handle(make_message("I'm Alice and my cat is Mochi"))).text()
    await app.aclose()

    restarted = await build_app(settings, clock=clock, embedder=embedder)
    try:
        await (await restarted.companion.handle(make_message("what's my cat called?"))).text()
    finally:
        await restarted.aclose()
    second = fake_openai.requests_for("chat-model")[1]
    assert [message["content"] for message in second.messages[1:]] == [
        "I'm Alice and my cat is Mochi",
        "Nice to meet you, Alice!",
        "what's my cat called?",
    ]


@pytest.mark.parametrize(
    "failures", [[FakeError(500, times=3)], [FakeError(429, times=3)], [FakeHang()] * 3], ids=["500", "429", "timeout"]
)
async def test_an_llm_failure_gets_an_apology_and_loses_nothing(
    companion: Companion, fake_openai: FakeOpenAIServer, settings: Settings, failures: list[object]
) -> None:
    fake_openai.script("chat-model", *failures)  # one more than the retries allow
    result = await companion.handle(make_message("are you there?"))
    text = await result.text()
    assert not result.completed
    assert text.startswith("Sorry, I can't think straight right now: ")
    assert text.endswith("Your message is saved, so just try again in a moment.") and text == result.notice
    assert stored_texts(settings) == ["are you there?"]

    fake_openai.script("chat-model", "I'm back!")
    assert await (await companion.handle(make_message("hello?"))).text() == "I'm back!"
    retry = fake_openai.requests_for("chat-model")[-1]
    assert [message["content"] for message in retry.messages[1:]] == ["are you there?", "hello?"]


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
async def test_empty_messages_get_a_clear_answer_without_an_llm_call(
    companion: Companion, fake_openai: FakeOpenAIServer, text: str
) -> None:
    result = await companion.handle(make_message(text))
    assert await result.text() == EMPTY_MESSAGE
    assert fake_openai.requests_for("chat-model") == []


async def test_a_message_beyond_the_budget_is_refused_unstored_and_the_conversation_goes_on(
    companion: Companion, fake_openai: FakeOpenAIServer, settings: Settings
) -> None:
    fake_openai.script("chat-model", "Hi Alice!", "We were saying hello.")
    await (await companion.handle(make_message("hello"))).text()
    long_text = "lorem ipsum " * 8250  # 99,000 characters, ~16k tokens: more than the 8k context
    result = await companion.handle(make_message(long_text))
    assert (await result.text()).startswith("That message is too long for me to read in one go")
    assert not result.completed and len(fake_openai.requests_for("chat-model")) == 1
    assert stored_texts(settings) == ["hello", "Hi Alice!"]

    # the refused message cannot crowd the conversation out of the next prompt
    await (await companion.handle(make_message("where were we?"))).text()
    next_prompt = fake_openai.requests_for("chat-model")[-1]
    assert [message["content"] for message in next_prompt.messages[1:]] == ["hello", "Hi Alice!", "where were we?"]

    absurd = await companion.handle(make_message("x" * (MAX_MESSAGE_CHARS + 1)))
    assert await absurd.text() == too_long(MAX_MESSAGE_CHARS + 1, MAX_MESSAGE_CHARS)


async def test_memories_of_the_scope_reach_the_prompt_and_no_other_scopes_do(
    companion: Companion, kb: ChromaKnowledgeBase, fake_openai: FakeOpenAIServer, alice: Scope, bob: Scope
) -> None:
    kb.add(alice, "Alice's birthday is on 3 May", category="core", source="user")
    kb.add(alice, "Alice loves tonkotsu ramen", category="fact", source="user")
    kb.add(bob, "Bob loves tonkotsu ramen too and his PIN is 1234", category="fact", source="user")
    kb.add(bob, "Bob's birthday is in June", category="core", source="user")

    await (await companion.handle(make_message("what should I eat?", user_id=alice.user_id))).text()
    system = fake_openai.requests_for("chat-model")[0].messages[0]["content"]
    assert "Alice's birthday is on 3 May" in system and "Alice loves tonkotsu ramen" in system
    assert "草莓大福" in system  # the persona's own system memories are always there
    assert "Bob" not in system


async def test_forget_everything_removes_every_layer(
    companion: Companion, kb: ChromaKnowledgeBase, fake_openai: FakeOpenAIServer, alice: Scope, bob: Scope
) -> None:
    kb.add(alice, "Alice is afraid of spiders", category="fact", source="user")
    kb.add(bob, "Bob is afraid of heights", category="fact", source="user")
    await (await companion.handle(make_message("spiders scare me", user_id=alice.user_id))).text()

    await companion.tasks.drain()  # the turn's messages are indexed as history
    assert companion.history.search(alice, "spiders")[0].message.content == "spiders scare me"

    report = await companion.forgetting.everything(alice)
    assert (report.memories, report.messages) == (1, 2)
    assert kb.search(alice, "spiders") == []
    assert companion.history.search(alice, "spiders") == [] and companion.history.indexed_count(alice) == 0
    assert companion.responses.working_memory.log.count(alice) == 0
    assert [record.content for record in await companion.memories(bob)] == ["Bob is afraid of heights"]


async def test_forget_what_also_forgets_the_messages_that_mention_it(
    companion: Companion, kb: ChromaKnowledgeBase, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default("monitor-model", "[SKIP]")
    kb.add(alice, "Alice's ex Tom moved to Berlin", category="fact", source="user")
    fake_openai.script("chat-model", "Oh no, how did that feel?", "A kitten! What is its name?")
    await (await companion.handle(make_message("my ex Tom called me yesterday"))).text()
    await (await companion.handle(make_message("I adopted a kitten"))).text()
    await companion.tasks.drain()

    plan = await companion.forgetting.find(alice, "my ex Tom")
    assert [item.content for item in plan.found] == ["Alice's ex Tom moved to Berlin", "my ex Tom called me yesterday"]
    report = await companion.forgetting.forget(plan)
    assert (report.memories, report.messages) == (1, 1)

    assert (await companion.forgetting.find(alice, "Tom")).found == []
    results = await companion.search(alice, "Tom")
    assert all("Tom" not in hit.record.content for hit in results.memories)
    assert all("Tom" not in hit.message.content for hit in results.messages)
    assert all(hit.relevance <= 0.5 for hit in results.messages)  # not even a neighbour still matches "Tom"
    assert companion.responses.working_memory.log.count(alice) == 3


async def test_forget_typed_in_chat_also_forgets_the_messages_that_mention_it_and_the_request(
    companion: Companion, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default("monitor-model", "[SKIP]")
    await (await companion.handle(make_message("my ex Tom called me yesterday"))).text()
    await (await companion.handle(make_message("I adopted a kitten"))).text()
    await (await companion.handle(make_message("please forget my ex Tom"))).text()
    await companion.tasks.drain()
    # the request itself quoted what is forgotten, and its reply went with it
    assert [message.content for message in companion.history.messages(alice)] == ["ok", "I adopted a kitten", "ok"]
    assert all(hit.lexical == 0 for hit in companion.history.search(alice, "Tom", limit=10))


async def test_a_past_message_the_memories_do_not_cover_is_quoted_in_the_prompt(
    companion: Companion, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default("monitor-model", "[SKIP]")
    await (await companion.handle(make_message("my gym locker code is 4321", conversation_id="telegram:chat:1"))).text()
    await companion.tasks.drain()

    await (await companion.handle(make_message("what was my gym locker code?"))).text()  # another conversation
    system = fake_openai.requests_for("chat-model")[-1].messages[0]["content"]
    assert "## Earlier messages that may matter now" in system
    assert "Alice: my gym locker code is 4321" in system

    await (await companion.handle(make_message("and the locker code again?", conversation_id="telegram:chat:1"))).text()
    system = fake_openai.requests_for("chat-model")[-1].messages[0]["content"]
    assert "my gym locker code is 4321" not in system  # it is in this conversation's window already


async def test_a_past_message_an_episode_was_made_from_is_not_quoted_again(
    companion: Companion, kb: ChromaKnowledgeBase, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default("monitor-model", "[SKIP]")
    await (await companion.handle(make_message("my gym locker code is 4321", conversation_id="telegram:chat:1"))).text()
    await companion.tasks.drain()
    sources = [message.id for message in companion.history.messages(alice)]
    kb.add(
        alice,
        "[2026-01-03 18:00] 主人说了健身房储物柜密码",
        category="episode",
        source="background_ai",
        message_ids=sources,
    )

    await (await companion.handle(make_message("what was my gym locker code?"))).text()
    system = fake_openai.requests_for("chat-model")[-1].messages[0]["content"]
    assert "健身房储物柜密码" in system and "## Earlier messages" not in system


async def test_new_conversation_starts_afresh_with_a_greeting(
    companion: Companion, fake_openai: FakeOpenAIServer
) -> None:
    await (await companion.handle(make_message("old topic"))).text()
    greeting = await companion.new_conversation(None, "dm:cli:alice")
    assert greeting in companion.persona().greetings
    await (await companion.handle(make_message("new topic"))).text()
    last = fake_openai.requests_for("chat-model")[-1]
    assert [message["content"] for message in last.messages[1:]] == ["new topic"]


async def test_an_unknown_persona_is_a_clear_error(companion: Companion) -> None:
    with pytest.raises(UnknownPersonaError, match="unknown persona 'nobody' \\(known: xiaoxiang\\)"):
        await companion.handle(make_message("hi", persona_id="nobody"))


async def test_a_user_writing_too_fast_gets_a_polite_answer_without_an_llm_call(
    settings: Settings, clock: FakeClock, embedder: Embedder, fake_openai: FakeOpenAIServer
) -> None:
    app = await build_app(settings.model_copy(update={"rate_limit_per_minute": 2}), clock=clock, embedder=embedder)
    try:
        for _ in range(2):
            assert (await (await app.companion.handle(make_message("hi"))).text()) == "ok"
        refused = await app.companion.handle(make_message("hi again"))
        assert "faster than I can think" in await refused.text() and not refused.completed
        other = await app.companion.handle(make_message("hello", user_id="cli:bob"))
        assert await other.text() == "ok"  # the limit is per user
        clock.advance(seconds=60)
        assert (await (await app.companion.handle(make_message("and now?"))).text()) == "ok"
        assert len(fake_openai.requests_for("chat-model")) == 4
    finally:
        await app.aclose()


async def test_an_edited_message_is_what_the_next_prompt_shows(
    companion: Companion, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.script("chat-model", "See you at 5!", "Got it.")
    await (await companion.handle(make_message("meet at 5?", source_id="m1"))).text()
    assert await companion.message_edited("m1", "meet at 6?")
    assert not await companion.message_edited("m1", "   ")  # an emptied edit keeps the old words
    assert not await companion.message_edited("never-seen", "hello")
    await (await companion.handle(make_message("ok?", source_id="m2"))).text()
    second = fake_openai.requests_for("chat-model")[1].messages
    contents = [message["content"] for message in second]
    assert any("meet at 6?" in content for content in contents)
    assert not any("meet at 5?" in content for content in contents)


async def test_a_deleted_message_leaves_the_conversation(
    companion: Companion, fake_openai: FakeOpenAIServer, settings: Settings
) -> None:
    fake_openai.script("chat-model", "Oh no!")
    await (await companion.handle(make_message("my password is hunter2", source_id="m1"))).text()
    assert await companion.message_deleted("m1")
    assert stored_texts(settings) == ["Oh no!"]


async def test_forget_everything_also_forgets_the_users_choice_to_share(
    companion: Companion, alice: Scope, bob: Scope
) -> None:
    await companion.share(alice, "on")
    await companion.share(bob, "on")
    await companion.forgetting.everything(alice)
    assert not companion.user_settings.shares_in_groups(alice)  # back to the default that protects her
    assert companion.user_settings.shares_in_groups(bob)


async def test_while_the_persona_file_is_broken_messages_are_answered_and_stored(
    companion: Companion, fake_openai: FakeOpenAIServer, settings: Settings
) -> None:
    own = settings.own_persona_dir / "xiaoxiang.yaml"
    own.parent.mkdir(parents=True)
    own.write_text(PERSONA_DIR.joinpath("xiaoxiang.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    fake_openai.script("chat-model", "first", "second")
    assert await (await companion.handle(make_message("before the edit"))).text() == "first"
    own.write_text("name: [a half-saved edit\n", encoding="utf-8")
    os.utime(own, (own.stat().st_atime, own.stat().st_mtime + 5))
    assert await (await companion.handle(make_message("during the broken edit"))).text() == "second"
    assert stored_texts(settings) == ["before the edit", "first", "during the broken edit", "second"]
    assert "小祥" in fake_openai.requests_for("chat-model")[-1].messages[0]["content"]

"""The ResponseHandler: what one reply stores, and what it tells the background when the turn ends."""

from __future__ import annotations

from bot.app import App
from core.llm import count_tokens
from core.memory_injector import Budget, MemoryInjector, persona_prompt
from core.response_handler import ResponseHandler
from core.types import StoredTurn
from knowledge.records import Scope
from knowledge.store import ChromaKnowledgeBase
from tests.fakes.clock import FakeClock
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeCut, FakeError, FakeOpenAIServer


def window_of(app: App, conversation_id: str) -> list[tuple[str, str]]:
    persona_id = app.companion.persona().id
    return [(message.role, message.content) for message in app.working_memory.window(persona_id, conversation_id)]


async def test_the_stored_turn_names_both_messages_and_the_memories_shown(
    app: App, kb: ChromaKnowledgeBase, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    core = kb.add(alice, "Alice's birthday is on 3 May", category="core", source="user")
    fact = kb.add(alice, "Alice loves tonkotsu ramen", category="fact", source="user")
    fake_openai.script("chat-model", "Ramen it is!")
    handed: list[StoredTurn | None] = []
    message = make_message("what should I eat for my birthday?", user_id=alice.user_id)

    result = await app.companion.responses.reply(
        app.companion.persona(), alice, message, group=False, on_end=handed.append
    )
    assert result.stored is None and handed == []  # nothing is handed over before the reply is stored
    assert await result.text() == "Ramen it is!"

    [user_message, reply] = app.working_memory.window(alice.persona_id, message.conversation_id)
    assert handed == [result.stored]
    assert result.stored == StoredTurn(
        message_id=user_message.id,
        reply_id=reply.id,
        reply_text="Ramen it is!",
        shown_ids=(core.id, fact.id),  # the persona's system memories are shown but never handed over
    )


async def test_memories_the_budget_left_out_are_not_handed_over_as_shown(
    app: App, kb: ChromaKnowledgeBase, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope
) -> None:
    persona = app.companion.persona()
    facts = [
        kb.add(
            alice,
            f"Alice's ramen note {index}: " + "tonkotsu broth, thin noodles, extra egg. " * 12,
            category="fact",
            source="user",
        )
        for index in range(6)
    ]
    room = count_tokens(persona_prompt(persona, "Alice")) + 600  # the persona, the message and about two facts
    handler = ResponseHandler(
        working_memory=app.working_memory,
        knowledge=kb,
        history=app.history,
        llm=app.llm,
        injector=MemoryInjector(Budget(context_window=room + 100, reply_tokens=100)),
        clock=clock,
    )
    fake_openai.script("chat-model", "Noted.")
    handed: list[StoredTurn | None] = []
    result = await handler.reply(
        persona, alice, make_message("ramen notes?", user_id=alice.user_id), group=False, on_end=handed.append
    )
    await result.text()

    system = fake_openai.requests_for("chat-model")[0].messages[0]["content"]
    in_prompt = {fact.id for fact in facts if fact.content in system}
    [stored] = handed
    assert 0 < len(in_prompt) < len(facts)
    assert set(stored.shown_ids) == in_prompt


async def test_an_llm_failure_keeps_the_message_and_hands_nothing_over(
    app: App, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.script("chat-model", FakeError(500, times=3))
    handed: list[StoredTurn | None] = []
    message = make_message("are you there?", user_id=alice.user_id)
    result = await app.companion.responses.reply(
        app.companion.persona(), alice, message, group=False, on_end=handed.append
    )
    text = await result.text()
    assert not result.completed and result.notice is not None and text.endswith(result.notice)
    assert result.stored is None and handed == [None]  # told once: the turn ended without a reply
    assert window_of(app, message.conversation_id) == [("user", "are you there?")]


async def test_an_empty_answer_is_not_stored_as_a_reply(app: App, fake_openai: FakeOpenAIServer, alice: Scope) -> None:
    fake_openai.script("chat-model", "   ")
    handed: list[StoredTurn | None] = []
    message = make_message("hello?", user_id=alice.user_id)
    result = await app.companion.responses.reply(
        app.companion.persona(), alice, message, group=False, on_end=handed.append
    )
    assert (await result.text()).strip() == result.notice  # the blank answer streamed, then the notice
    assert not result.completed and result.stored is None and handed == [None]
    assert window_of(app, message.conversation_id) == [("user", "hello?")]


async def test_a_stream_cut_before_its_end_is_an_apology_not_a_reply(
    app: App, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.script("chat-model", FakeCut("Of course, your locker code is", chunks=3))
    handed: list[StoredTurn | None] = []
    message = make_message("what is my locker code?", user_id=alice.user_id)
    result = await app.companion.responses.reply(
        app.companion.persona(), alice, message, group=False, on_end=handed.append
    )
    text = await result.text()
    assert not result.completed and result.notice is not None and text.endswith(result.notice)
    assert "cut off" in result.notice
    assert result.stored is None and handed == [None]
    assert window_of(app, message.conversation_id) == [("user", "what is my locker code?")]

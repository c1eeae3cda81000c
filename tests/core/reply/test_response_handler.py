"""The ResponseHandler: what one reply stores, and what it tells the background when the turn ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from bot.app import App, build_app
from bot.config import Settings
from core import phrasebook
from core.llm.client import count_tokens
from core.reply.prompt import Budget, PromptBuilder, persona_prompt
from core.reply.response_handler import ResponseHandler
from core.types import StoredTurn
from knowledge.memory.chroma_store import ChromaKnowledgeBase
from knowledge.records import Scope
from knowledge.search.embedding import Embedder
from personas.loader import ModelChoice
from tests.fakes.clock import FakeClock
from tests.fakes.images import describing, make_photo
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeCut, FakeError, FakeOpenAIServer, RecordedRequest


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
        prompt_builder=PromptBuilder(Budget(context_window=room + 100, reply_tokens=100)),
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


# --- photos -------------------------------------------------------------------------------------------

GREY_CAT = "A grey cat sleeping on a windowsill."


def image_parts(request: RecordedRequest) -> list[dict[str, Any]]:
    content = request.messages[-1]["content"]
    return [part for part in content if part["type"] == "image_url"] if isinstance(content, list) else []


@pytest.fixture
async def seeing(settings: Settings, clock: FakeClock, embedder: Embedder) -> AsyncIterator[App]:
    """The app on a chat model that accepts images (COMPANION_VISION=1)."""
    built = await build_app(settings.changed(llm={"vision": True}), clock=clock, embedder=embedder, backoff=(0.01,))
    yield built
    await built.aclose()


async def test_a_photo_reaches_a_vision_model_and_is_remembered_as_its_description(
    seeing: App, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default("chat-model", describing("What a sleepy little cat!", GREY_CAT))
    message = replace(make_message("look at my new cat", user_id=alice.user_id), image=make_photo(3000, 2000))
    handed: list[StoredTurn] = []
    result = await seeing.companion.responses.reply(
        seeing.companion.persona(), alice, message, group=False, on_end=handed.append
    )
    assert await result.text() == "What a sleepy little cat!"

    [reply_request] = [request for request in fake_openai.requests_for("chat-model") if request.stream]
    [image] = image_parts(reply_request)
    assert image["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert reply_request.messages[-1]["content"][0] == {"type": "text", "text": "[photo] look at my new cat"}
    [describe_request] = [request for request in fake_openai.requests_for("chat-model") if not request.stream]
    assert image_parts(describe_request) == [image]  # the same bounded image, asked about once more

    remembered = f"[photo: {GREY_CAT}] look at my new cat"
    assert window_of(seeing, message.conversation_id) == [("user", remembered), ("assistant", result.reply)]
    [turn] = handed
    assert turn is not None  # the monitor reads the message by its id once the turn ends: the description
    assert seeing.working_memory.log.get([turn.message_id])[0].content == remembered
    await asyncio.to_thread(seeing.history.index_pending)
    [hit] = seeing.history.search(alice, "the grey cat on the windowsill", limit=1)
    assert hit.message.content == remembered
    assert b"\xff\xd8" not in (seeing.settings.storage.data_dir / "companion.sqlite3").read_bytes()  # no JPEG kept


async def test_a_later_turn_sees_the_photo_as_words_not_as_an_image(
    seeing: App, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default("chat-model", describing("Cute!", GREY_CAT))
    first = replace(make_message("my cat", user_id=alice.user_id), image=make_photo())
    await (await seeing.companion.handle(first)).text()
    await (await seeing.companion.handle(make_message("what colour was it?", user_id=alice.user_id))).text()
    later = [request for request in fake_openai.requests_for("chat-model") if request.stream][-1]
    assert image_parts(later) == []
    assert {"role": "user", "content": f"[photo: {GREY_CAT}] my cat"} in later.messages


async def test_a_photo_whose_description_fails_is_kept_as_a_photo_and_still_answered(
    seeing: App, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default("chat-model", describing("Nice!", description=""))
    message = replace(make_message("guess where I am", user_id=alice.user_id), image=make_photo())
    assert await (await seeing.companion.handle(message)).text() == "Nice!"
    assert window_of(seeing, message.conversation_id)[0] == ("user", "[photo] guess where I am")


async def test_without_vision_the_caption_is_answered_after_saying_the_photo_was_not_seen(
    app: App, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.script("chat-model", "A new cat? Tell me about it!")
    message = replace(make_message("look at my new cat", user_id=alice.user_id), image=make_photo())
    result = await app.companion.handle(message)
    assert await result.text() == f"{phrasebook.CANT_SEE_IMAGES_READ_CAPTION}\n\nA new cat? Tell me about it!"
    [request] = fake_openai.requests_for("chat-model")
    assert image_parts(request) == [] and request.messages[-1]["content"] == "[photo] look at my new cat"
    assert window_of(app, message.conversation_id) == [
        ("user", "[photo] look at my new cat"),
        ("assistant", "A new cat? Tell me about it!"),  # the notice is not the persona's words
    ]
    assert result.stored is not None and result.stored.reply_text == "A new cat? Tell me about it!"


async def test_without_vision_a_photo_alone_gets_a_clear_answer_and_no_model_call(
    app: App, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    message = replace(make_message("", user_id=alice.user_id), image=make_photo())
    result = await app.companion.handle(message)
    assert await result.text() == phrasebook.CANT_SEE_IMAGES and not result.completed
    assert fake_openai.requests_for("chat-model") == []
    assert window_of(app, message.conversation_id) == []


async def test_a_persona_on_a_vision_model_sees_photos_while_the_default_model_does_not(
    app: App, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    persona = app.companion.persona()
    seeing_persona = persona.model_copy(update={"models": {"chat": ModelChoice(model="eyes-model", vision=True)}})
    fake_openai.set_default("eyes-model", describing("I see it!", GREY_CAT))
    message = replace(make_message("", user_id=alice.user_id), image=make_photo())
    result = await app.companion.responses.reply(seeing_persona, alice, message, group=False)
    assert await result.text() == "I see it!"
    assert image_parts(next(r for r in fake_openai.requests_for("eyes-model") if r.stream))


async def test_an_oversize_photo_is_refused_before_anything_is_stored(
    settings: Settings, clock: FakeClock, embedder: Embedder, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    strict = await build_app(
        settings.changed(llm={"vision": True}, image_max_bytes=1000), clock=clock, embedder=embedder
    )
    try:
        photo = make_photo()
        message = replace(make_message("big one", user_id=alice.user_id), image=photo)
        result = await strict.companion.handle(message)
        assert await result.text() == phrasebook.image_too_large(len(photo.data), 1000)
        assert window_of(strict, message.conversation_id) == [] and fake_openai.requests_for("chat-model") == []
    finally:
        await strict.aclose()

"""The demo prompt: a few lines the tiny embedded model can follow, holding what the user said that matters."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.app import App
from core.llm.client import count_tokens
from core.reply.demo_prompt import CHINESE, DEMO_MEMORIES, DemoPromptBuilder
from core.reply.prompt import Budget, MessageTooLongError, PromptBuilder, persona_prompt
from core.reply.response_handler import ResponseHandler
from knowledge.memory.chroma_store import ChromaKnowledgeBase
from knowledge.records import MemoryRecord, Scope, StoredMessage
from personas.loader import PersonaRegistry
from tests.fakes.clock import FakeClock
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeOpenAIServer

AT = datetime(2026, 1, 3, 18, 0, tzinfo=UTC)
SCOPE = Scope("xiaoxiang", "cli:alice")
PERSONA = PersonaRegistry().get("xiaoxiang")
BUDGET = Budget(context_window=2048, reply_tokens=48)


def fact(content: str, index: int, message_ids: tuple[str, ...] = ()) -> MemoryRecord:
    return MemoryRecord(
        id=f"mem_{index:04d}",
        scope=SCOPE,
        content=content,
        category="fact",
        importance=1.0,
        created_at=AT,
        last_access=AT,
        source="user",
        message_ids=message_ids,
    )


def said(content: str, index: int, role: str = "user") -> StoredMessage:
    return StoredMessage(
        id=f"msg_{index:04d}",
        persona_id="xiaoxiang",
        conversation_id="c1",
        user_id=SCOPE.user_id,
        role=role,  # type: ignore[arg-type]
        speaker_name="Alice",
        content=content,
        sent_at=AT,
    )


WINDOW = [
    *(
        said(f"message {index} about nothing much", index, "user" if index % 2 == 0 else "assistant")
        for index in range(20)
    ),
    said("Where does my sister live?", 20),
]
FACTS = [fact("my sister lives in Lisbon", 100), *(fact(f"an older fact number {n}", 101 + n) for n in range(7))]
EXCERPTS = [
    said("Where does my sister live now?", 50),  # a question: tells nothing
    said("Lisbon is lovely in spring!", 51, "assistant"),  # the character's words: not what the user told
    said("I just adopted a cat called Mochi.", 52),
    said("My birthday is on March 14.", 53),
]


def build(window: list[StoredMessage] = WINDOW, **given: object) -> list[tuple[str, str]]:
    prompt = DemoPromptBuilder(BUDGET).build(
        PERSONA, window=window, always=[], retrieved=FACTS, excerpts=EXCERPTS, **given
    )  # type: ignore[arg-type]
    return [(message.role, message.content) for message in prompt.messages]


def test_it_is_a_few_lines_far_smaller_than_the_full_prompt() -> None:
    demo = DemoPromptBuilder(BUDGET).build(PERSONA, window=WINDOW, always=[], retrieved=FACTS, excerpts=EXCERPTS)
    full = PromptBuilder(BUDGET).build(PERSONA, window=WINDOW, always=[], retrieved=FACTS, excerpts=EXCERPTS)
    assert demo.tokens <= 160 and full.tokens >= 4 * demo.tokens
    assert count_tokens(demo.messages[0].content) <= 25  # the persona in a line
    # the system line, the worked example, the last exchange and the message
    assert [message.role for message in demo.messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert demo.dropped_messages == len(WINDOW) - 3
    assert demo.dropped_memories == FACTS[1:]  # what the monitor is told was not shown


def test_it_holds_the_best_statement_and_the_best_fact_and_nothing_else_remembered() -> None:
    *_, (role, text) = build()
    assert role == "user"
    assert text == (
        "Earlier I told you:\n- I just adopted a cat called Mochi.\n- my sister lives in Lisbon\n\n"
        "Where does my sister live?"
    )
    assert text.count("\n- ") == DEMO_MEMORIES
    everything = "\n".join(content for _, content in build())
    assert "草莓大福" not in everything and "三月九日" not in everything  # the persona's own facts stay out
    assert "Lisbon is lovely" not in everything and "live now?" not in everything
    assert "You are 小祥, 主人's friendly companion" in build()[0][1]
    assert "Who you are" in persona_prompt(PERSONA)  # the full persona prompt is still there for real models


def test_chinese_is_answered_in_chinese_with_the_words_said_back() -> None:
    window = [said("我姐姐住在哪里？", 1)]
    excerpts = [said("我姐姐住在成都。", 2)]
    prompt = DemoPromptBuilder(BUDGET).build(PERSONA, window=window, always=[], retrieved=[], excerpts=excerpts)
    assert [(message.role, message.content) for message in prompt.messages] == [
        ("system", CHINESE.system.format(name="小祥", title="主人")),
        ("user", "你姐姐住在成都。\n我姐姐住在哪里？"),
    ]


def test_a_message_too_long_for_the_demo_model_is_refused() -> None:
    builder = DemoPromptBuilder(Budget(context_window=300, reply_tokens=48))
    with pytest.raises(MessageTooLongError):
        builder.check_fits(PERSONA, said("words " * 400, 1))
    builder.check_fits(PERSONA, said("hello", 1))
    tight = DemoPromptBuilder(Budget(context_window=180, reply_tokens=48))
    prompt = tight.build(PERSONA, window=WINDOW, always=[], retrieved=FACTS, excerpts=EXCERPTS)
    assert prompt.tokens <= 132 and prompt.messages[-1].content.endswith("Where does my sister live?")


def test_it_lets_the_history_quote_the_window_but_not_a_shown_facts_source() -> None:
    source = said("remember that my sister lives in Lisbon", 7)
    memories = [fact("my sister lives in Lisbon", 1, (source.id,))]
    assert DemoPromptBuilder(BUDGET).covered(WINDOW, memories) == {WINDOW[-1].id, source.id}
    assert PromptBuilder(BUDGET).covered(WINDOW, memories) == {message.id for message in WINDOW} | {source.id}


async def test_what_was_said_earlier_in_the_conversation_reaches_the_demo_prompt(
    app: App, kb: ChromaKnowledgeBase, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope
) -> None:
    handler = ResponseHandler(
        working_memory=app.working_memory,
        knowledge=kb,
        history=app.history,
        llm=app.llm,
        prompt_builder=DemoPromptBuilder(BUDGET),
        clock=clock,
    )
    persona = app.companion.persona()
    fake_openai.script("chat-model", "Nice!", "Sure.", "Cool.", "Your cat is Mochi!")
    for text in ("I just adopted a cat called Mochi.", "My sister lives in Lisbon.", "I like rainy days."):
        await (await handler.reply(persona, alice, make_message(text, user_id=alice.user_id), group=False)).text()
        clock.advance(minutes=1)
        await app.lifecycle.index_history()  # what the turn's monitor job does first
    result = await handler.reply(
        persona, alice, make_message("What is my cat called?", user_id=alice.user_id), group=False
    )
    assert await result.text() == "Your cat is Mochi!"
    asked = fake_openai.requests_for("chat-model")[-1].messages[-1]["content"]
    assert "- I just adopted a cat called Mochi." in asked.split("\n\n")[0]  # found, though left out of the turns shown

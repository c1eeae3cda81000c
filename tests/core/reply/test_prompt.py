"""The PromptBuilder: everything in the prompt fits the budget, whole items only, lowest rank dropped first."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from core.llm.client import count_message_tokens, count_tokens
from core.reply.prompt import Budget, MessageTooLongError, PromptBuilder, how_known, persona_prompt
from knowledge.records import MemoryRecord, Scope, StoredMessage
from personas.loader import Persona, PersonaRegistry

AT = datetime(2026, 1, 3, 18, 0, tzinfo=UTC)
SCOPE = Scope("xiaoxiang", "cli:alice")
PERSONA = PersonaRegistry().get("xiaoxiang")
PERSONA_TOKENS = count_tokens(persona_prompt(PERSONA))


def memory(content: str, category: str = "fact", index: int = 0) -> MemoryRecord:
    return MemoryRecord(
        id=f"mem_{index:04d}",
        scope=SCOPE,
        content=content,
        category=category,  # type: ignore[arg-type]
        importance=1.0,
        created_at=AT,
        last_access=AT,
        source="user",
    )


def message(content: str, index: int, role: str = "user", speaker: str = "Alice") -> StoredMessage:
    return StoredMessage(
        id=f"msg_{index:04d}",
        persona_id="xiaoxiang",
        conversation_id="c1",
        user_id=SCOPE.user_id,
        role=role,
        speaker_name=speaker,
        content=content,
        sent_at=AT,  # type: ignore[arg-type]
    )


def conversation(turns: int) -> list[StoredMessage]:
    return [
        message(f"turn {index}: " + "words " * (index % 7 + 1), index, "user" if index % 2 == 0 else "assistant")
        for index in range(turns)
    ] + [message("what should I eat tonight?", turns)]


def prompt_text(prompt) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(item.content for item in prompt.messages)


def test_everything_is_included_when_it_fits() -> None:
    builder = PromptBuilder(Budget(context_window=8192, reply_tokens=512))
    core = [memory("Alice's birthday is 3 May", "core", 1)]
    facts = [memory("Alice loves ramen", index=2)]
    prompt = builder.build(PERSONA, window=conversation(6), always=core, retrieved=facts)
    text = prompt_text(prompt)
    assert PERSONA.name in prompt.messages[0].content
    assert "Alice's birthday is 3 May" in text and "Alice loves ramen" in text
    assert [item.role for item in prompt.messages[1:]] == ["user", "assistant"] * 3 + ["user"]
    assert prompt.messages[-1].content == "what should I eat tonight?"
    assert prompt.dropped_memories == [] and prompt.dropped_messages == 0


@pytest.mark.parametrize("seed", range(25))
def test_the_prompt_never_exceeds_its_budget_and_never_cuts_an_item(seed: int) -> None:
    rng = random.Random(seed)
    budget = Budget(context_window=rng.randint(900, 3000), reply_tokens=rng.randint(64, 400))
    builder = PromptBuilder(budget)
    facts = [memory(f"fact {index}: " + "detail " * rng.randint(1, 60), index=index) for index in range(40)]
    core = [memory(f"core {index}: " + "always " * rng.randint(1, 20), "core", 100 + index) for index in range(5)]
    window = conversation(rng.randint(1, 30))
    prompt = builder.build(PERSONA, window=window, always=core, retrieved=facts)

    assert prompt.tokens == sum(count_message_tokens(item) for item in prompt.messages)
    assert prompt.tokens <= budget.prompt_tokens
    system = prompt.messages[0].content
    for record in core + facts:
        kept = f"- {record.content}{how_known(record, '主人')}\n" in system + "\n"
        assert kept != (record in prompt.dropped_memories)  # either whole in the prompt or dropped
    kept_messages = [item.content for item in prompt.messages[1:-1]]
    assert all(text in [stored.content for stored in window] for text in kept_messages)


def test_lowest_ranked_items_go_first() -> None:
    facts = [memory(f"fact number {index} " + "filler " * 30, index=index) for index in range(12)]
    window = conversation(10)
    builder = PromptBuilder(Budget(context_window=PERSONA_TOKENS + 600, reply_tokens=200))
    prompt = builder.build(PERSONA, window=window, always=[], retrieved=facts)
    kept = [record for record in facts if record not in prompt.dropped_memories]
    assert 0 < len(kept) < len(facts)
    assert kept == facts[: len(kept)]  # a prefix of the ranking: only the lowest-ranked were dropped
    # older messages rank below the memories, so they went before any memory did
    assert prompt.dropped_messages == 10 - 4


def test_the_kept_conversation_is_the_most_recent_part_in_order() -> None:
    builder = PromptBuilder(Budget(context_window=PERSONA_TOKENS + 300, reply_tokens=100))
    window = conversation(29)
    prompt = builder.build(PERSONA, window=window, always=[], retrieved=[])
    kept = [item.content for item in prompt.messages[1:]]
    assert 0 < prompt.dropped_messages < 29
    assert kept == [stored.content for stored in window[prompt.dropped_messages :]]


def test_a_message_too_long_for_the_model_is_a_clear_error() -> None:
    builder = PromptBuilder(Budget(context_window=2048, reply_tokens=512))
    with pytest.raises(MessageTooLongError, match="too long"):
        builder.build(PERSONA, window=[message("blah " * 3000, 1)], always=[], retrieved=[])


def test_group_messages_carry_their_speaker() -> None:
    builder = PromptBuilder(Budget(context_window=8192, reply_tokens=512))
    window = [message("I like tea", 1, speaker="Alice"), message("I prefer coffee", 2, speaker="Bob")]
    prompt = builder.build(PERSONA, window=window, always=[], retrieved=[], group=True)
    assert [item.content for item in prompt.messages[1:]] == ["Alice: I like tea", "Bob: I prefer coffee"]


def test_lore_joins_the_prompt_when_its_keys_come_up() -> None:
    builder = PromptBuilder(Budget(context_window=8192, reply_tokens=512))
    asked = builder.build(PERSONA, window=[message("我最喜欢草莓大福了", 1)], always=[], retrieved=[])
    assert "草莓大福是小祥最爱的点心" in asked.messages[0].content  # {{char}} filled in
    other = builder.build(PERSONA, window=[message("今天好累", 1)], always=[], retrieved=[])
    assert "草莓大福是" not in other.messages[0].content


def test_lore_takes_at_most_a_share_of_a_small_budget() -> None:
    words = "lore " * 600
    entries = [
        {"keys": [], "constant": True, "content": words, "priority": 1},
        {"keys": [], "constant": True, "content": "small lore", "priority": 2},
    ]
    persona = Persona.model_validate({**PERSONA.model_dump(), "lorebook": {"token_budget": 10_000, "entries": entries}})
    roomy = PromptBuilder(Budget(context_window=8192, reply_tokens=512))
    assert words.strip() in roomy.build(persona, window=[message("hi", 1)], always=[], retrieved=[]).messages[0].content
    tight = PromptBuilder(Budget(context_window=1500, reply_tokens=200))
    prompt = tight.build(persona, window=[message("hi", 1)], always=[], retrieved=[])
    assert words.strip() not in prompt.messages[0].content and "small lore" in prompt.messages[0].content
    assert prompt.tokens <= tight.budget.prompt_tokens


def test_card_fields_are_placed_and_macros_filled_for_the_speaker() -> None:
    from personas.card import persona_from_card
    from tests.fakes.cards import card_v2

    persona = persona_from_card(card_v2(), source="marin.json")
    builder = PromptBuilder(Budget(context_window=8192, reply_tokens=512))
    prompt = builder.build(persona, window=[message("the harbor is busy", 1, speaker="Bob")], always=[], retrieved=[])
    system = prompt.messages[0].content
    assert system.startswith("Write as Marin Voss.")
    assert "Bob meets Marin Voss on the pier." in system and "Bob: Is the sea rough today?" in system
    assert "Marin Voss works at the harbor." in system and "{{" not in system and "<START>" not in system
    assert system.endswith("Keep replies under three sentences.")
    assert prompt.messages[-1].content == "the harbor is busy"


def test_past_messages_are_quoted_with_time_and_speaker_and_dropped_before_memories() -> None:
    facts = [memory(f"Alice fact number {index} " + "detail " * 20, index=index) for index in range(3)]
    past = [message(f"an old message {index} " + "word " * 200, 100 + index) for index in range(3)]
    roomy = PromptBuilder(Budget(context_window=8192, reply_tokens=512))
    text = prompt_text(roomy.build(PERSONA, window=conversation(0), always=[], retrieved=facts, excerpts=past))
    assert "## Earlier messages that may matter now\n- [2026-01-03 18:00] Alice: an old message 0" in text
    assert "…" in text  # a long message is quoted in part

    tight = PromptBuilder(Budget(context_window=PERSONA_TOKENS + 275, reply_tokens=100))  # the facts, no excerpt
    text = prompt_text(tight.build(PERSONA, window=conversation(0), always=[], retrieved=facts, excerpts=past))
    assert all(fact.content in text for fact in facts) and "an old message" not in text


def test_each_fact_says_whether_the_user_said_it_and_a_conflict_is_asked_about() -> None:
    said = memory("Alice lives in Beijing", index=1)
    confirmed = replace(memory("Alice is vegetarian", index=2), source="background_ai", verified=True)
    inferred = replace(memory("Alice lives in Shanghai", index=3), source="background_ai")
    episode = replace(memory("[2026-01-02 10:00] Talked about moving", "episode", 4), source="background_ai")
    builder = PromptBuilder(Budget(context_window=8192, reply_tokens=512))
    prompt = builder.build(PERSONA, window=conversation(0), always=[], retrieved=[said, confirmed, inferred, episode])
    system = prompt.messages[0].content
    assert "- Alice lives in Beijing (主人 said so)\n" in system
    assert "- Alice is vegetarian (主人 said so)\n" in system  # confirmed by the user
    assert "- Alice lives in Shanghai (inferred)\n" in system
    assert "- [2026-01-02 10:00] Talked about moving\n" in system + "\n"  # an episode is a summary, no claim
    assert "When two memories disagree, ask 主人 which is true instead of guessing." in system

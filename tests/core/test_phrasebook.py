"""The companion's own lines, shared by every adapter."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from core import phrasebook
from knowledge.records import MemoryRecord, Scope, StoredMessage

AT = datetime(2026, 1, 3, 18, 0, tzinfo=UTC)


def memory(content: str, category: str, importance: float) -> MemoryRecord:
    return MemoryRecord(
        id="mem_1",
        scope=Scope("xiaoxiang", "cli:alice"),
        content=content,
        category=category,  # type: ignore[arg-type]
        importance=importance,
        created_at=AT,
        last_access=AT,
        source="user",
    )


def test_the_memory_listing_keeps_the_order_it_is_given_and_shows_category_importance_and_where() -> None:
    listing = phrasebook.memory_listing(
        [memory("Alice's birthday is 3 May", "core", 3.0), memory("likes ramen", "fact", 0.8)]
    )
    assert listing == (
        "What I remember about you:\n"
        "[core] Alice's birthday is 3 May  (importance 3.00; private; mem_1)\n"
        "[fact] likes ramen  (importance 0.80; private; mem_1)\n\n" + phrasebook.SHARING_RULE
    )
    assert phrasebook.memory_listing([]) == phrasebook.NOTHING_REMEMBERED


def test_what_forget_would_delete_lists_memories_and_past_messages_alike() -> None:
    said = StoredMessage("msg_1", "xiaoxiang", "c1", "cli:alice", "user", "Alice", "my ex Tom called", AT)
    assert phrasebook.remembered([memory("Alice's ex is Tom", "fact", 1.0), said]) == (
        "I remember this:\n- Alice's ex is Tom\n- my ex Tom called"
    )
    tom = memory("Alice's ex is Tom", "fact", 1.0)
    assert phrasebook.forget_question([tom, said, said]) == "Forget 1 memory and 2 past messages?"
    assert phrasebook.forget_question([tom, tom]) == "Forget 2 memories?"
    assert phrasebook.forget_question([said]) == "Forget 1 past message?"


def test_an_unknown_time_zone_is_not_echoed_back_whole() -> None:
    answer = phrasebook.unknown_time_zone("x" * 5000)
    assert len(answer) < 300 and "xxx..." in answer


def test_the_forget_everything_question_names_the_user_only_when_asked_to() -> None:
    assert phrasebook.forget_everything_question() == (
        "Shall I forget everything I know about you? This cannot be undone."
    )
    assert phrasebook.forget_everything_question("Alice Smith") == (
        "Alice Smith, shall I forget everything I know about you? This cannot be undone."
    )
    assert phrasebook.forgot_everything(2, 5, about="Alice Smith") == (
        "Done. I forgot 2 memories and 5 messages about Alice Smith."
    )


def test_what_was_forgotten_is_counted_in_the_singular_too() -> None:
    assert phrasebook.forgot(1) == "Done. I forgot 1 memory."
    assert phrasebook.forgot(0) == "Done. I forgot 0 memories."
    assert phrasebook.forgot_everything(1, 1) == "Done. I forgot 1 memory and 1 message about you."


def test_the_memory_listing_says_where_each_memory_may_come_up() -> None:
    learned_there = replace(memory("sings in a choir", "fact", 1.0), learned_in="telegram:chat:-1001")
    shared = replace(memory("sister is Mei", "fact", 1.0), shared=True, learned_in="telegram:chat:-1001")
    listing = phrasebook.memory_listing([learned_there, shared])
    assert "[fact] sings in a choir  (importance 1.00; learned in a group; mem_1)" in listing
    assert "[fact] sister is Mei  (importance 1.00; shared; mem_1)" in listing
    assert "telegram:chat" not in listing  # which group is the operator's business, not the listing's

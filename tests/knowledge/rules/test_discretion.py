"""Discretion rules: who may hear of a memory or a past message, and how an origin is written."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from knowledge.records import MemoryRecord, Scope, StoredMessage
from knowledge.rules.discretion import PRIVATE, Audience, describe_origin, learned_in, parse_origin

AT = datetime(2026, 1, 3, 18, 0, tzinfo=UTC)
GROUP_A, GROUP_B = "discord:channel:1", "discord:channel:2"
MEMORY = MemoryRecord("mem_1", Scope("xiaoxiang", "discord:9"), "likes jazz", "fact", 1.0, AT, AT, "user")


def said_in(conversation_id: str) -> StoredMessage:
    return StoredMessage("msg_1", "xiaoxiang", conversation_id, "discord:9", "user", "Ann", "I like jazz", AT)


def test_in_private_everything_is_used() -> None:
    for record in (MEMORY, replace(MEMORY, learned_in=GROUP_A)):
        assert PRIVATE.may_use(record)
    assert PRIVATE.may_quote(said_in("discord:dm:5")) and PRIVATE.may_quote(said_in(GROUP_B))


def test_a_group_hears_what_was_learned_there_and_what_was_shared() -> None:
    in_a = Audience(group_id=GROUP_A)
    assert not in_a.may_use(MEMORY)  # learned in private
    assert in_a.may_use(replace(MEMORY, learned_in=GROUP_A))
    assert not in_a.may_use(replace(MEMORY, learned_in=GROUP_B))
    assert in_a.may_use(replace(MEMORY, learned_in=GROUP_B, shared=True))
    assert in_a.may_quote(said_in(GROUP_A))
    assert not in_a.may_quote(said_in("discord:dm:5")) and not in_a.may_quote(said_in(GROUP_B))
    sharing = Audience(group_id=GROUP_A, shares_everything=True)
    assert sharing.may_use(MEMORY) and sharing.may_quote(said_in("discord:dm:5"))


def test_an_origin_is_recorded_only_for_groups() -> None:
    assert learned_in(GROUP_A, group=True) == GROUP_A
    assert learned_in("discord:dm:5", group=False) is None
    assert Audience.of("discord:dm:5", group=False) == PRIVATE
    assert Audience.of(GROUP_A, group=True) == Audience(group_id=GROUP_A)


@pytest.mark.parametrize(
    ("learned", "shared", "text"),
    [
        (None, False, "private"),
        (None, True, "private, shared"),
        (GROUP_A, False, "group discord:channel:1"),
        (GROUP_A, True, "group discord:channel:1, shared"),
    ],
)
def test_an_origin_reads_back_as_written(learned: str | None, shared: bool, text: str) -> None:
    record = replace(MEMORY, learned_in=learned, shared=shared)
    assert describe_origin(record) == text
    assert parse_origin(text) == (learned, shared)


@pytest.mark.parametrize("text", ["public", "group", "group a b", "private, secret", ""])
def test_an_unreadable_origin_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_origin(text)

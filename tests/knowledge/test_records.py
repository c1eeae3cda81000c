"""The values every wing shares: a memory change says what it sets, what it clears, and leaves the rest."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from knowledge.records import CLEAR, KEEP, MemoryChange, MemoryRecord, Scope

NOW = datetime(2026, 3, 1, 4, 0, tzinfo=UTC)
ALICE = Scope("xiaoxiang", "cli:alice")
PLAN = replace(
    MemoryRecord("mem_1", ALICE, "Alice has an interview", "fact", 1.0, NOW, NOW, "user"),
    review_pending="promote",
    about=NOW,
)


def test_a_change_sets_what_it_names_clears_what_it_clears_and_keeps_the_rest() -> None:
    change = MemoryChange(content="Alice has a second interview", about=CLEAR, review_pending=CLEAR)
    changed = change.applied_to(PLAN)
    assert changed == replace(PLAN, content="Alice has a second interview", about=None, review_pending=None)
    assert MemoryChange().applied_to(PLAN) == PLAN and MemoryChange().values() == {}


def test_unset_and_cleared_are_told_apart() -> None:
    assert MemoryChange(about=CLEAR).values() == {"about": None}
    assert MemoryChange(about=KEEP).values() == {} == MemoryChange().values()


def test_a_new_importance_is_the_new_base() -> None:
    decayed = replace(PLAN, importance=0.8, base_importance=1.0)
    assert MemoryChange(importance=1.3).applied_to(decayed).base_importance == 1.3
    assert MemoryChange(hits=2).applied_to(decayed).base_importance == 1.0


def test_a_change_comes_back_from_its_values() -> None:
    change = MemoryChange(importance=1.3, last_access=NOW, hits=4, review_pending=CLEAR, until=NOW)
    assert MemoryChange.of(change.values()) == change

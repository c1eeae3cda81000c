"""The journal: history out of retrieval, visible dead letters, and forgetting per scope."""

from __future__ import annotations

from pathlib import Path

from knowledge.journal import Journal
from knowledge.records import Scope
from tests.fakes.clock import FakeClock


def test_history_keeps_who_changed_what_and_when(tmp_path: Path, clock: FakeClock, alice: Scope, bob: Scope) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    journal.record_change(
        alice, "mem_1", action="update", actor="background_ai", old_content="Beijing", new_content="Shanghai", at=clock.now()
    )
    journal.record_change(bob, "mem_2", action="delete", actor="user", old_content="x", new_content=None, at=clock.now())
    [entry] = journal.history(alice)
    assert (entry.memory_id, entry.action, entry.actor, entry.old_content, entry.new_content, entry.at) == (
        "mem_1", "update", "background_ai", "Beijing", "Shanghai", clock.now(),
    )
    assert journal.history(alice, "mem_2") == []


def test_dead_letters_are_listed_per_scope_and_for_operators(
    tmp_path: Path, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    letter = journal.dead_letter("monitor", alice, {"output": "{json?}"}, "unreadable", at=clock.now())
    journal.dead_letter("monitor", bob, {"output": ""}, "unreadable", at=clock.now())
    assert journal.dead_letters(alice) == [letter]
    assert len(journal.dead_letters()) == 2


def test_forget_purges_history_dead_letters_and_jobs_of_one_scope(
    tmp_path: Path, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    for scope in (alice, bob):
        journal.record_change(scope, "m", action="update", actor="ai", old_content="a", new_content="b", at=clock.now())
        journal.dead_letter("monitor", scope, {}, "bad", at=clock.now())
        journal.enqueue("monitor", scope, {}, at=clock.now())
    assert journal.forget(alice) == 3
    assert journal.history(alice) == [] and journal.dead_letters(alice) == []
    assert [job.scope for job in journal.pending_jobs()] == [bob]
    assert len(journal.history(bob)) == 1

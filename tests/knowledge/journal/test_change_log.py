"""The change log: who changed which memory, when, old -> new; per scope."""

from __future__ import annotations

from knowledge.journal.change_log import ChangeLog
from knowledge.records import Scope
from tests.conftest import Backend
from tests.fakes.clock import FakeClock


def test_history_keeps_who_changed_what_and_when(backend: Backend, clock: FakeClock, alice: Scope, bob: Scope) -> None:
    changes = ChangeLog(backend.open())
    changes.record_change(
        alice,
        "mem_1",
        action="update",
        actor="background_ai",
        old_content="Beijing",
        new_content="Shanghai",
        at=clock.now(),
    )
    changes.record_change(
        bob, "mem_2", action="delete", actor="user", old_content="x", new_content=None, at=clock.now()
    )
    [entry] = changes.changes(alice)
    assert (entry.memory_id, entry.action, entry.actor, entry.old_content, entry.new_content, entry.at) == (
        "mem_1",
        "update",
        "background_ai",
        "Beijing",
        "Shanghai",
        clock.now(),
    )
    assert changes.changes(alice, "mem_2") == []

"""The journal: its three parts in one file, forgotten per scope together."""

from __future__ import annotations

from knowledge.journal.journal import Journal
from knowledge.records import Scope
from tests.conftest import Backend
from tests.fakes.clock import FakeClock


def test_forget_purges_history_dead_letters_and_jobs_of_one_scope(
    backend: Backend, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    journal = Journal(backend.open())
    for scope in (alice, bob):
        journal.changes.record_change(
            scope, "m", action="update", actor="ai", old_content="a", new_content="b", at=clock.now()
        )
        journal.jobs.dead_letter("monitor", scope, {}, "bad", at=clock.now())
        journal.jobs.enqueue("monitor", scope, {}, at=clock.now())
    assert journal.forget(alice) == 3
    assert journal.changes.changes(alice) == [] and journal.jobs.dead_letters(alice) == []
    assert [job.scope for job in journal.jobs.pending_jobs()] == [bob]
    assert len(journal.changes.changes(bob)) == 1

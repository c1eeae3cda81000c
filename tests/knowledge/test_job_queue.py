"""The job queue's dead letters: visible per scope and to operators."""

from __future__ import annotations

from pathlib import Path

from knowledge.job_queue import JobQueue
from knowledge.records import Scope
from knowledge.sqlite import SQLiteDatabase
from tests.fakes.clock import FakeClock


def test_dead_letters_are_listed_per_scope_and_for_operators(
    tmp_path: Path, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    jobs = JobQueue(SQLiteDatabase(tmp_path / "j.sqlite3"))
    letter = jobs.dead_letter("monitor", alice, {"output": "{json?}"}, "unreadable", at=clock.now())
    jobs.dead_letter("monitor", bob, {"output": ""}, "unreadable", at=clock.now())
    assert jobs.dead_letters(alice) == [letter]
    assert len(jobs.dead_letters()) == 2

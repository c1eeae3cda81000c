"""The job queue: dead letters visible per scope and to operators, finished work without text, erasure."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from knowledge.forget.target import REDACTED, ForgetTarget
from knowledge.journal.job_queue import Backlog, JobQueue
from knowledge.records import Scope
from knowledge.sql.sqlite import SQLiteDatabase
from tests.conftest import Backend
from tests.fakes.clock import FakeClock


def test_dead_letters_are_listed_per_scope_and_for_operators(
    backend: Backend, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    jobs = JobQueue(backend.open())
    letter = jobs.dead_letter("monitor", alice, {"output": "{json?}"}, "unreadable", at=clock.now())
    jobs.dead_letter("monitor", bob, {"output": ""}, "unreadable", at=clock.now())
    assert jobs.dead_letters(alice) == [letter]
    assert len(jobs.dead_letters()) == 2


def test_finished_work_keeps_no_text_and_dead_letters_keep_theirs_for_the_retention_only(
    tmp_path: Path, clock: FakeClock, alice: Scope
) -> None:
    db = SQLiteDatabase(tmp_path / "j.sqlite3")
    jobs = JobQueue(db)
    done = jobs.enqueue("monitor", alice, {"turn": {"user_text": "my PIN is 4471"}}, at=clock.now())
    failed = jobs.enqueue("monitor", alice, {"turn": {"user_text": "my locker is 9913"}}, at=clock.now())
    jobs.complete(done.id)
    old_letter = jobs.give_up(failed, error="LLMError: down", at=clock.now())
    assert db.query("SELECT payload, last_error FROM jobs") == [("{}", ""), ("{}", "")]  # at once, not later
    clock.advance(days=3)
    new_letter = jobs.dead_letter("monitor", alice, {"output": "{json?}"}, "unreadable", at=clock.now())

    clock.advance(days=5)  # the first letter is 8 days old, the second 5
    assert jobs.prune(dead_letters_before=clock.now() - timedelta(days=7)) == 3
    assert db.query("SELECT COUNT(*) FROM jobs") == [(0,)]
    assert jobs.dead_letters() == [new_letter] and old_letter.payload["turn"]["user_text"] == "my locker is 9913"
    raw = (tmp_path / "j.sqlite3").read_bytes() + (tmp_path / "j.sqlite3-wal").read_bytes()
    assert b"4471" not in raw and b"9913" not in raw  # zeroed in the file, and the log truncated


def test_a_forget_erases_matching_dead_letters_and_leaves_a_placeholder_in_pending_jobs(
    backend: Backend, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    jobs = JobQueue(backend.open())
    jobs.dead_letter("monitor", alice, {"turn": {"user_text": "my PIN is 4471"}}, "unreadable", at=clock.now())
    kept = jobs.dead_letter("monitor", alice, {"turn": {"user_text": "I like tea"}}, "unreadable", at=clock.now())
    theirs = jobs.dead_letter("monitor", bob, {"turn": {"user_text": "my PIN is 4471"}}, "unreadable", at=clock.now())
    pending = jobs.enqueue("monitor", alice, {"turn": {"user_text": "my PIN is 4471", "n": 1}}, at=clock.now())

    assert jobs.erase(alice, ForgetTarget.of_phrase("my PIN 4471")) == 2
    assert jobs.dead_letters(alice) == [kept] and jobs.dead_letters(bob) == [theirs]
    [job] = jobs.pending_jobs()
    assert job.id == pending.id and job.payload == {"turn": {"user_text": REDACTED, "n": 1}}


def test_the_backlog_counts_waiting_jobs_of_every_scope_and_dates_the_oldest(
    backend: Backend, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    jobs = JobQueue(backend.open())
    assert jobs.backlog() == Backlog(0, None) and jobs.backlog().age(clock.now()) == timedelta(0)
    first = jobs.enqueue("monitor", alice, {}, at=clock.now())
    clock.advance(minutes=3)
    jobs.enqueue("monitor", bob, {}, at=clock.now(), held_by="another process")  # held jobs wait too
    clock.advance(minutes=4)
    assert jobs.backlog().pending == 2 and jobs.backlog().age(clock.now()) == timedelta(minutes=7)
    jobs.complete(first.id)
    assert jobs.backlog().pending == 1 and jobs.backlog().age(clock.now()) == timedelta(minutes=4)

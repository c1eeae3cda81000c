"""The job queue (SQLite): background work stored before it runs, and dead letters for work that failed.

- Jobs are the pending monitor / summarizer / reviewer work, stored before it runs so that a
  restart resumes it.
- Dead letters are work that failed for good (unreadable monitor output after a retry, a job out
  of attempts): visible to operators, never silently dropped. A job that runs out of attempts
  becomes one in the same transaction.

Finished work keeps no text: a job that is done (or became a dead letter) is emptied of its payload
at once and pruned later (`prune`); a dead letter keeps its text for the operator's retention period,
and any forget that matches it erases it (`erase`).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .forget_fence import fenced_write
from .forget_target import ForgetTarget
from .records import Scope
from .sqlite import SQLiteDatabase, iso

SCHEMA = """
CREATE TABLE IF NOT EXISTS dead_letters (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    error TEXT NOT NULL,
    at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done', 'dead')),
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before TEXT NOT NULL,
    last_error TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_pending ON jobs (state, seq);
"""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Work that failed for good, kept so an operator can see and replay it."""

    id: str
    kind: str
    scope: Scope
    payload: dict[str, Any]
    error: str
    at: datetime


@dataclass(frozen=True, slots=True)
class Job:
    """A unit of background work for one scope."""

    id: str
    kind: str
    scope: Scope
    payload: dict[str, Any]
    attempts: int
    not_before: datetime


def _insert_dead_letter(db: sqlite3.Connection, letter: DeadLetter) -> None:
    db.execute(
        "INSERT INTO dead_letters (id, kind, persona_id, user_id, payload, error, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            letter.id,
            letter.kind,
            letter.scope.persona_id,
            letter.scope.user_id,
            json.dumps(letter.payload, ensure_ascii=False),
            letter.error,
            iso(letter.at),
        ),
    )


class JobQueue:
    """Durable jobs and the dead letters of the work that failed."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self._db = db
        db.create(SCHEMA)

    # -- jobs ----------------------------------------------------------------------------------

    def enqueue(self, kind: str, scope: Scope, payload: dict[str, Any], *, at: datetime) -> Job:
        """Store a job durably; it runs once, even across restarts."""
        job = Job(f"job_{uuid.uuid4().hex[:16]}", kind, scope, payload, 0, at)
        with self._db.transaction() as db:
            db.execute(
                "INSERT INTO jobs (id, kind, persona_id, user_id, payload, not_before, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    job.id,
                    kind,
                    scope.persona_id,
                    scope.user_id,
                    json.dumps(payload, ensure_ascii=False),
                    iso(at),
                    iso(at),
                ),
            )
        return job

    def pending_jobs(self) -> list[Job]:
        """Every job not yet done, in the order it was enqueued."""
        return self._pending()

    def _pending(self, condition: str = "", params: tuple[str, ...] = ()) -> list[Job]:
        rows = self._db.query(
            "SELECT id, kind, persona_id, user_id, payload, attempts, not_before FROM jobs"
            f" WHERE state = 'pending' {condition} ORDER BY seq",
            params,
        )
        return [
            Job(row[0], row[1], Scope(row[2], row[3]), json.loads(row[4]), row[5], datetime.fromisoformat(row[6]))
            for row in rows
        ]

    def job(self, job_id: str) -> Job | None:
        """The job if it is still pending (a forget may have erased or changed it meanwhile)."""
        return next((job for job in self._pending("AND id = ?", (job_id,))), None)

    def complete(self, job_id: str) -> None:
        """Mark a job done; what it carried is not kept."""
        with self._db.transaction() as db:
            db.execute(f"UPDATE jobs SET state = 'done', {_EMPTIED} WHERE id = ?", (job_id,))

    def retry_later(self, job_id: str, *, error: str, not_before: datetime) -> None:
        """Count a failed attempt and hold the job until `not_before`."""
        with self._db.transaction() as db:
            db.execute(
                "UPDATE jobs SET attempts = attempts + 1, last_error = ?, not_before = ? WHERE id = ?",
                (error, iso(not_before), job_id),
            )

    def give_up(self, job: Job, *, error: str, at: datetime) -> DeadLetter:
        """Move a job that is out of attempts to the dead letters, in one step."""
        letter = DeadLetter(
            f"dl_{uuid.uuid4().hex[:12]}", job.kind, job.scope, {"job_id": job.id, **job.payload}, error, at
        )
        with fenced_write(job.scope), self._db.transaction() as db:
            _insert_dead_letter(db, letter)
            db.execute(f"UPDATE jobs SET state = 'dead', {_EMPTIED} WHERE id = ?", (job.id,))
        return letter

    # -- dead letters --------------------------------------------------------------------------

    def dead_letter(self, kind: str, scope: Scope, payload: dict[str, Any], error: str, *, at: datetime) -> DeadLetter:
        """Keep failed work where operators can see it."""
        letter = DeadLetter(f"dl_{uuid.uuid4().hex[:12]}", kind, scope, payload, error, at)
        with fenced_write(scope), self._db.transaction() as db:
            _insert_dead_letter(db, letter)
        return letter

    def dead_letters(self, scope: Scope | None = None) -> list[DeadLetter]:
        """Dead letters of one scope, or of all scopes for operators, oldest first."""
        sql = "SELECT id, kind, persona_id, user_id, payload, error, at FROM dead_letters"
        params: list[Any] = []
        if scope is not None:
            sql += " WHERE persona_id = ? AND user_id = ?"
            params = [scope.persona_id, scope.user_id]
        rows = self._db.query(sql + " ORDER BY seq", params)
        return [
            DeadLetter(
                row[0], row[1], Scope(row[2], row[3]), json.loads(row[4]), row[5], datetime.fromisoformat(row[6])
            )
            for row in rows
        ]

    # -- retention and erasure -----------------------------------------------------------------

    def prune(self, *, dead_letters_before: datetime) -> int:
        """Delete finished jobs, and dead letters written before the retention cutoff; returns how many rows went.

        The write-ahead log is truncated after, so the pages that held their text leave it too."""
        with self._db.transaction() as db:
            jobs = db.execute("DELETE FROM jobs WHERE state != 'pending'").rowcount
            letters = db.execute("DELETE FROM dead_letters WHERE at < ?", (iso(dead_letters_before),)).rowcount
        self._db.checkpoint()
        return jobs + letters

    def forget(self, scope: Scope) -> int:
        """Delete every job and dead letter of `scope`; returns how many rows went."""
        params = (scope.persona_id, scope.user_id)
        with self._db.transaction() as db:
            return sum(
                db.execute(f"DELETE FROM {table} WHERE persona_id = ? AND user_id = ?", params).rowcount
                for table in ("dead_letters", "jobs")
            )

    def erase(self, scope: Scope, target: ForgetTarget) -> int:
        """Erase what `target` matches from the scope's work: dead letters go, pending jobs lose the matching text.

        A pending job stays (the rest of what it carries still needs doing); where its payload quoted the
        forgotten text it now holds a placeholder. Returns how many rows changed.
        """
        params = (scope.persona_id, scope.user_id)
        letters = self._db.query(
            "SELECT seq, payload, error FROM dead_letters WHERE persona_id = ? AND user_id = ?", params
        )
        doomed = [
            (seq,) for seq, payload, error in letters if target.matches_serialized(payload) or target.matches(error)
        ]
        jobs = self._db.query("SELECT seq, payload, last_error FROM jobs WHERE persona_id = ? AND user_id = ?", params)
        redacted = [
            (json.dumps(target.redacted(json.loads(payload)), ensure_ascii=False), target.redacted(error), seq)
            for seq, payload, error in jobs
            if target.matches_serialized(payload) or target.matches(error)
        ]
        with self._db.transaction() as db:
            db.executemany("DELETE FROM dead_letters WHERE seq = ?", doomed)
            db.executemany("UPDATE jobs SET payload = ?, last_error = ? WHERE seq = ?", redacted)
        return len(doomed) + len(redacted)


# A finished job keeps that it ran, not what it carried.
_EMPTIED = "payload = '{}', last_error = ''"

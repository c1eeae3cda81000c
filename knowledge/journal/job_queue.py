"""The job queue: background work stored before it runs, and dead letters for work that failed.

- Jobs are the pending monitor / summarizer / reviewer work, stored before it runs so that a
  restart resumes it. A job may be held by the worker (process) that wrote it until what it waits
  for is over; one held by a worker that is gone is released to whoever runs jobs next. Each scope's
  jobs are taken oldest first (`next_job`), whichever process takes them.
- A job's progress is what a run of it decided and did so far (a model's verdict, the writes planned
  and how many are applied), so a run after a crash continues it instead of repeating it; it goes
  with the job.
- Dead letters are work that failed for good (unreadable monitor output after a retry, a job out
  of attempts): visible to operators, never silently dropped. A job that runs out of attempts
  becomes one in the same transaction.

Finished work keeps no text: a job that is done (or became a dead letter) is emptied of its payload
at once and pruned later (`prune`); a dead letter keeps its text for the operator's retention period,
and any forget that matches it erases it (`erase`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from knowledge.forget.fence import fenced_write
from knowledge.forget.target import ForgetTarget
from knowledge.records import Scope
from knowledge.sql.database import Database, Transaction, iso
from knowledge.sql.rows import Row

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
CREATE INDEX IF NOT EXISTS jobs_by_scope ON jobs (persona_id, user_id, state, seq);
CREATE TABLE IF NOT EXISTS job_progress (
    job_id TEXT PRIMARY KEY,
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    progress TEXT NOT NULL
);
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


@dataclass(frozen=True, slots=True)
class Backlog:
    """The background work waiting to run: how many jobs, and when the oldest of them was written."""

    pending: int
    oldest: datetime | None  # None when nothing waits

    def age(self, now: datetime) -> timedelta:
        """How long the oldest waiting job has waited (zero when nothing waits)."""
        return timedelta(0) if self.oldest is None else max(now - self.oldest, timedelta(0))


def new_letter_id() -> str:
    """A fresh dead-letter id, `dl_<hex>`."""
    return f"dl_{uuid.uuid4().hex[:12]}"


def _job(row: Row) -> Job:
    payload, not_before = json.loads(row["payload"]), datetime.fromisoformat(row["not_before"])
    return Job(row["id"], row["kind"], Scope(row["persona_id"], row["user_id"]), payload, row["attempts"], not_before)


def _dead_letter(row: Row) -> DeadLetter:
    payload, at = json.loads(row["payload"]), datetime.fromisoformat(row["at"])
    return DeadLetter(row["id"], row["kind"], Scope(row["persona_id"], row["user_id"]), payload, row["error"], at)


def _insert_dead_letter(db: Transaction, letter: DeadLetter) -> None:
    db.execute(
        "INSERT INTO dead_letters (id, kind, persona_id, user_id, payload, error, at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
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

    def __init__(self, db: Database) -> None:
        self._db = db
        db.create(SCHEMA)
        db.add_columns("jobs", {"held_by": "TEXT"})  # files made before jobs could be held: none is

    # -- jobs ----------------------------------------------------------------------------------

    def enqueue(
        self, kind: str, scope: Scope, payload: dict[str, Any], *, at: datetime, held_by: str | None = None
    ) -> Job:
        """Store a job durably; it runs once, even across restarts. `held_by`: the worker holding it back."""
        job = Job(f"job_{uuid.uuid4().hex[:16]}", kind, scope, payload, 0, at)
        with self._db.transaction() as db:
            db.execute(
                "INSERT INTO jobs (id, kind, persona_id, user_id, payload, not_before, created_at, held_by)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job.id,
                    kind,
                    scope.persona_id,
                    scope.user_id,
                    json.dumps(payload, ensure_ascii=False),
                    iso(at),
                    iso(at),
                    held_by,
                ),
            )
        return job

    def release(self, job_id: str, payload: dict[str, Any] | None = None) -> None:
        """Let a held job run, with the payload it learned while held, if any."""
        with self._db.transaction() as db:
            if payload is None:
                db.execute("UPDATE jobs SET held_by = NULL WHERE id = ?", (job_id,))
            else:
                db.execute(
                    "UPDATE jobs SET held_by = NULL, payload = ? WHERE id = ?",
                    (json.dumps(payload, ensure_ascii=False), job_id),
                )

    def next_job(self, scope: Scope) -> Job | None:
        """The scope's oldest pending job that nobody holds back: the one to run next."""
        found = self._pending(
            "AND persona_id = ? AND user_id = ? AND held_by IS NULL", (scope.persona_id, scope.user_id), limit=1
        )
        return found[0] if found else None

    def scopes_with_work(self) -> dict[Scope, int]:
        """Each scope with jobs to run (pending, not held back) and how many, the longest waiting first."""
        rows = self._db.query(
            "SELECT persona_id, user_id, COUNT(*) FROM jobs WHERE state = 'pending' AND held_by IS NULL"
            " GROUP BY persona_id, user_id ORDER BY MIN(seq)"
        )
        return {Scope(persona_id, user_id): int(count) for persona_id, user_id, count in rows}

    def release_orphans(self, alive: Callable[[str], bool]) -> int:
        """Release the jobs held by workers that are gone (a process that died mid-turn); returns how many."""
        holders = self._db.query("SELECT DISTINCT held_by FROM jobs WHERE state = 'pending' AND held_by IS NOT NULL")
        gone = [(holder,) for (holder,) in holders if not alive(holder)]
        if not gone:
            return 0
        with self._db.transaction() as db:
            return db.executemany(
                "UPDATE jobs SET held_by = NULL WHERE held_by = ? AND state = 'pending'", gone
            ).rowcount

    def backlog(self) -> Backlog:
        """The jobs not yet done, of every scope and process, and when the oldest was written."""
        (count,) = self._db.query("SELECT COUNT(*) AS pending FROM jobs WHERE state = 'pending'")
        oldest = self._db.query("SELECT created_at FROM jobs WHERE state = 'pending' ORDER BY seq LIMIT 1")
        return Backlog(count["pending"], datetime.fromisoformat(oldest[0]["created_at"]) if oldest else None)

    def pending_jobs(self) -> list[Job]:
        """Every job not yet done, in the order it was enqueued."""
        return self._pending()

    def _pending(self, condition: str = "", params: tuple[str, ...] = (), *, limit: int | None = None) -> list[Job]:
        rows = self._db.query(
            "SELECT id, kind, persona_id, user_id, payload, attempts, not_before FROM jobs"
            f" WHERE state = 'pending' {condition} ORDER BY seq{'' if limit is None else f' LIMIT {int(limit)}'}",
            params,
        )
        return [_job(row) for row in rows]

    def job(self, job_id: str) -> Job | None:
        """The job if it is still pending (a forget may have erased or changed it meanwhile)."""
        return next((job for job in self._pending("AND id = ?", (job_id,))), None)

    def progress(self, job_id: str) -> dict[str, Any]:
        """What earlier runs of the job saved of their progress (empty for a first run)."""
        rows = self._db.query("SELECT progress FROM job_progress WHERE job_id = ?", (job_id,))
        return json.loads(rows[0][0]) if rows else {}

    def save_progress(self, job: Job, progress: dict[str, Any]) -> None:
        """Keep the job's progress so far, replacing what was kept before (never into a scope forgotten since
        the job began: its plan may quote what was forgotten)."""
        with fenced_write(job.scope), self._db.transaction() as db:
            db.execute(
                "INSERT INTO job_progress (job_id, persona_id, user_id, progress) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (job_id) DO UPDATE SET progress = excluded.progress",
                (job.id, job.scope.persona_id, job.scope.user_id, json.dumps(progress, ensure_ascii=False)),
            )

    def complete(self, job_id: str) -> None:
        """Mark a job done; what it carried and its progress are not kept."""
        with self._db.transaction() as db:
            db.execute(f"UPDATE jobs SET state = 'done', {_EMPTIED} WHERE id = ?", (job_id,))
            db.execute("DELETE FROM job_progress WHERE job_id = ?", (job_id,))

    def retry_later(self, job_id: str, *, error: str, not_before: datetime) -> None:
        """Count a failed attempt and hold the job until `not_before`."""
        with self._db.transaction() as db:
            db.execute(
                "UPDATE jobs SET attempts = attempts + 1, last_error = ?, not_before = ? WHERE id = ?",
                (error, iso(not_before), job_id),
            )

    def give_up(self, job: Job, *, error: str, at: datetime) -> DeadLetter:
        """Move a job that is out of attempts to the dead letters, in one step."""
        letter = DeadLetter(new_letter_id(), job.kind, job.scope, {"job_id": job.id, **job.payload}, error, at)
        with fenced_write(job.scope), self._db.transaction() as db:
            _insert_dead_letter(db, letter)
            db.execute(f"UPDATE jobs SET state = 'dead', {_EMPTIED} WHERE id = ?", (job.id,))
            db.execute("DELETE FROM job_progress WHERE job_id = ?", (job.id,))
        return letter

    # -- dead letters --------------------------------------------------------------------------

    def dead_letter(
        self,
        kind: str,
        scope: Scope,
        payload: dict[str, Any],
        error: str,
        *,
        at: datetime,
        letter_id: str | None = None,
    ) -> DeadLetter:
        """Keep failed work where operators can see it; under a `letter_id` already kept, it is kept once."""
        letter = DeadLetter(letter_id or new_letter_id(), kind, scope, payload, error, at)
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
        return [_dead_letter(row) for row in rows]

    def letter(self, letter_id: str) -> DeadLetter | None:
        """One dead letter, if it is still kept."""
        rows = self._db.query(
            "SELECT id, kind, persona_id, user_id, payload, error, at FROM dead_letters WHERE id = ?", (letter_id,)
        )
        return _dead_letter(rows[0]) if rows else None

    def discard(self, letter_id: str) -> bool:
        """Delete a dead letter an operator dealt with; False if it was not kept."""
        with self._db.transaction() as db:
            return db.execute("DELETE FROM dead_letters WHERE id = ?", (letter_id,)).rowcount > 0

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
        """Delete every job (with its progress) and dead letter of `scope`; returns how many rows went."""
        params = (scope.persona_id, scope.user_id)
        with self._db.transaction() as db:
            return sum(
                db.execute(f"DELETE FROM {table} WHERE persona_id = ? AND user_id = ?", params).rowcount
                for table in ("dead_letters", "jobs", "job_progress")
            )

    def erase(self, scope: Scope, target: ForgetTarget) -> int:
        """Erase what `target` matches from the scope's work: dead letters go, pending jobs lose the matching text.

        A pending job stays (the rest of what it carries still needs doing); where its payload quoted the
        forgotten text it now holds a placeholder, and progress that quoted it is dropped, so the job plans
        again from what is left instead of writing the forgotten text back. Returns how many rows changed.
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
        progress = self._db.query(
            "SELECT job_id, progress FROM job_progress WHERE persona_id = ? AND user_id = ?", params
        )
        replan = [(job_id,) for job_id, saved in progress if target.matches_serialized(saved)]
        with self._db.transaction() as db:
            db.executemany("DELETE FROM dead_letters WHERE seq = ?", doomed)
            db.executemany("UPDATE jobs SET payload = ?, last_error = ? WHERE seq = ?", redacted)
            db.executemany("DELETE FROM job_progress WHERE job_id = ?", replan)
        return len(doomed) + len(redacted) + len(replan)


# A finished job keeps that it ran, not what it carried.
_EMPTIED = "payload = '{}', last_error = ''"

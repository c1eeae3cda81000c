"""The journal (SQLite): memory history, dead letters and the durable queue of background jobs.

- History keeps the old version of every memory the background roles changed or deleted (who,
  when, old -> new); it is never used for retrieval and `/forget` purges it.
- Dead letters are work that failed for good (unreadable monitor output after a retry, a job out
  of attempts): visible to operators, never silently dropped.
- Jobs are the pending monitor / summarizer / reviewer work, stored before it runs so that a
  restart resumes it.
- Token usage is the tokens each role's model calls spent, summed per day, role and model.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .records import Scope
from .sqlite import SQLiteDatabase

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    action TEXT NOT NULL,
    actor TEXT NOT NULL,
    old_content TEXT,
    new_content TEXT,
    detail TEXT NOT NULL DEFAULT '',
    at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS history_by_scope ON memory_history (persona_id, user_id, memory_id);
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
CREATE TABLE IF NOT EXISTS token_usage (
    day TEXT NOT NULL,
    role TEXT NOT NULL,
    model TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (day, role, model)
);
"""


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One change to a memory: what it was, what it became, who did it and when."""

    memory_id: str
    action: str  # "update", "delete", "promote", "keep", ...
    actor: str  # "background_ai", "reviewer", "decay", "user", "operator"
    old_content: str | None
    new_content: str | None
    detail: str
    at: datetime


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
class TokenUsage:
    """What one role's calls to one model have spent."""

    role: str
    model: str
    calls: int
    prompt_tokens: int
    completion_tokens: int


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
            _iso(letter.at),
        ),
    )


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat()


class Journal:
    """History, dead letters and jobs in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self._db = SQLiteDatabase(path, _SCHEMA)

    # -- history -------------------------------------------------------------------------------

    def record_change(
        self,
        scope: Scope,
        memory_id: str,
        *,
        action: str,
        actor: str,
        old_content: str | None,
        new_content: str | None,
        at: datetime,
        detail: str = "",
    ) -> None:
        """Remember how a memory changed."""
        self.record_changes([(scope, HistoryEntry(memory_id, action, actor, old_content, new_content, detail, at))])

    def record_changes(self, changes: Iterable[tuple[Scope, HistoryEntry]]) -> None:
        """Remember many changes, of any scopes, in one transaction."""
        rows = [
            (
                scope.persona_id,
                scope.user_id,
                entry.memory_id,
                entry.action,
                entry.actor,
                entry.old_content,
                entry.new_content,
                entry.detail,
                _iso(entry.at),
            )
            for scope, entry in changes
        ]
        if not rows:
            return
        with self._db.transaction() as db:
            db.executemany(
                "INSERT INTO memory_history (persona_id, user_id, memory_id, action, actor, old_content,"
                " new_content, detail, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    def history(self, scope: Scope, memory_id: str | None = None) -> list[HistoryEntry]:
        """The changes in `scope` (to one memory, or all), oldest first."""
        sql = (
            "SELECT memory_id, action, actor, old_content, new_content, detail, at FROM memory_history"
            " WHERE persona_id = ? AND user_id = ?"
        )
        params: list[Any] = [scope.persona_id, scope.user_id]
        if memory_id is not None:
            sql += " AND memory_id = ?"
            params.append(memory_id)
        rows = self._db.query(sql + " ORDER BY seq", params)
        return [HistoryEntry(*row[:6], at=datetime.fromisoformat(row[6])) for row in rows]

    # -- dead letters --------------------------------------------------------------------------

    def dead_letter(self, kind: str, scope: Scope, payload: dict[str, Any], error: str, *, at: datetime) -> DeadLetter:
        """Keep failed work where operators can see it."""
        letter = DeadLetter(f"dl_{uuid.uuid4().hex[:12]}", kind, scope, payload, error, at)
        with self._db.transaction() as db:
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
            DeadLetter(row[0], row[1], Scope(row[2], row[3]), json.loads(row[4]), row[5], datetime.fromisoformat(row[6]))
            for row in rows
        ]

    # -- jobs ----------------------------------------------------------------------------------

    def enqueue(self, kind: str, scope: Scope, payload: dict[str, Any], *, at: datetime) -> Job:
        """Store a job durably; it runs once, even across restarts."""
        job = Job(f"job_{uuid.uuid4().hex[:16]}", kind, scope, payload, 0, at)
        with self._db.transaction() as db:
            db.execute(
                "INSERT INTO jobs (id, kind, persona_id, user_id, payload, not_before, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job.id, kind, scope.persona_id, scope.user_id, json.dumps(payload, ensure_ascii=False), _iso(at), _iso(at)),
            )
        return job

    def pending_jobs(self) -> list[Job]:
        """Every job not yet done, in the order it was enqueued."""
        rows = self._db.query(
            "SELECT id, kind, persona_id, user_id, payload, attempts, not_before FROM jobs"
            " WHERE state = 'pending' ORDER BY seq"
        )
        return [
            Job(row[0], row[1], Scope(row[2], row[3]), json.loads(row[4]), row[5], datetime.fromisoformat(row[6]))
            for row in rows
        ]

    def complete(self, job_id: str) -> None:
        """Mark a job done."""
        with self._db.transaction() as db:
            db.execute("UPDATE jobs SET state = 'done' WHERE id = ?", (job_id,))

    def retry_later(self, job_id: str, *, error: str, not_before: datetime) -> None:
        """Count a failed attempt and hold the job until `not_before`."""
        with self._db.transaction() as db:
            db.execute(
                "UPDATE jobs SET attempts = attempts + 1, last_error = ?, not_before = ? WHERE id = ?",
                (error, _iso(not_before), job_id),
            )

    def give_up(self, job: Job, *, error: str, at: datetime) -> DeadLetter:
        """Move a job that is out of attempts to the dead letters, in one step."""
        letter = DeadLetter(f"dl_{uuid.uuid4().hex[:12]}", job.kind, job.scope, {"job_id": job.id, **job.payload}, error, at)
        with self._db.transaction() as db:
            _insert_dead_letter(db, letter)
            db.execute("UPDATE jobs SET state = 'dead', last_error = ? WHERE id = ?", (error, job.id))
        return letter

    # -- token usage ---------------------------------------------------------------------------

    def record_usage(self, role: str, model: str, prompt_tokens: int, completion_tokens: int, *, at: datetime) -> None:
        """Add one model call to the day's totals."""
        with self._db.transaction() as db:
            db.execute(
                "INSERT INTO token_usage (day, role, model, calls, prompt_tokens, completion_tokens)"
                " VALUES (?, ?, ?, 1, ?, ?) ON CONFLICT (day, role, model) DO UPDATE SET calls = calls + 1,"
                " prompt_tokens = prompt_tokens + excluded.prompt_tokens,"
                " completion_tokens = completion_tokens + excluded.completion_tokens",
                (_iso(at)[:10], role, model, prompt_tokens, completion_tokens),
            )

    def token_usage(self) -> list[TokenUsage]:
        """Tokens spent per role and model since the data directory was created."""
        rows = self._db.query(
            "SELECT role, model, SUM(calls), SUM(prompt_tokens), SUM(completion_tokens) FROM token_usage"
            " GROUP BY role, model ORDER BY role, model"
        )
        return [TokenUsage(*row) for row in rows]

    # -- forgetting ----------------------------------------------------------------------------

    def forget(self, scope: Scope) -> int:
        """Delete every history row, dead letter and job of `scope`; returns how many rows went."""
        params = (scope.persona_id, scope.user_id)
        with self._db.transaction() as db:
            return sum(
                db.execute(f"DELETE FROM {table} WHERE persona_id = ? AND user_id = ?", params).rowcount
                for table in ("memory_history", "dead_letters", "jobs")
            )

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

"""Ongoing threads: what is going on in a user's life now (a job hunt, a move, a parent in hospital).

Each thread has a title, since when it goes on, and its latest news; the monitor opens, updates and closes
threads with ops its code checks (`[OPEN]`, `[NEWS:id]`, `[CLOSE:id]`), and the active ones are in the
prompt's Now section. A thread records the messages it was learned from and where (a private chat, or which
group), so a forget deletes at once every thread that carries what was forgotten or was learned from a
forgotten message (`erase`), and a group prompt shows only the threads learned in that group.
Every write is idempotent (the same thread id, values set, id lists merged), so a monitor job re-run after a
crash applies each once. A closed thread is kept `CLOSED_KEPT`, then deleted (`prune`): what became of it is
the story's, not the present's.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from knowledge.forget.fence import fenced_write
from knowledge.forget.target import ForgetTarget
from knowledge.records import Scope
from knowledge.sql.database import Database, iso
from knowledge.sql.rows import Row

SCHEMA = """
CREATE TABLE IF NOT EXISTS ongoing_threads (
    id TEXT PRIMARY KEY,
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    title TEXT NOT NULL,
    news TEXT NOT NULL DEFAULT '',
    since TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    closed_at TEXT,
    message_ids TEXT NOT NULL DEFAULT '[]',
    places TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS ongoing_threads_by_scope ON ongoing_threads (persona_id, user_id, closed_at);
"""
MAX_ACTIVE_THREADS = 8  # more at once is not "what is going on now" but a diary
CLOSED_KEPT = timedelta(days=30)


def new_thread_id() -> str:
    """A fresh thread id, `thr_<hex>`."""
    return f"thr_{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True, slots=True)
class OngoingThread:
    """Something going on in the user's life: since when, the latest news, and where it was learned."""

    id: str
    title: str
    news: str
    since: datetime
    updated_at: datetime
    closed_at: datetime | None
    message_ids: tuple[str, ...]
    places: tuple[str | None, ...]  # where it was learned: None for a private chat, else the group's id


def _thread(row: Row) -> OngoingThread:
    closed = row["closed_at"]
    return OngoingThread(
        id=row["id"],
        title=row["title"],
        news=row["news"],
        since=datetime.fromisoformat(row["since"]),
        updated_at=datetime.fromisoformat(row["updated_at"]),
        closed_at=None if closed is None else datetime.fromisoformat(closed),
        message_ids=tuple(json.loads(row["message_ids"])),
        places=tuple(json.loads(row["places"])),
    )


def _merged(old: str, new: Sequence[str | None]) -> str:
    return json.dumps(list(dict.fromkeys([*json.loads(old), *new])))


class OngoingThreads:
    """Every scope's ongoing threads."""

    def __init__(self, db: Database) -> None:
        self._db = db
        db.create(SCHEMA)

    def active(self, scope: Scope) -> list[OngoingThread]:
        """The scope's threads still going on, the latest news first."""
        return self._select("AND closed_at IS NULL ORDER BY updated_at DESC", scope)

    def all(self, scope: Scope) -> list[OngoingThread]:
        """Every thread of the scope, closed ones too, the latest first."""
        return self._select("ORDER BY updated_at DESC", scope)

    def _select(self, condition: str, scope: Scope) -> list[OngoingThread]:
        rows = self._db.query(
            f"SELECT * FROM ongoing_threads WHERE persona_id = ? AND user_id = ? {condition}",
            (scope.persona_id, scope.user_id),
        )
        return [_thread(row) for row in rows]

    def open(
        self,
        scope: Scope,
        thread_id: str,
        title: str,
        news: str,
        *,
        since: datetime,
        at: datetime,
        message_ids: Sequence[str],
        place: str | None,
    ) -> None:
        """A new thread under the id it was planned with (opened twice, it is kept once)."""
        with fenced_write(scope), self._db.transaction() as db:
            db.execute(
                "INSERT INTO ongoing_threads (id, persona_id, user_id, title, news, since, updated_at, message_ids,"
                " places) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (
                    thread_id,
                    scope.persona_id,
                    scope.user_id,
                    title,
                    news,
                    iso(since),
                    iso(at),
                    json.dumps(list(message_ids)),
                    json.dumps([place]),
                ),
            )

    def add_news(
        self,
        scope: Scope,
        thread_id: str,
        news: str,
        *,
        at: datetime,
        message_ids: Sequence[str],
        place: str | None,
        close: bool = False,
    ) -> bool:
        """The thread's latest news (and, with `close`, its end); False if the scope has no such thread."""
        with fenced_write(scope), self._db.transaction() as db:
            row = db.execute(
                "SELECT message_ids, places FROM ongoing_threads WHERE id = ? AND persona_id = ? AND user_id = ?",
                (thread_id, scope.persona_id, scope.user_id),
            ).fetchone()
            if row is None:
                return False
            db.execute(
                "UPDATE ongoing_threads SET news = ?, updated_at = ?, message_ids = ?, places = ?,"
                " closed_at = CASE WHEN ? THEN COALESCE(closed_at, ?) ELSE closed_at END WHERE id = ?",
                (
                    news,
                    iso(at),
                    _merged(row["message_ids"], message_ids),
                    _merged(row["places"], [place]),
                    close,
                    iso(at),
                    thread_id,
                ),
            )
        return True

    def erase(self, scope: Scope, message_ids: Collection[str], target: ForgetTarget) -> int:
        """Delete the threads learned from one of these forgotten messages or carrying `target`; returns how many."""
        forgotten = set(message_ids)
        doomed = [
            (thread.id,)
            for thread in self.all(scope)
            if forgotten & set(thread.message_ids) or target.matches(thread.title) or target.matches(thread.news)
        ]
        with self._db.transaction() as db:
            db.executemany("DELETE FROM ongoing_threads WHERE id = ?", doomed)
        return len(doomed)

    def prune(self, now: datetime) -> int:
        """Delete the threads closed more than `CLOSED_KEPT` before `now`; returns how many."""
        with self._db.transaction() as db:
            return db.execute(
                "DELETE FROM ongoing_threads WHERE closed_at IS NOT NULL AND closed_at < ?", (iso(now - CLOSED_KEPT),)
            ).rowcount

    def forget(self, scope: Scope) -> int:
        """Delete every thread of the scope; returns how many."""
        with self._db.transaction() as db:
            return db.execute(
                "DELETE FROM ongoing_threads WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id)
            ).rowcount

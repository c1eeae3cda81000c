"""`/forget <what>` questions waiting for the user's answer, in the database every process shares.

The user sees what would be forgotten and answers with a button (or, in the terminal, by typing yes); the
answer may reach another process than the one that asked (Telegram webhooks behind a proxy, another
Discord shard) or come after a restart, so the question is kept here, not in memory. It holds what the
user asked to forget, so it lives no longer than needed: an answer takes it, `/forget` (everything)
deletes the scope's, and questions older than `REQUEST_TTL` are expired.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from knowledge.records import Scope
from knowledge.sql.database import Database, iso

REQUEST_TTL = timedelta(hours=1)

SCHEMA = """
CREATE TABLE IF NOT EXISTS forget_requests (
    key TEXT PRIMARY KEY,
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    what TEXT NOT NULL,
    asked_at TEXT NOT NULL
);
"""


class ForgetRequests:
    """The open `/forget <what>` questions, by the key their buttons carry."""

    def __init__(self, db: Database) -> None:
        self._db = db
        db.create(SCHEMA)

    def ask(self, scope: Scope, what: str, at: datetime) -> str:
        """Keep a question; returns its key (16 hex digits: it fits a button's data)."""
        key = secrets.token_hex(8)
        with self._db.transaction() as db:
            db.execute("DELETE FROM forget_requests WHERE asked_at < ?", (iso(at - REQUEST_TTL),))
            db.execute(
                "INSERT INTO forget_requests (key, persona_id, user_id, what, asked_at) VALUES (?, ?, ?, ?, ?)",
                (key, scope.persona_id, scope.user_id, what, iso(at)),
            )
        return key

    def take(self, key: str, now: datetime) -> tuple[Scope, str] | None:
        """The question `key` asked, removed (an answer is given once); None if unknown, taken or expired."""
        with self._db.transaction() as db:
            row = db.execute(
                "SELECT persona_id, user_id, what, asked_at FROM forget_requests WHERE key = ?", (key,)
            ).fetchone()
            db.execute("DELETE FROM forget_requests WHERE key = ?", (key,))
        if row is None or row["asked_at"] < iso(now - REQUEST_TTL):
            return None
        return Scope(row["persona_id"], row["user_id"]), row["what"]

    def forget(self, scope: Scope) -> int:
        """Delete the scope's open questions; returns how many."""
        with self._db.transaction() as db:
            return db.execute(
                "DELETE FROM forget_requests WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id)
            ).rowcount

    def prune(self, now: datetime) -> int:
        """Delete the questions nobody answered in time; returns how many."""
        with self._db.transaction() as db:
            return db.execute("DELETE FROM forget_requests WHERE asked_at < ?", (iso(now - REQUEST_TTL),)).rowcount

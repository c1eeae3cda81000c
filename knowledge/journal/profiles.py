"""The profile: one short portrait of each user (who they are, their people, likes, routines, what matters now).

One row per scope. The background rewrites it from the user's facts (`core/background/profile_writer.py`),
never more than once a day: the monitor marks the scope when a turn changed its facts (`mark_changed`), and
the hourly pass asks for a rewrite of the marked scopes whose profile is a day old or missing (`due`). The
operator may write it by hand (`companion memory profile edit`); the next rewrite starts from that text.

The profile records the memories it was written from (`memory_ids`). A forget that deletes one of them, or
whose words it carries, clears it at once (`erase`) and marks the scope, so it is written again later from
what remains; `/forget` (everything) deletes the row.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from knowledge.forget.fence import fenced_write
from knowledge.forget.target import ForgetTarget
from knowledge.records import Scope
from knowledge.sql.database import Database, Transaction, iso

SCHEMA = """
CREATE TABLE IF NOT EXISTS profiles (
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    text TEXT NOT NULL DEFAULT '',
    memory_ids TEXT NOT NULL DEFAULT '[]',
    basis TEXT NOT NULL DEFAULT '',
    author TEXT NOT NULL DEFAULT '',
    written_at TEXT,
    changed_at TEXT,
    PRIMARY KEY (persona_id, user_id)
);
CREATE INDEX IF NOT EXISTS profiles_changed ON profiles (changed_at);
"""
REWRITE_EVERY = timedelta(days=1)  # a profile is rewritten at most this often


@dataclass(frozen=True, slots=True)
class Profile:
    """A user's portrait, what it was written from, and by whom."""

    text: str
    memory_ids: tuple[str, ...]  # the memories it was written from (none: written by the operator)
    basis: str  # a fingerprint of those memories as they read then: unchanged facts need no rewrite
    author: str  # "background" or "operator"
    written_at: datetime


class Profiles:
    """Every scope's profile, and which scopes' facts changed since theirs was written."""

    def __init__(self, db: Database) -> None:
        self._db = db
        db.create(SCHEMA)

    def get(self, scope: Scope) -> Profile | None:
        """The scope's profile, if one is written."""
        rows = self._db.query(
            "SELECT text, memory_ids, basis, author, written_at FROM profiles"
            " WHERE persona_id = ? AND user_id = ? AND text != ''",
            (scope.persona_id, scope.user_id),
        )
        if not rows:
            return None
        row = rows[0]
        written = datetime.fromisoformat(row["written_at"])
        return Profile(row["text"], tuple(json.loads(row["memory_ids"])), row["basis"], row["author"], written)

    def last_written(self, scope: Scope) -> datetime | None:
        """When the scope's profile was last written (even if cleared since)."""
        rows = self._db.query(
            "SELECT written_at FROM profiles WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id)
        )
        return datetime.fromisoformat(rows[0][0]) if rows and rows[0][0] else None

    def mark_changed(self, scope: Scope, at: datetime) -> None:
        """The scope's facts changed at `at`: its profile is rewritten once its day is over."""
        with self._db.transaction() as db:
            db.execute(
                "INSERT INTO profiles (persona_id, user_id, changed_at) VALUES (?, ?, ?)"
                " ON CONFLICT (persona_id, user_id)"
                " DO UPDATE SET changed_at = COALESCE(profiles.changed_at, excluded.changed_at)",
                (scope.persona_id, scope.user_id, iso(at)),
            )

    def due(self, now: datetime, every: timedelta = REWRITE_EVERY) -> list[Scope]:
        """The scopes whose facts changed and whose profile is missing or at least `every` old."""
        rows = self._db.query(
            "SELECT persona_id, user_id FROM profiles WHERE changed_at IS NOT NULL"
            " AND (written_at IS NULL OR written_at <= ?) ORDER BY changed_at",
            (iso(now - every),),
        )
        return [Scope(row["persona_id"], row["user_id"]) for row in rows]

    def write(self, scope: Scope, profile: Profile, *, requested_at: datetime | None) -> None:
        """Keep `profile`; the changes marked up to `requested_at` (what it was written from) are settled, later
        ones keep the scope marked (None: none is, for a profile written by hand).

        A background write is fenced: never into a scope forgotten since its job began."""
        with fenced_write(scope), self._db.transaction() as db:
            db.execute(
                "INSERT INTO profiles (persona_id, user_id, text, memory_ids, basis, author, written_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (persona_id, user_id) DO UPDATE SET"
                " text = excluded.text, memory_ids = excluded.memory_ids, basis = excluded.basis,"
                " author = excluded.author, written_at = excluded.written_at",
                (
                    scope.persona_id,
                    scope.user_id,
                    profile.text,
                    json.dumps(profile.memory_ids),
                    profile.basis,
                    profile.author,
                    iso(profile.written_at),
                ),
            )
            if requested_at is not None:
                _settle(db, scope, requested_at)

    def settle(self, scope: Scope, *, requested_at: datetime) -> None:
        """Nothing to rewrite for the changes marked up to `requested_at` (the facts read as before)."""
        with self._db.transaction() as db:
            _settle(db, scope, requested_at)

    def clear(self, scope: Scope, at: datetime) -> bool:
        """Delete the profile's text (it is written again later, from the facts as they are then)."""
        with self._db.transaction() as db:
            cursor = db.execute(
                "UPDATE profiles SET text = '', memory_ids = '[]', basis = '', author = '', changed_at = ?"
                " WHERE persona_id = ? AND user_id = ? AND text != ''",
                (iso(at), scope.persona_id, scope.user_id),
            )
        return cursor.rowcount > 0

    def erase(self, scope: Scope, memory_ids: Collection[str], target: ForgetTarget, *, at: datetime) -> int:
        """Clear the profile if it was written from one of these forgotten memories or carries `target`."""
        profile = self.get(scope)
        if profile is None:
            return 0
        if set(profile.memory_ids) & set(memory_ids) or target.matches(profile.text):
            return int(self.clear(scope, at))
        return 0

    def forget(self, scope: Scope) -> int:
        """Delete the scope's profile and its marks; returns how many rows went."""
        with self._db.transaction() as db:
            return db.execute(
                "DELETE FROM profiles WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id)
            ).rowcount


def _settle(db: Transaction, scope: Scope, requested_at: datetime) -> None:
    db.execute(
        "UPDATE profiles SET changed_at = NULL WHERE persona_id = ? AND user_id = ? AND changed_at <= ?",
        (scope.persona_id, scope.user_id, iso(requested_at)),
    )

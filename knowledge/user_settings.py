"""Per-user settings: choices a user makes about how the companion treats them.

One row per scope (persona, user): a choice made with one persona is about that relationship, and
`/forget` (everything) forgets it with the rest of the scope. Each setting is a column read and
written through typed methods; a setting a user never chose reads as its default, which protects
them. A new setting is a new entry in `_COLUMNS`: SQLite files made before it get the column on open;
on PostgreSQL it takes a migration (`migrations/`).
"""

from __future__ import annotations

from pathlib import Path

from .database import Database, opened
from .discretion import Audience
from .records import Scope

_SCHEMA = """
CREATE TABLE IF NOT EXISTS user_settings (
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    PRIMARY KEY (persona_id, user_id)
);
"""
# column -> its SQL type; NULL always means "never chosen": the default applies
_COLUMNS = {
    "share_in_groups": "INTEGER",  # 1: everything said anywhere may be used in groups
}


class UserSettings:
    """The settings of every scope, in one table of the companion's database."""

    def __init__(self, where: Database | Path) -> None:
        """`where`: the database, or the path of an embedded SQLite file."""
        self._db = opened(where, _SCHEMA)
        self._db.add_columns("user_settings", _COLUMNS)

    def shares_in_groups(self, scope: Scope) -> bool:
        """Whether the user let everything they said (in private or another group) be used in groups; default no."""
        return bool(self._get(scope, "share_in_groups"))

    def set_shares_in_groups(self, scope: Scope, on: bool) -> None:
        """`/share on|off`."""
        self._set(scope, "share_in_groups", int(on))

    def audience(self, scope: Scope, conversation_id: str, *, group: bool) -> Audience:
        """Who reads what the companion recalls for this user in this conversation."""
        return Audience.of(conversation_id, group=group, shares_everything=group and self.shares_in_groups(scope))

    def forget(self, scope: Scope) -> int:
        """Drop every setting of the scope (they read as defaults again); returns how many rows went."""
        with self._db.transaction() as db:
            cursor = db.execute(
                "DELETE FROM user_settings WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id)
            )
        return cursor.rowcount

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def _get(self, scope: Scope, column: str) -> object:
        rows = self._db.query(
            f"SELECT {column} FROM user_settings WHERE persona_id = ? AND user_id = ?",
            (scope.persona_id, scope.user_id),
        )
        return rows[0][0] if rows else None

    def _set(self, scope: Scope, column: str, value: object) -> None:
        with self._db.transaction() as db:
            db.execute(
                f"INSERT INTO user_settings (persona_id, user_id, {column}) VALUES (?, ?, ?)"
                f" ON CONFLICT (persona_id, user_id) DO UPDATE SET {column} = excluded.{column}",
                (scope.persona_id, scope.user_id, value),
            )

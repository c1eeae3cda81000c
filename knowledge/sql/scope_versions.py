"""Scope versions: how often each scope's stored memories or messages changed, shared by every process.

In server mode each process keeps in-memory search snapshots of the scopes it serves
(`scope_cache.py`), while other processes write to the same stores. Every write bumps its scope's
version once it reached the store, and a snapshot is used only while the version it was loaded at
is still the current one: one indexed read before a search, so a write or a `/forget` made by any
process is seen by every other before its next search.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from knowledge.records import Scope
from knowledge.sql.database import Database

SnapshotKind = Literal["memories", "history"]


class ScopeVersions:
    """The versions of one kind of snapshot (memories, or history), per scope."""

    def __init__(self, db: Database, kind: SnapshotKind) -> None:
        self._db = db
        self._kind = kind

    def current(self, scope: Scope) -> int:
        """The scope's version now (0: never written since versions were kept)."""
        rows = self._db.query(
            "SELECT version FROM scope_versions WHERE persona_id = ? AND user_id = ? AND kind = ?",
            (scope.persona_id, scope.user_id, self._kind),
        )
        return int(rows[0][0]) if rows else 0

    def bump(self, scopes: Iterable[Scope]) -> dict[Scope, int]:
        """Count a write to each scope (after it reached the store); returns their new versions."""
        bumped: dict[Scope, int] = {}
        with self._db.transaction() as db:
            for scope in sorted(set(scopes), key=str):  # one lock order for every writer
                [(version,)] = db.execute(
                    "INSERT INTO scope_versions (persona_id, user_id, kind, version) VALUES (?, ?, ?, 1)"
                    " ON CONFLICT (persona_id, user_id, kind) DO UPDATE SET version = scope_versions.version + 1"
                    " RETURNING version",
                    (scope.persona_id, scope.user_id, self._kind),
                ).fetchall()
                bumped[scope] = int(version)
        return bumped

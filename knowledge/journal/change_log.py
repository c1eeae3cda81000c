"""The change log: the old version of every memory that was changed or deleted.

Who changed it, when, old -> new: for operators (`companion memory history`) and for an import's
undo. It is never used for retrieval, and forgetting keeps no content in it: a forget keeps *that*
a memory changed (when, by whom, how) and erases *what* it said (`scrub`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from knowledge.forget.fence import fenced_write
from knowledge.forget.target import ForgetTarget
from knowledge.records import Scope
from knowledge.sql.database import Database, iso
from knowledge.sql.rows import Row

SCHEMA = """
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
"""


@dataclass(frozen=True, slots=True)
class LoggedChange:
    """One row of the change log: what a memory was, what it became, who changed it and when."""

    memory_id: str
    action: str  # "update", "delete", "promote", "keep", ...
    actor: str  # "background_ai", "reviewer", "decay", "user", "operator"
    old_content: str | None
    new_content: str | None
    detail: str
    at: datetime


def _logged(row: Row) -> LoggedChange:
    return LoggedChange(**{**row, "at": datetime.fromisoformat(row["at"])})


class ChangeLog:
    """Every change to a memory, per scope, oldest first."""

    def __init__(self, db: Database) -> None:
        self._db = db
        db.create(SCHEMA)

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
        self.record_changes([(scope, LoggedChange(memory_id, action, actor, old_content, new_content, detail, at))])

    def record_changes(self, changes: Iterable[tuple[Scope, LoggedChange]]) -> None:
        """Remember many changes, of any scopes, in one transaction.

        A change recorded again (the same memory, action, actor, detail and moment: a job re-run after
        a crash) is kept once."""
        changes = list(changes)
        rows = [
            (
                scope.persona_id,
                scope.user_id,
                change.memory_id,
                change.action,
                change.actor,
                change.old_content,
                change.new_content,
                change.detail,
                iso(change.at),
            )
            for scope, change in changes
        ]
        if not rows:
            return
        with ExitStack() as fences:
            for scope in sorted({scope for scope, _ in changes}, key=str):  # one lock order for every writer
                fences.enter_context(fenced_write(scope))  # no content may come back into a forgotten scope
            self._write(rows)

    def _write(self, rows: Sequence[tuple[object, ...]]) -> None:
        with self._db.transaction() as db:
            db.executemany(
                "INSERT INTO memory_history (persona_id, user_id, memory_id, action, actor, old_content,"
                " new_content, detail, at) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS ("
                " SELECT 1 FROM memory_history WHERE persona_id = ? AND user_id = ? AND memory_id = ?"
                " AND action = ? AND actor = ? AND detail = ? AND at = ?)",
                [(*row, *row[:5], *row[7:]) for row in rows],
            )

    def changes(self, scope: Scope, memory_id: str | None = None) -> list[LoggedChange]:
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
        return [_logged(row) for row in rows]

    def scrub(self, scope: Scope, memory_ids: Collection[str], target: ForgetTarget) -> int:
        """Erase the content of the scope's rows about these memories or matching `target`; returns how many.

        The rows stay (that a memory changed, when and by whom); a detail that quotes the text goes too.
        """
        rows = self._db.query(
            "SELECT seq, memory_id, old_content, new_content, detail FROM memory_history"
            " WHERE persona_id = ? AND user_id = ? AND (old_content IS NOT NULL OR new_content IS NOT NULL"
            " OR detail != '')",
            (scope.persona_id, scope.user_id),
        )
        scrubbed = [
            ("" if target.matches(detail) else detail, seq)
            for seq, memory_id, old, new, detail in rows
            if memory_id in memory_ids or any(target.matches(text or "") for text in (old, new, detail))
        ]
        with self._db.transaction() as db:
            db.executemany(
                "UPDATE memory_history SET old_content = NULL, new_content = NULL, detail = ? WHERE seq = ?", scrubbed
            )
        return len(scrubbed)

    def forget(self, scope: Scope) -> int:
        """Delete every row of `scope`; returns how many went."""
        with self._db.transaction() as db:
            return db.execute(
                "DELETE FROM memory_history WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id)
            ).rowcount

"""Working memory: the raw recent messages of each conversation, kept in SQLite.

Every message is written here before any LLM sees it, so a crash or restart loses nothing. A
conversation's *window* is what the prompt may use (at most `window_size` messages). Messages that
leave the window are not deleted: they become `archived` until the summarizer turns them into an
episode (then `summarized`), and `/forget` is the only thing that removes them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from .records import Scope
from .sqlite import SQLiteDatabase

MessageRole = Literal["user", "assistant"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    persona_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    user_id TEXT NOT NULL,          -- the speaker, or for a reply the user it answers
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    speaker_name TEXT NOT NULL,
    content TEXT NOT NULL,
    sent_at TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'window' CHECK (state IN ('window', 'archived', 'summarized')),
    source_id TEXT                  -- the platform's unique message id ("discord:123"), for edits and deletes
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages (persona_id, conversation_id, state, seq);
CREATE INDEX IF NOT EXISTS messages_by_scope ON messages (persona_id, user_id);
"""
# Databases created before `source_id` existed get the column; the index needs it, so it comes after.
_MIGRATIONS = (
    ("source_id", "ALTER TABLE messages ADD COLUMN source_id TEXT"),
)
_SOURCE_INDEX = "CREATE INDEX IF NOT EXISTS messages_by_source ON messages (source_id)"


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message of a conversation as working memory keeps it."""

    id: str
    persona_id: str
    conversation_id: str
    user_id: str
    role: MessageRole
    speaker_name: str
    content: str
    sent_at: datetime


class WorkingMemory:
    """SQLite-backed, per-(persona, conversation) message windows."""

    def __init__(self, path: Path, *, window_size: int = 30, overflow_batch: int = 1) -> None:
        """`overflow_batch`: how many of the oldest messages leave together once the window overflows,
        so the summarizer gets a real piece of conversation rather than one message at a time."""
        if window_size < 2:
            raise ValueError("the working-memory window must hold at least one exchange")
        if not 1 <= overflow_batch <= window_size:
            raise ValueError("the overflow batch must be between 1 and the window size")
        self.window_size = window_size
        self.overflow_batch = overflow_batch
        self._db = SQLiteDatabase(path, _SCHEMA)
        columns = {row[1] for row in self._db.query("PRAGMA table_info(messages)")}
        with self._db.transaction() as db:
            for column, statement in _MIGRATIONS:
                if column not in columns:
                    db.execute(statement)
            db.execute(_SOURCE_INDEX)

    def append(
        self,
        persona_id: str,
        conversation_id: str,
        *,
        role: MessageRole,
        user_id: str,
        speaker_name: str,
        content: str,
        sent_at: datetime,
        source_id: str | None = None,
    ) -> StoredMessage:
        """Store a message durably and move the oldest out of the window when it overflows."""
        message = StoredMessage(
            id=f"msg_{uuid.uuid4().hex[:16]}",
            persona_id=persona_id,
            conversation_id=conversation_id,
            user_id=user_id,
            role=role,
            speaker_name=speaker_name,
            content=content,
            sent_at=sent_at.astimezone(timezone.utc),
        )
        with self._db.transaction() as db:
            db.execute(
                "INSERT INTO messages (id, persona_id, conversation_id, user_id, role, speaker_name,"
                " content, sent_at, source_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    message.id,
                    persona_id,
                    conversation_id,
                    user_id,
                    role,
                    speaker_name,
                    content,
                    message.sent_at.isoformat(),
                    source_id,
                ),
            )
            [(size,)] = db.execute(
                "SELECT COUNT(*) FROM messages WHERE persona_id = ? AND conversation_id = ? AND state = 'window'",
                (persona_id, conversation_id),
            ).fetchall()
            if size > self.window_size:
                db.execute(
                    "UPDATE messages SET state = 'archived' WHERE seq IN ("
                    " SELECT seq FROM messages WHERE persona_id = ? AND conversation_id = ?"
                    " AND state = 'window' ORDER BY seq LIMIT ?)",
                    (persona_id, conversation_id, max(self.overflow_batch, size - self.window_size)),
                )
        return message

    def window(self, persona_id: str, conversation_id: str) -> list[StoredMessage]:
        """The conversation's current window, oldest first."""
        return self._select(
            "persona_id = ? AND conversation_id = ? AND state = 'window'", (persona_id, conversation_id)
        )

    def archived(self, persona_id: str, conversation_id: str) -> list[StoredMessage]:
        """Messages that left the window and still wait to be summarised, oldest first."""
        return self._select(
            "persona_id = ? AND conversation_id = ? AND state = 'archived'", (persona_id, conversation_id)
        )

    def close_window(self, persona_id: str, conversation_id: str) -> int:
        """Start the conversation afresh (`/new`): the window's messages become archived."""
        with self._db.transaction() as db:
            cursor = db.execute(
                "UPDATE messages SET state = 'archived' WHERE persona_id = ? AND conversation_id = ?"
                " AND state = 'window'",
                (persona_id, conversation_id),
            )
        return cursor.rowcount

    def mark_summarized(self, message_ids: list[str]) -> int:
        """Archived messages that are now part of an episode."""
        if not message_ids:
            return 0
        marks = ",".join("?" * len(message_ids))
        with self._db.transaction() as db:
            cursor = db.execute(
                f"UPDATE messages SET state = 'summarized' WHERE state = 'archived' AND id IN ({marks})", message_ids
            )
        return cursor.rowcount

    def idle_conversations(self, before: datetime) -> list[tuple[str, str]]:
        """(persona, conversation) pairs whose window's newest message is older than `before`."""
        rows = self._db.query(
            "SELECT persona_id, conversation_id FROM messages WHERE state = 'window'"
            " GROUP BY persona_id, conversation_id HAVING MAX(sent_at) < ?",
            (before.astimezone(timezone.utc).isoformat(),),
        )
        return [(persona_id, conversation_id) for persona_id, conversation_id in rows]

    def by_source(self, source_id: str) -> StoredMessage | None:
        """The message a person sent with this platform message id, if it is stored."""
        found = self._select("source_id = ? AND role = 'user'", (source_id,))
        return found[0] if found else None

    def edit(self, source_id: str, content: str) -> StoredMessage | None:
        """The person edited a message on their platform: keep the new text (any state); None if unknown."""
        with self._db.transaction() as db:
            db.execute("UPDATE messages SET content = ? WHERE source_id = ? AND role = 'user'", (content, source_id))
        return self.by_source(source_id)

    def messages_of(self, scope: Scope) -> list[StoredMessage]:
        """Every stored message of the scope, in every state and conversation, oldest first."""
        return self._select("persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id))

    def messages_after(self, seq: int, limit: int) -> list[tuple[int, StoredMessage]]:
        """Up to `limit` messages of any scope stored after position `seq`, with their positions, oldest first."""
        rows = self._db.query(
            f"SELECT seq, {_COLUMNS} FROM messages WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit)
        )
        return [(row[0], _message(row[1:])) for row in rows]

    def existing(self, ids: Iterable[str]) -> set[str]:
        """Which of these message ids are still stored."""
        wanted = list(ids)
        marks = ",".join("?" * len(wanted))
        return {row[0] for row in self._db.query(f"SELECT id FROM messages WHERE id IN ({marks})", wanted)}

    def forget_messages(self, scope: Scope, ids: Iterable[str]) -> int:
        """Delete the scope's messages with these ids (ids of other scopes do nothing)."""
        wanted = list(ids)
        if not wanted:
            return 0
        marks = ",".join("?" * len(wanted))
        with self._db.transaction() as db:
            cursor = db.execute(
                f"DELETE FROM messages WHERE persona_id = ? AND user_id = ? AND id IN ({marks})",
                (scope.persona_id, scope.user_id, *wanted),
            )
        return cursor.rowcount

    def forget(self, scope: Scope) -> int:
        """Delete every message the user wrote, and every reply to them, for this persona."""
        with self._db.transaction() as db:
            cursor = db.execute(
                "DELETE FROM messages WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id)
            )
        return cursor.rowcount

    def count(self, scope: Scope) -> int:
        """How many stored messages belong to this scope (any state)."""
        [(count,)] = self._db.query(
            "SELECT COUNT(*) FROM messages WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id)
        )
        return int(count)

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def _select(self, where: str, params: tuple[object, ...]) -> list[StoredMessage]:
        rows = self._db.query(f"SELECT {_COLUMNS} FROM messages WHERE {where} ORDER BY seq", params)
        return [_message(row) for row in rows]


_COLUMNS = "id, persona_id, conversation_id, user_id, role, speaker_name, content, sent_at"


def _message(row: tuple[object, ...]) -> StoredMessage:
    return StoredMessage(*row[:7], sent_at=datetime.fromisoformat(str(row[7])))  # type: ignore[arg-type]

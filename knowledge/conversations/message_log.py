"""The message log: every message of every conversation, in SQLite, from the moment it arrives.

Every message is written here before any LLM sees it, so a crash or restart loses nothing. Each row
also carries its working-memory state (`working_memory.py` moves it from the window to archived to
summarized); this module treats messages as a record: found by scope, by position for indexing, by
platform id for edits and deletes, and deleted only when forgotten.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from knowledge.records import Scope, StoredMessage
from knowledge.sql.database import Database, iso, opened
from knowledge.sql.rows import Row

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
    source_id TEXT,                 -- the platform's unique message id ("discord:123"), for edits and deletes
    in_group INTEGER NOT NULL DEFAULT 0,  -- said in a group chat (1) or in private (0)
    indexed INTEGER NOT NULL DEFAULT 0  -- has its history index entry (`history.py`)
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages (persona_id, conversation_id, state, seq);
CREATE INDEX IF NOT EXISTS messages_by_scope ON messages (persona_id, user_id);
"""
# Databases created before `source_id` existed get the column; the index needs it, so it comes after.
# Messages stored before `in_group` existed read as said in private: what they reveal stays discreet.
# Messages stored before `indexed` existed are marked by the history index, which knows how far it got.
_ADDED_COLUMNS = {
    "source_id": "TEXT",
    "in_group": "INTEGER NOT NULL DEFAULT 0",
    "indexed": "INTEGER NOT NULL DEFAULT 0",
}
_LATER_INDEXES = """
CREATE INDEX IF NOT EXISTS messages_by_source ON messages (source_id);
CREATE INDEX IF NOT EXISTS messages_unindexed ON messages (seq) WHERE indexed = 0;
"""


@dataclass(frozen=True, slots=True)
class ScopeActivity:
    """A scope's messages: how many, the last one's time, and the name the user last wrote under."""

    scope: Scope
    user_name: str
    messages: int
    last_at: datetime


class MessageLog:
    """Every stored message, in one table shared with working memory's window states."""

    def __init__(self, where: Database | Path) -> None:
        """`where`: the database, or the path of an embedded SQLite file."""
        self.db = opened(where, _SCHEMA)  # working memory moves rows between window states through it
        self.db.add_columns("messages", _ADDED_COLUMNS)
        self.db.create(_LATER_INDEXES)

    def by_source(self, source_id: str) -> StoredMessage | None:
        """The message a person sent with this platform message id, if it is stored."""
        found = self.select("source_id = ? AND role = 'user'", (source_id,))
        return found[0] if found else None

    def edit(self, source_id: str, content: str) -> StoredMessage | None:
        """The person edited a message on their platform: keep the new text (any state); None if unknown."""
        with self.db.transaction() as db:
            db.execute("UPDATE messages SET content = ? WHERE source_id = ? AND role = 'user'", (content, source_id))
        return self.by_source(source_id)

    def previous_from_user(self, scope: Scope, message_id: str) -> StoredMessage | None:
        """The user's message to this persona stored just before `message_id`, in any conversation."""
        rows = self.db.query(
            f"SELECT {_COLUMNS} FROM messages WHERE persona_id = ? AND user_id = ? AND role = 'user'"
            " AND seq < (SELECT seq FROM messages WHERE id = ?) ORDER BY seq DESC LIMIT 1",
            (scope.persona_id, scope.user_id, message_id),
        )
        return _message(rows[0]) if rows else None

    def reply_before(self, message_id: str) -> StoredMessage | None:
        """The persona's latest message in the conversation of `message_id` stored before it (None: none)."""
        columns = ", ".join(f"reply.{column}" for column in _COLUMNS.split(", "))
        rows = self.db.query(
            f"SELECT {columns} FROM messages AS said JOIN messages AS reply ON reply.persona_id = said.persona_id"
            " AND reply.conversation_id = said.conversation_id AND reply.seq < said.seq"
            " WHERE said.id = ? AND reply.role = 'assistant' ORDER BY reply.seq DESC LIMIT 1",
            (message_id,),
        )
        return _message(rows[0]) if rows else None

    def rewrite(self, message_id: str, content: str) -> StoredMessage | None:
        """Replace a stored message's words (a photo's description, known after it was stored); None if unknown."""
        with self.db.transaction() as db:
            db.execute("UPDATE messages SET content = ? WHERE id = ?", (content, message_id))
        found = self.get([message_id])
        return found[0] if found else None

    def get(self, ids: Iterable[str]) -> list[StoredMessage]:
        """The messages with these ids that are still stored, in the order they were stored."""
        wanted = list(ids)
        return self.select(f"id IN ({','.join('?' * len(wanted))})", tuple(wanted)) if wanted else []

    def messages_of(self, scope: Scope) -> list[StoredMessage]:
        """Every stored message of the scope, in every state and conversation, oldest first."""
        return self.select("persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id))

    def messages_by_id(self, scope: Scope, ids: Iterable[str]) -> list[StoredMessage]:
        """The scope's messages with these ids, oldest first (ids of other scopes are simply absent)."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:  # `IN ()` is SQLite's alone
            return []
        marks = ",".join("?" * len(wanted))
        return self.select(f"persona_id = ? AND user_id = ? AND id IN ({marks})", (*_key(scope), *wanted))

    def replies_in(self, persona_id: str, conversation_ids: Collection[str]) -> list[StoredMessage]:
        """The persona's replies in these conversations, to whichever user, oldest first."""
        if not conversation_ids:
            return []
        marks = ",".join("?" * len(conversation_ids))
        return self.select(
            f"persona_id = ? AND role = 'assistant' AND conversation_id IN ({marks})", (persona_id, *conversation_ids)
        )

    def unindexed(self, limit: int) -> list[StoredMessage]:
        """Up to `limit` messages of any scope without a history index entry yet, oldest first."""
        rows = self.db.query(f"SELECT {_COLUMNS} FROM messages WHERE indexed = 0 ORDER BY seq LIMIT ?", (limit,))
        return [_message(row) for row in rows]

    def any_stored(self) -> bool:
        """Whether any message of any conversation is stored."""
        return bool(self.db.query("SELECT 1 FROM messages LIMIT 1"))

    def existing(self, ids: Iterable[str]) -> set[str]:
        """Which of these message ids are still stored."""
        wanted = list(ids)
        if not wanted:
            return set()
        marks = ",".join("?" * len(wanted))
        return {row[0] for row in self.db.query(f"SELECT id FROM messages WHERE id IN ({marks})", wanted)}

    def forget_messages(self, scope: Scope, ids: Iterable[str]) -> int:
        """Delete the scope's messages with these ids (ids of other scopes do nothing)."""
        wanted = list(ids)
        if not wanted:
            return 0
        marks = ",".join("?" * len(wanted))
        with self.db.transaction() as db:
            cursor = db.execute(
                f"DELETE FROM messages WHERE persona_id = ? AND user_id = ? AND id IN ({marks})",
                (scope.persona_id, scope.user_id, *wanted),
            )
        return cursor.rowcount

    def forget(self, scope: Scope) -> int:
        """Delete every message the user wrote, and every reply to them, for this persona."""
        with self.db.transaction() as db:
            cursor = db.execute(
                "DELETE FROM messages WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id)
            )
        return cursor.rowcount

    def days_written(self, scope: Scope, since: datetime, until: datetime) -> int:
        """On how many different days (UTC) the user wrote to this persona between `since` and `until`."""
        [(days,)] = self.db.query(
            "SELECT COUNT(DISTINCT SUBSTR(sent_at, 1, 10)) FROM messages WHERE persona_id = ? AND user_id = ?"
            " AND role = 'user' AND sent_at >= ? AND sent_at <= ?",
            (scope.persona_id, scope.user_id, iso(since), iso(until)),
        )
        return int(days)

    def scopes_since(self, since: datetime) -> list[Scope]:
        """The scopes that have a message sent at `since` or later."""
        rows = self.db.query("SELECT DISTINCT persona_id, user_id FROM messages WHERE sent_at >= ?", (iso(since),))
        return [Scope(row["persona_id"], row["user_id"]) for row in rows]

    def sent_since(self, scope: Scope, since: datetime) -> list[datetime]:
        """When each of the scope's messages since `since` was sent, in the order they were stored."""
        rows = self.db.query(
            "SELECT sent_at FROM messages WHERE persona_id = ? AND user_id = ? AND sent_at >= ? ORDER BY seq",
            (scope.persona_id, scope.user_id, iso(since)),
        )
        return [datetime.fromisoformat(row["sent_at"]) for row in rows]

    def sent_between(self, scope: Scope, start: datetime, end: datetime) -> list[StoredMessage]:
        """The scope's messages sent in [start, end), in the order they were stored."""
        return self.select(
            "persona_id = ? AND user_id = ? AND sent_at >= ? AND sent_at < ?",
            (scope.persona_id, scope.user_id, iso(start), iso(end)),
        )

    def count(self, scope: Scope) -> int:
        """How many stored messages belong to this scope (any state)."""
        [(count,)] = self.db.query(
            "SELECT COUNT(*) FROM messages WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id)
        )
        return int(count)

    def scopes(self, matching: str = "", *, limit: int = 100) -> list[ScopeActivity]:
        """The scopes that have messages, most recently active first; `matching`: only those whose persona, user
        id or user name contains it (any case)."""
        pattern = "%" + matching.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = self.db.query(
            "SELECT persona_id, user_id, COUNT(*) AS messages, MAX(sent_at) AS last_at,"
            " MAX(CASE WHEN role = 'user' THEN speaker_name END) AS user_name"
            " FROM messages GROUP BY persona_id, user_id"
            " HAVING LOWER(persona_id) LIKE ? ESCAPE '\\' OR LOWER(user_id) LIKE ? ESCAPE '\\'"
            " OR LOWER(COALESCE(MAX(CASE WHEN role = 'user' THEN speaker_name END), '')) LIKE ? ESCAPE '\\'"
            " ORDER BY last_at DESC LIMIT ?",
            (pattern, pattern, pattern, limit),
        )
        return [
            ScopeActivity(
                Scope(row["persona_id"], row["user_id"]),
                row["user_name"] or "",
                int(row["messages"]),
                datetime.fromisoformat(row["last_at"]),
            )
            for row in rows
        ]

    def close(self) -> None:
        """Close the database connection."""
        self.db.close()

    def select(self, where: str, params: tuple[object, ...]) -> list[StoredMessage]:
        """The messages matching an SQL condition on the `messages` table, in the order they were stored."""
        rows = self.db.query(f"SELECT {_COLUMNS} FROM messages WHERE {where} ORDER BY seq", params)
        return [_message(row) for row in rows]


def _key(scope: Scope) -> tuple[str, str]:
    return scope.persona_id, scope.user_id


_COLUMNS = "id, persona_id, conversation_id, user_id, role, speaker_name, content, sent_at, in_group"


def _message(row: Row) -> StoredMessage:
    return StoredMessage(
        **{**row, "sent_at": datetime.fromisoformat(row["sent_at"]), "in_group": bool(row["in_group"])}
    )

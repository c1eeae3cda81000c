"""Working memory: the window of recent messages each conversation's prompt may use.

The layer: docs/development/design-rules.md#memory-layers.

A conversation's *window* is at most `window_size` messages of the message log. Messages that leave
it are not deleted: they become `archived` until the summarizer turns them into an episode (then
`summarized`); the log keeps them all, and forgetting is the only thing that removes them.
"""

from __future__ import annotations

from datetime import UTC, datetime

from knowledge.conversations.message_log import MessageLog
from knowledge.records import MessageRole, StoredMessage, new_message_id


class WorkingMemory:
    """Per-(persona, conversation) message windows over the message log."""

    def __init__(self, log: MessageLog, *, window_size: int = 30, overflow_batch: int = 1) -> None:
        """`overflow_batch`: how many of the oldest messages leave together once the window overflows,
        so the summarizer gets a real piece of conversation rather than one message at a time."""
        if window_size < 2:
            raise ValueError("the working-memory window must hold at least one exchange")
        if not 1 <= overflow_batch <= window_size:
            raise ValueError("the overflow batch must be between 1 and the window size")
        self.log = log
        self.window_size = window_size
        self.overflow_batch = overflow_batch
        self._db = log.db

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
        in_group: bool = False,
        message_id: str | None = None,
    ) -> StoredMessage:
        """Store a message durably and move the oldest out of the window when it overflows.

        `message_id`: an id chosen beforehand, so work about the message can be recorded before it is stored."""
        message = StoredMessage(
            id=message_id or new_message_id(),
            persona_id=persona_id,
            conversation_id=conversation_id,
            user_id=user_id,
            role=role,
            speaker_name=speaker_name,
            content=content,
            sent_at=sent_at.astimezone(UTC),
            in_group=in_group,
        )
        with self._db.transaction() as db:
            db.execute(
                "INSERT INTO messages (id, persona_id, conversation_id, user_id, role, speaker_name,"
                " content, sent_at, source_id, in_group) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                    int(in_group),
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
        return self.log.select(
            "persona_id = ? AND conversation_id = ? AND state = 'window'", (persona_id, conversation_id)
        )

    def archived(self, persona_id: str, conversation_id: str) -> list[StoredMessage]:
        """Messages that left the window and still wait to be summarised, oldest first."""
        return self.log.select(
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
            (before.astimezone(UTC).isoformat(),),
        )
        return [(persona_id, conversation_id) for persona_id, conversation_id in rows]

    def close(self) -> None:
        """Close the message log."""
        self.log.close()

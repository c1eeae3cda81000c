"""Reply traces: for each answered turn, what was in its prompt, by id only, with the model, tokens and timings.

A trace holds ids and counts, never text: what a memory or a message said is looked up when the trace is
read, in the trace's own scope, so a forgotten memory shows as gone. Traces are kept a configured number of
days, and a user's go with everything else when they are forgotten.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from knowledge.records import Scope
from knowledge.sql.database import Database, iso
from knowledge.sql.rows import Row

SCHEMA = """
CREATE TABLE IF NOT EXISTS reply_traces (
    reply_id TEXT PRIMARY KEY,
    message_id TEXT NOT NULL,
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    at TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    first_ms INTEGER NOT NULL,      -- from the message to the reply's first words
    total_ms INTEGER NOT NULL,      -- from the message to the reply's end
    window_messages INTEGER NOT NULL,  -- recent messages of the conversation in the prompt
    memory_ids TEXT NOT NULL,       -- JSON: the memories the model saw, in the prompt or through the recall tool
    message_ids TEXT NOT NULL,      -- JSON: the earlier messages quoted in the prompt
    recalls TEXT NOT NULL           -- JSON: the recall tool's calls (kinds, time window, ids found, refusal)
);
CREATE INDEX IF NOT EXISTS reply_traces_by_scope ON reply_traces (persona_id, user_id, at);
CREATE INDEX IF NOT EXISTS reply_traces_by_time ON reply_traces (at);
"""


@dataclass(frozen=True, slots=True)
class ReplyTrace:
    """Why one reply was what it was: ids of what its prompt held, the model, tokens and timings."""

    scope: Scope
    conversation_id: str
    message_id: str
    reply_id: str
    at: datetime
    model: str
    prompt_tokens: int
    completion_tokens: int
    first_ms: int
    total_ms: int
    window_messages: int
    memory_ids: tuple[str, ...] = ()
    message_ids: tuple[str, ...] = ()
    recalls: tuple[dict[str, Any], ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class UserUsage:
    """The replies one user got from one model on one day (UTC), and their tokens."""

    day: str
    scope: Scope
    model: str
    replies: int
    prompt_tokens: int
    completion_tokens: int


class ReplyTraces:
    """The traces of recent replies, per scope."""

    def __init__(self, db: Database) -> None:
        self._db = db
        db.create(SCHEMA)

    def record(self, trace: ReplyTrace) -> None:
        """Keep one reply's trace."""
        with self._db.transaction() as db:
            db.execute(
                "INSERT INTO reply_traces (reply_id, message_id, persona_id, user_id, conversation_id, at, model,"
                " prompt_tokens, completion_tokens, first_ms, total_ms, window_messages, memory_ids, message_ids,"
                " recalls) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    trace.reply_id,
                    trace.message_id,
                    trace.scope.persona_id,
                    trace.scope.user_id,
                    trace.conversation_id,
                    iso(trace.at),
                    trace.model,
                    trace.prompt_tokens,
                    trace.completion_tokens,
                    trace.first_ms,
                    trace.total_ms,
                    trace.window_messages,
                    json.dumps(trace.memory_ids),
                    json.dumps(trace.message_ids),
                    json.dumps(trace.recalls),
                ),
            )

    def recent(self, scope: Scope, *, limit: int = 20) -> list[ReplyTrace]:
        """The scope's latest traces, newest first."""
        rows = self._db.query(
            "SELECT * FROM reply_traces WHERE persona_id = ? AND user_id = ? ORDER BY at DESC LIMIT ?",
            (scope.persona_id, scope.user_id, limit),
        )
        return [_trace(row) for row in rows]

    def tokens_since(self, scope: Scope, since: datetime) -> int:
        """The tokens (prompt and reply) the scope's replies took since `since`."""
        [(tokens,)] = self._db.query(
            "SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0) FROM reply_traces"
            " WHERE persona_id = ? AND user_id = ? AND at >= ?",
            (scope.persona_id, scope.user_id, iso(since)),
        )
        return int(tokens)

    def usage(self, since: datetime) -> list[UserUsage]:
        """The replies and their tokens per day (UTC), user and model since `since`, latest day first."""
        rows = self._db.query(
            "SELECT SUBSTR(at, 1, 10) AS day, persona_id, user_id, model, COUNT(*) AS replies,"
            " SUM(prompt_tokens) AS prompt_tokens, SUM(completion_tokens) AS completion_tokens FROM reply_traces"
            " WHERE at >= ? GROUP BY SUBSTR(at, 1, 10), persona_id, user_id, model"
            " ORDER BY day DESC, persona_id, user_id, model",
            (iso(since),),
        )
        return [
            UserUsage(
                row["day"],
                Scope(row["persona_id"], row["user_id"]),
                row["model"],
                int(row["replies"]),
                int(row["prompt_tokens"]),
                int(row["completion_tokens"]),
            )
            for row in rows
        ]

    def forget(self, scope: Scope) -> int:
        """Delete the scope's traces; returns how many went."""
        with self._db.transaction() as db:
            return db.execute(
                "DELETE FROM reply_traces WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id)
            ).rowcount

    def prune(self, before: datetime) -> int:
        """Delete the traces older than `before`; returns how many went."""
        with self._db.transaction() as db:
            return db.execute("DELETE FROM reply_traces WHERE at < ?", (iso(before),)).rowcount


def _trace(row: Row) -> ReplyTrace:
    return ReplyTrace(
        scope=Scope(row["persona_id"], row["user_id"]),
        conversation_id=row["conversation_id"],
        message_id=row["message_id"],
        reply_id=row["reply_id"],
        at=datetime.fromisoformat(row["at"]),
        model=row["model"],
        prompt_tokens=int(row["prompt_tokens"]),
        completion_tokens=int(row["completion_tokens"]),
        first_ms=int(row["first_ms"]),
        total_ms=int(row["total_ms"]),
        window_messages=int(row["window_messages"]),
        memory_ids=tuple(json.loads(row["memory_ids"])),
        message_ids=tuple(json.loads(row["message_ids"])),
        recalls=tuple(json.loads(row["recalls"])),
    )

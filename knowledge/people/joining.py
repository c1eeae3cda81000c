"""Joining two memories: what one user (an identity, or a person) holds moves into the person it joined.

Everything keyed by (persona, user) changes hands, in every store: memories (chromadb, moved as they are,
vectors and all), messages with their search vectors, the change log, jobs and dead letters, check-ins,
open forget questions, ongoing threads, reply traces, settings. Then, per persona:
- a memory both sides held (the same words, the same category) is kept once: the older copy;
- settings both sides chose differently keep the older side's choice (older: who spoke to the persona
  first), and the join says which; a setting only one side chose is kept;
- check-ins go where the person spoke in private last: the more recent of the two contacts;
- the profiles of both sides go, and the person's is written again from the joined facts.

Each moved scope is held like a forget holds it (`ForgetFence.forgetting`): background work that read it
before cannot write into a user that no longer exists. Moving is idempotent: a move that stopped half-way
is finished by running it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from knowledge.conversations.history import ConversationHistory
from knowledge.forget.fence import ForgetFence
from knowledge.journal.user_settings import SETTING_COLUMNS
from knowledge.memory.chroma_store import ChromaKnowledgeBase
from knowledge.records import Scope
from knowledge.sql.database import Database, Transaction, iso, opened

# Tables whose rows belong to one (persona, user) and move as they are.
MOVED_TABLES = (
    "messages",
    "message_vectors",
    "memory_history",
    "dead_letters",
    "jobs",
    "job_progress",
    "checkins",
    "forget_requests",
    "ongoing_threads",
    "reply_traces",
)
# Tables with one row per (persona, user): merged by the rules above.
KEYED_TABLES = ("user_settings", "checkin_contacts", "profiles")
NEVER = "~"  # sorts after every ISO moment: a user who never spoke is the younger


@dataclass(slots=True)
class JoinReport:
    """What a join moved and merged, over every persona."""

    memories: int = 0
    messages: int = 0
    conversations: int = 0
    duplicates: int = 0  # memories held by both sides, kept once
    kept_settings: list[str] = field(default_factory=list)  # settings both chose: the older side's stays


class Joiner:
    """Moves users' memories into the person they joined, across the SQL stores and chromadb."""

    def __init__(
        self, where: Database | Path, knowledge: ChromaKnowledgeBase, history: ConversationHistory, fence: ForgetFence
    ) -> None:
        self._db = opened(where)
        self._owned = isinstance(where, Path)  # a shared database is closed by whoever opened it
        self._knowledge = knowledge
        self._history = history
        self._fence = fence

    def move(self, movers: Sequence[str], person_id: str, at: datetime) -> JoinReport:
        """Move what each of `movers` holds, with every persona, into `person_id`, at `at`."""
        report = JoinReport()
        for mover in movers:
            for persona_id in sorted(self._personas_of(mover)):
                self._move_scope(Scope(persona_id, mover), Scope(persona_id, person_id), at, report)
        return report

    def holds_anything(self, user_id: str) -> bool:
        """Whether anything of `user_id` is kept with any persona (after a forget: whether its links may go)."""
        return bool(self._personas_of(user_id))

    def close(self) -> None:
        if self._owned:
            self._db.close()

    def _personas_of(self, user_id: str) -> set[str]:
        found = set(self._knowledge.personas_of(user_id))
        for table in (*MOVED_TABLES, *KEYED_TABLES):
            rows = self._db.query(f"SELECT DISTINCT persona_id FROM {table} WHERE user_id = ?", (user_id,))
            found.update(str(row["persona_id"]) for row in rows)
        return found

    def _move_scope(self, source: Scope, target: Scope, at: datetime, report: JoinReport) -> None:
        with self._fence.forgetting(source), self._fence.lock(target):
            source_first = self._first_words(source) < self._first_words(target)
            with self._db.transaction() as db:
                conversations = db.execute(
                    "SELECT COUNT(DISTINCT conversation_id) AS n FROM messages WHERE persona_id = ? AND user_id = ?",
                    (source.persona_id, source.user_id),
                ).fetchone()
                report.conversations += int(conversations["n"]) if conversations else 0
                for table in MOVED_TABLES:
                    moved = db.execute(
                        f"UPDATE {table} SET user_id = ? WHERE persona_id = ? AND user_id = ?",
                        (target.user_id, source.persona_id, source.user_id),
                    ).rowcount
                    report.messages += moved if table == "messages" else 0
                report.kept_settings += _merge_settings(db, source, target, source_first=source_first)
                _merge_contacts(db, source, target)
                _rewrite_profile(db, source, target, at)
            report.memories += self._knowledge.move_user(source.persona_id, source.user_id, target.user_id)
            report.duplicates += self._drop_duplicates(target)
        self._history.reload([source, target])

    def _first_words(self, scope: Scope) -> str:
        rows = self._db.query(
            "SELECT MIN(sent_at) AS first FROM messages WHERE persona_id = ? AND user_id = ?",
            (scope.persona_id, scope.user_id),
        )
        return str(rows[0]["first"]) if rows and rows[0]["first"] else NEVER

    def _drop_duplicates(self, scope: Scope) -> int:
        """Memories with the same words and category: the oldest stays."""
        seen: set[tuple[str, str]] = set()
        doubles = []
        for record in sorted(self._knowledge.memories(scope), key=lambda record: (record.created_at, record.id)):
            key = (record.category, " ".join(record.content.casefold().split()))
            if key in seen:
                doubles.append(record.id)
            seen.add(key)
        return self._knowledge.delete(scope, doubles)


def _rewrite_profile(db: Transaction, source: Scope, target: Scope, at: datetime) -> None:
    """Neither side's portrait is the person's: both go, and the person is marked for a rewrite."""
    for scope in (source, target):
        db.execute("DELETE FROM profiles WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id))
    db.execute(
        "INSERT INTO profiles (persona_id, user_id, changed_at) VALUES (?, ?, ?)",
        (target.persona_id, target.user_id, iso(at)),
    )


def _row(db: Transaction, table: str, scope: Scope, columns: str) -> dict[str, object] | None:
    row = db.execute(
        f"SELECT {columns} FROM {table} WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id)
    ).fetchone()
    return None if row is None else dict(zip(columns.split(", "), row, strict=True))


def _merge_settings(db: Transaction, source: Scope, target: Scope, *, source_first: bool) -> list[str]:
    """The source's settings into the target's; returns the settings both chose differently (the older kept)."""
    columns = ", ".join(SETTING_COLUMNS)
    moving = _row(db, "user_settings", source, columns)
    if moving is None:
        return []
    staying = _row(db, "user_settings", target, columns) or dict.fromkeys(SETTING_COLUMNS)
    older, younger = (moving, staying) if source_first else (staying, moving)
    merged = {column: older[column] if older[column] is not None else younger[column] for column in SETTING_COLUMNS}
    conflicts = [
        column
        for column in SETTING_COLUMNS
        if moving[column] is not None and staying[column] is not None and moving[column] != staying[column]
    ]
    db.execute("DELETE FROM user_settings WHERE persona_id = ? AND user_id = ?", (source.persona_id, source.user_id))
    marks = ", ".join("?" for _ in SETTING_COLUMNS)
    updates = ", ".join(f"{column} = excluded.{column}" for column in SETTING_COLUMNS)
    db.execute(
        f"INSERT INTO user_settings (persona_id, user_id, {columns}) VALUES (?, ?, {marks})"
        f" ON CONFLICT (persona_id, user_id) DO UPDATE SET {updates}",
        (target.persona_id, target.user_id, *merged.values()),
    )
    return conflicts


def _merge_contacts(db: Transaction, source: Scope, target: Scope) -> None:
    """Check-ins go where the person last spoke in private: the more recent contact stays."""
    columns = "conversation_id, last_user_at, unanswered, off_reason"
    moving = _row(db, "checkin_contacts", source, columns)
    if moving is None:
        return
    staying = _row(db, "checkin_contacts", target, columns)
    db.execute("DELETE FROM checkin_contacts WHERE persona_id = ? AND user_id = ?", (source.persona_id, source.user_id))
    if staying is not None and str(staying["last_user_at"]) >= str(moving["last_user_at"]):
        return
    db.execute("DELETE FROM checkin_contacts WHERE persona_id = ? AND user_id = ?", (target.persona_id, target.user_id))
    db.execute(
        f"INSERT INTO checkin_contacts (persona_id, user_id, {columns}) VALUES (?, ?, ?, ?, ?, ?)",
        (target.persona_id, target.user_id, *moving.values()),
    )

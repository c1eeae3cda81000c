"""Moving a store: an embedded data directory copied into server mode (`companion migrate`).

Every table the embedded SQLite file holds is copied row for row into the PostgreSQL database,
positions (`seq`) included so that conversations keep their order, and the memories of the embedded
chromadb store into the Chroma server with their vectors (nothing is embedded again). The target
must be empty: a migration never merges into, or overwrites, a store in use. Afterwards the rows
and memories on both sides are counted again; the counts must match.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from knowledge.memory.chroma_store import COLLECTION, SPARSE_GRAPH
from knowledge.sql.database import Database

BATCH = 1000  # rows per insert batch; memories per chromadb call
# table -> the columns copied (the embedded schema's, as the stores upgraded it on open)
TABLES: dict[str, str] = {
    "messages": "seq, id, persona_id, conversation_id, user_id, role, speaker_name, content, sent_at, state,"
    " source_id, in_group, indexed",
    "message_vectors": "message_id, persona_id, user_id, vector",
    "history_index": "id, embedder, last_seq",
    "memory_history": "seq, persona_id, user_id, memory_id, action, actor, old_content, new_content, detail, at",
    "dead_letters": "seq, id, kind, persona_id, user_id, payload, error, at",
    "jobs": "seq, id, kind, persona_id, user_id, payload, state, attempts, not_before, last_error, created_at, held_by",
    "job_progress": "job_id, persona_id, user_id, progress",
    "token_usage": "day, role, model, calls, prompt_tokens, completion_tokens",
    "user_settings": "persona_id, user_id, share_in_groups, time_zone, checkins",
    "checkin_contacts": "persona_id, user_id, conversation_id, last_user_at, unanswered, off_reason",
    "checkins": "id, persona_id, user_id, rule, memory_id, occasion, conversation_id, due_at, stale_at, state, job_id,"
    " planned_at, done_at, message_id, note",
    "person_links": "identity, person_id, linked_at",  # not the codes of the last 10 minutes: they ask again
    "profiles": "persona_id, user_id, text, memory_ids, basis, author, written_at, changed_at",
    "ongoing_threads": "id, persona_id, user_id, title, news, since, updated_at, closed_at, message_ids, places",
}
POSITIONED = ("messages", "memory_history", "dead_letters", "jobs")  # their `seq` continues after the copy


class TargetNotEmptyError(Exception):
    """The server-mode store already holds data; a migration would mix two stores."""


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """What was copied, and what each side holds afterwards."""

    source: dict[str, int] = field(default_factory=dict)
    target: dict[str, int] = field(default_factory=dict)

    @property
    def matches(self) -> bool:
        return self.source == self.target


def counts(db: Database) -> dict[str, int]:
    """How many rows each copied table holds."""
    return {table: int(db.query(f"SELECT COUNT(*) FROM {table}")[0][0]) for table in TABLES}


def memory_count(client: Any) -> int:
    """How many memories a chromadb store holds (0 if it has no memory collection)."""
    names = {getattr(collection, "name", collection) for collection in client.list_collections()}
    return client.get_collection(COLLECTION).count() if COLLECTION in names else 0


def check_empty(target: Database, target_client: Any, persona_choices: int) -> None:
    """Refuse a target that holds anything (rows, persona choices or memories)."""
    held = {table: count for table, count in counts(target).items() if count and table != "history_index"}
    if persona_choices:
        held["persona_choices"] = persona_choices
    if memories := memory_count(target_client):
        held["memories (Chroma server)"] = memories
    if held:
        listed = ", ".join(f"{count} {table}" for table, count in held.items())
        raise TargetNotEmptyError(f"the target already holds {listed}")


def copy_tables(source: Database, target: Database) -> None:
    """Copy every table's rows from an embedded SQLite file, in order, then let the target's positions
    continue after the copied ones."""
    with target.transaction() as db:
        db.execute("DELETE FROM history_index")  # a fresh server database may have made its own
    for table, columns in TABLES.items():
        marks = ",".join("?" * len(columns.split(",")))
        last = -(2**63)  # the source is SQLite: every table is read in rowid order (from the least), a page at a time
        while rows := source.query(
            f"SELECT rowid, {columns} FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT ?", (last, BATCH)
        ):
            with target.transaction() as db:
                db.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", [row[1:] for row in rows])
            last = rows[-1][0]
    with target.transaction() as db:
        for table in POSITIONED:
            db.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'seq'), COALESCE(MAX(seq), 0) + 1, false)"
                f" FROM {table}"
            )


def copy_memories(source_client: Any, target_client: Any) -> int:
    """Copy every memory with its vector and metadata into the target's collection; returns how many."""
    names = {getattr(collection, "name", collection) for collection in source_client.list_collections()}
    if COLLECTION not in names:
        return 0
    source = source_client.get_collection(COLLECTION)
    # a server's collection keeps chromadb's own graph: a bot without snapshots searches it
    metadata = {key: value for key, value in (source.metadata or {}).items() if key not in SPARSE_GRAPH}
    target = target_client.get_or_create_collection(COLLECTION, embedding_function=None, metadata=metadata)
    copied = 0
    while batch := source.get(include=["documents", "metadatas", "embeddings"], limit=BATCH, offset=copied):
        if not batch["ids"]:
            break
        target.add(
            ids=batch["ids"], documents=batch["documents"], metadatas=batch["metadatas"], embeddings=batch["embeddings"]
        )
        copied += len(batch["ids"])
    return copied


def verify(source: Database, target: Database, memories: Mapping[str, Any]) -> MigrationReport:
    """Count both sides again: every table, and the memories of both chromadb stores."""
    return MigrationReport(
        {**counts(source), "memories": memory_count(memories["source"])},
        {**counts(target), "memories": memory_count(memories["target"])},
    )

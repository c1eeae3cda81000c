"""Erasing what an embedded chromadb keeps on disk after a delete.

`collection.delete` removes a record from chromadb's tables, but its text stays in the file:
- in `embeddings_queue`, chromadb's write-ahead log, whose Add/Update rows carry the document in their
  metadata until the vector index has persisted past them (it is purged only then, so a small store
  keeps them for ever);
- in the full-text index (FTS5), whose deletes only append tombstones to its segments;
- in free pages and free space inside pages: chromadb's own connection does not use `secure_delete`.

So after a forget, on our own connection: the queued writes of every id a later Delete superseded go
(the Delete rows stay: a restart still replays the deletion into the vector index), superseded queued
versions that quote the forgotten text lose their document, the full-text index is merged
(`optimize`), and VACUUM rewrites the file without a free byte. The vector files hold numbers only.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from .forget_target import ForgetTarget

DATABASE = "chroma.sqlite3"
DELETE_OPERATION = 3  # chromadb's embeddings_queue code for a Delete
DOCUMENT_KEY = "chroma:document"
FULLTEXT = "embedding_fulltext_search"
BUSY_TIMEOUT_MS = 30_000


def erase_remnants(database: Path, target: ForgetTarget) -> None:
    """Remove deleted records' remnants, and queued superseded versions matching `target`, from `database`."""
    if not database.exists():
        return
    connection = sqlite3.connect(database, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        connection.execute("PRAGMA secure_delete = ON")
        connection.execute("BEGIN IMMEDIATE")
        _drop_superseded_writes(connection)
        _blank_superseded_documents(connection, target)
        connection.execute("COMMIT")
        connection.execute(f"INSERT INTO {FULLTEXT}({FULLTEXT}) VALUES ('optimize')")
        connection.execute("VACUUM")  # chromadb's deletes freed pages without zeroing them: rewrite the file
        if connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
            _truncate_wal(connection)
    finally:
        connection.close()


def _drop_superseded_writes(connection: sqlite3.Connection) -> None:
    connection.execute(
        """DELETE FROM embeddings_queue AS queued
           WHERE queued.operation != :delete AND EXISTS (
             SELECT 1 FROM embeddings_queue AS later
             WHERE later.topic = queued.topic AND later.id = queued.id
               AND later.operation = :delete AND later.seq_id > queued.seq_id)""",
        {"delete": DELETE_OPERATION},
    )


def _blank_superseded_documents(connection: sqlite3.Connection, target: ForgetTarget) -> None:
    """An old version of a record that lives on (updated since) may still quote what was forgotten."""
    if not target:
        return
    rows = connection.execute(
        """SELECT queued.seq_id, queued.metadata FROM embeddings_queue AS queued
           WHERE queued.metadata IS NOT NULL AND EXISTS (
             SELECT 1 FROM embeddings_queue AS later
             WHERE later.topic = queued.topic AND later.id = queued.id AND later.seq_id > queued.seq_id)"""
    ).fetchall()
    blanked = []
    for seq_id, metadata in rows:
        fields = json.loads(metadata)
        if target.matches(str(fields.get(DOCUMENT_KEY, ""))):
            fields.pop(DOCUMENT_KEY)
            blanked.append((json.dumps(fields, ensure_ascii=False), seq_id))
    connection.executemany("UPDATE embeddings_queue SET metadata = ? WHERE seq_id = ?", blanked)


def _truncate_wal(connection: sqlite3.Connection, attempts: int = 50) -> None:
    for _ in range(attempts):
        if not connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
            return
        time.sleep(0.02)

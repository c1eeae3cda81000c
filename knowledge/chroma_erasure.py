"""Erasing what an embedded chromadb keeps on disk after a delete.

`collection.delete` removes a record from chromadb's tables, but its text stays in the file:
- in `embeddings_queue`, chromadb's write-ahead log, whose Add/Update rows carry the document in their
  metadata until the vector index has persisted past them (it is purged only then, so a small store
  keeps them for ever);
- in the full-text index (FTS5), whose deletes only append tombstones to its segments;
- in free pages and free space inside pages: chromadb's own connection does not use `secure_delete`.

So after a forget, on our own connection in a child process: the queued writes of every id a later Delete superseded go
(the Delete rows stay: a restart still replays the deletion into the vector index), superseded queued
versions that quote the forgotten text lose their document, the full-text index is merged
(`optimize`), and VACUUM rewrites the file without a free byte. The child process is not a detail: a
second copy of SQLite in chromadb's process (Python's, beside the one chromadb bundles) shares its POSIX
locks, and closing our connection can drop chromadb's locks mid-transaction; run beside chromadb's
writers that corrupted the file, while from a child it never did (see the research notes of issue 12).

The vector index files hold numbers, except for one leak: hnswlib allocates room for more vectors than
it holds without zeroing it, and writes that room to `data_level0.bin` and `length.bin` as it is, so
whatever text the process freed before (a message, a prompt) can land on disk. The room past the last
vector is zeroed too (`zero_unused_capacity`).
"""

from __future__ import annotations

import json
import logging
import pickle
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

from .forget_target import ForgetTarget

DATABASE = "chroma.sqlite3"
DELETE_OPERATION = 3  # chromadb's embeddings_queue code for a Delete
DOCUMENT_KEY = "chroma:document"
FULLTEXT = "embedding_fulltext_search"
BUSY_TIMEOUT_MS = 30_000
# hnswlib's header.bin as chromadb writes it: a format version, then offsetLevel0, max_elements,
# cur_element_count and size_data_per_element (little-endian u32, then u64s).
_HNSW_HEADER = struct.Struct("<IQQQQ")
_HNSW_VERSION = 1
LINK_COUNT_BYTES = 4  # length.bin: one u32 per element

log = logging.getLogger(__name__)


CHILD_TIMEOUT_SECONDS = 600


class ErasureError(RuntimeError):
    """The child process that erases chromadb's remnants failed; what it said is the message."""


def erase_remnants(database: Path, target: ForgetTarget) -> None:
    """Remove deleted records' remnants, and queued superseded versions matching `target`, from `database`.

    The SQL runs in a child process (see above); the vector files are only zeroed past their last vector.
    """
    for header in database.parent.glob("*/header.bin"):
        zero_unused_capacity(header.parent)
    if not database.exists():
        return
    done = subprocess.run(
        [sys.executable, "-m", __name__, str(database)],
        input=pickle.dumps(target),
        capture_output=True,
        timeout=CHILD_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ErasureError(f"erasing chromadb's remnants failed: {said[-1] if said else f'exit {done.returncode}'}")


def _erase_in_this_process(database: Path, target: ForgetTarget) -> None:
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


def zero_unused_capacity(segment: Path) -> None:
    """Zero the room of a vector index segment past its last vector (uninitialised memory written as it was)."""
    header = (segment / "header.bin").read_bytes()
    if len(header) < _HNSW_HEADER.size:
        return
    version, _, capacity, count, element_bytes = _HNSW_HEADER.unpack_from(header)
    if version != _HNSW_VERSION or count > capacity:
        log.warning("unknown vector index header in %s; its unused room was not zeroed", segment.name)
        return
    for name, used in (("data_level0.bin", count * element_bytes), ("length.bin", count * LINK_COUNT_BYTES)):
        path = segment / name
        if path.exists() and path.stat().st_size > used:
            with path.open("r+b") as file:
                file.seek(used)
                file.write(bytes(path.stat().st_size - used))


if __name__ == "__main__":
    _erase_in_this_process(Path(sys.argv[1]), pickle.loads(sys.stdin.buffer.read()))

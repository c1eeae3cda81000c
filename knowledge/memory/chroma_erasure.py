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

The numbers are a copy too: hnswlib only marks a deleted vector deleted, and chromadb never reuses its
place, so `data_level0.bin` keeps every deleted vector, and a vector of a known encoder gives much of a
short text back. chromadb's API drops them one way only: a new collection holding the live records
(`rebuild_collection`). chromadb leaves the old collection's vector index directory behind when it
deletes it (chroma-core/chroma#5259); the erasure removes every segment directory no segment owns.
"""

from __future__ import annotations

import json
import logging
import pickle
import shutil
import sqlite3
import struct
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from knowledge.forget.target import ForgetTarget

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


COMPACTION_DUE = "compaction-due"  # in the store's directory while deletes left vectors in the vector index
REBUILDING = "-rebuilding"  # the name of a collection being rebuilt, while it is filled
REBUILD_PAGE = 250  # records copied per call: about a tenth of a second that other calls wait


STORE_ID = "store_id"  # collection metadata: the identity a rebuilt collection keeps (see store_identity)


def store_identity(collection: Any) -> str:
    """What names a memory store across rebuilds: the id of the collection first made, kept in the metadata
    of every collection rebuilt from it (a rebuilt collection has an id of its own)."""
    return str((collection.metadata or {}).get(STORE_ID) or collection.id)


class Rebuild:
    """The collection `name` made again from its live records (vectors copied, nothing embedded again),
    in steps, so that other calls on the store may run between them: `take` each of the `pages`, then
    `finish` takes the writes made meanwhile and puts the new collection in the old one's place. A crash
    at any point leaves the old collection whole, or the new one whole under the rebuilding name
    (`finish_rebuild` at the next open)."""

    def __init__(self, client: Any, name: str, settings: Mapping[str, Any] | None = None) -> None:
        """Start a copy of every record `name` holds now (a write from here on is for `finish` to take); `settings`:
        chromadb settings the copy is made with instead of the old collection's (its metadata's `hnsw:` keys)."""
        self._client, self._name = client, name
        self._old = client.get_collection(name, embedding_function=None)
        temporary = f"{name}{REBUILDING}"
        if temporary in _names(client):
            client.delete_collection(temporary)  # an earlier copy cut short: the old collection is whole
        metadata = {**(self._old.metadata or {}), **(settings or {}), STORE_ID: store_identity(self._old)}
        self._fresh = client.create_collection(temporary, embedding_function=None, metadata=metadata)
        self._ids: list[str] = self._old.get(include=[])["ids"]

    def pages(self) -> Iterator[list[str]]:
        """The ids to copy, a page at a time (for `take`)."""
        for start in range(0, len(self._ids), REBUILD_PAGE):
            yield self._ids[start : start + REBUILD_PAGE]

    def finish(self, written: Iterable[str]) -> dict[str, Any]:
        """Take the records of `written` (ids added, changed or deleted since the start) as they are now, then
        replace the old collection with the new one; returns what `take` does."""
        taken = self.take(list(written))
        self._client.delete_collection(self._name)
        self._fresh.modify(name=self._name)
        return taken

    def take(self, ids: list[str]) -> dict[str, Any]:
        """Copy these records as they are now; an id no longer there is deleted from the copy. Returns the
        metadata copied of each id, None for those deleted."""
        if not ids:
            return {}
        page = self._old.get(ids=ids, include=["embeddings", "documents", "metadatas"])
        gone = set(ids) - set(page["ids"])
        if gone:
            self._fresh.delete(ids=list(gone))
        if page["ids"]:
            self._fresh.upsert(
                ids=page["ids"], embeddings=page["embeddings"], documents=page["documents"], metadatas=page["metadatas"]
            )
        return dict.fromkeys(gone) | dict(zip(page["ids"], page["metadatas"]))


def finish_rebuild(client: Any, name: str) -> None:
    """Complete or undo a rebuild of `name` that a crash cut short."""
    names = _names(client)
    temporary = f"{name}{REBUILDING}"
    if temporary not in names:
        return
    if name in names:
        client.delete_collection(temporary)  # cut while copying: the old collection is whole
    else:
        client.get_collection(temporary, embedding_function=None).modify(name=name)  # cut after the old one went


def _names(client: Any) -> set[str]:
    return {getattr(collection, "name", collection) for collection in client.list_collections()}


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
        _remove_orphaned_segments(database.parent, {row[0] for row in connection.execute("SELECT id FROM segments")})
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


def _remove_orphaned_segments(directory: Path, segments: set[str]) -> None:
    """Remove the vector index directories of segments chromadb no longer has (a deleted collection's)."""
    for header in directory.glob("*/header.bin"):
        if header.parent.name not in segments:
            shutil.rmtree(header.parent)


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

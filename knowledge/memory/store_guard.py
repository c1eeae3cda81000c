"""A memory store that goes missing is noticed, never silently replaced by an empty one.

chromadb creates an empty store wherever it is pointed, so a deleted or swapped `chroma/` directory
would start without a word and every memory would be gone. The SQLite file beside it remembers
which collection held the memories (in server mode, the shared database does, for the Chroma
server); at start-up the store must still hold that collection, and a message log with
conversations in it but no memory store at all is refused too. The other way round as well: a SQLite
file emptied or replaced by a new one (0 bytes after a bad restore) beside a memory store that holds
memories would start as new, and the earlier conversations would be silently gone.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, closing, nullcontext
from pathlib import Path
from typing import Any

from knowledge.memory.chroma_erasure import store_identity
from knowledge.sql.database import Database, opened

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_store (
    collection TEXT PRIMARY KEY,   -- the chromadb collection of the memories
    collection_id TEXT NOT NULL    -- its id: a new, empty collection of the same name has another
);
"""


class MemoryStoreMissingError(Exception):
    """The memory store is not the one this data directory's memories were kept in."""


class MessagesMissingError(Exception):
    """The message database is new or empty, though the memory store beside it holds memories."""


class MemoryStoreGuard:
    """Checks at start-up that the memory store is the one the message log knows, and records it."""

    def __init__(self, where: Database | Path, collection: str) -> None:
        """`where`: the database, or the path of the SQLite file (opened only while checking or recording)."""
        self._where = where
        self._collection = collection

    def check(self, client: Any, *, messages_held: bool) -> None:
        """Raise `MemoryStoreMissingError` if the store lost its memories (before anything creates them anew)."""
        current = _collection_id(client, self._collection)
        recorded = self._recorded()
        if current is None and (recorded is not None or messages_held):
            raise MemoryStoreMissingError("the memory store is missing or new, though earlier conversations are kept")
        if current is not None and recorded is not None and current != recorded:
            raise MemoryStoreMissingError("the memory store is not the one this data directory recorded")
        if current is not None and recorded is None and client.get_collection(self._collection).count():
            raise MessagesMissingError("it is new or empty, though the memory store beside it holds memories")

    def record(self, client: Any) -> None:
        """Remember the store's collection as the one holding this data directory's memories."""
        current = _collection_id(client, self._collection)
        if current is None:
            return
        with self._database() as db, db.transaction() as sql:
            sql.execute(
                "INSERT INTO memory_store (collection, collection_id) VALUES (?, ?) "
                "ON CONFLICT (collection) DO UPDATE SET collection_id = excluded.collection_id",
                (self._collection, current),
            )

    def _recorded(self) -> str | None:
        with self._database() as db:
            rows = db.query("SELECT collection_id FROM memory_store WHERE collection = ?", (self._collection,))
        return rows[0][0] if rows else None

    def _database(self) -> AbstractContextManager[Database]:
        if isinstance(self._where, Path):
            return closing(opened(self._where, _SCHEMA))
        return nullcontext(opened(self._where, _SCHEMA))


def _collection_id(client: Any, name: str) -> str | None:
    """The identity of the collection `name` (its id, or the id it was rebuilt from), None if there is none."""
    for collection in client.list_collections():
        if getattr(collection, "name", collection) == name:
            return store_identity(client.get_collection(name))
    return None

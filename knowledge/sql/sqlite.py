"""The embedded `Database` (`database.py`): one SQLite file, WAL, short transactions, deletes that erase.

Writes go through one connection under one lock; reads through a second, read-only one with its own lock. In WAL
mode a read never waits for a write at the file, so it must not wait for one here either: the event loop reads
the job queue between turns while worker threads write to it, and a read queued behind a write transaction (which
may itself wait for another store's write to the same file) stalled every conversation meanwhile.

`secure_delete` makes SQLite overwrite what a delete or update frees with zeros, so a forgotten row
leaves no bytes in free pages; the write-ahead log still holds older page images until a checkpoint
truncates it (`checkpoint`), which forgetting asks for.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from knowledge.sql.rows import Row, row_type


class SQLiteDatabase:
    """A writing and a reading connection, each used from any thread under its own lock."""

    def __init__(self, path: Path, schema: str = "") -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = _connect(path)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA secure_delete=ON")
        self.create(schema)
        self._read_lock = threading.Lock()
        self._reader = _connect(path)  # sees every committed write; none in progress
        self._reader.execute("PRAGMA query_only=ON")

    def create(self, schema: str) -> None:
        """Create the tables and indexes of `schema` that do not exist yet."""
        with self._lock:
            self._db.executescript(schema)

    def add_columns(self, table: str, columns: Mapping[str, str]) -> None:
        """Add the columns `table` lacks (a store made by an older version)."""
        present = {row[1] for row in self.query(f"PRAGMA table_info({table})")}
        with self.transaction() as db:
            for column, kind in columns.items():
                if column not in present:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction; rolled back if the block raises."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Rows of one read statement, as last committed (a write in progress is not waited for)."""
        with self._read_lock:
            return self._reader.execute(sql, params).fetchall()

    def checkpoint(self, *, attempts: int = 50) -> bool:
        """Copy the write-ahead log into the database and truncate it to nothing; False if readers kept it busy."""
        for _ in range(attempts):
            with self._lock:
                busy, _, _ = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                return True
            time.sleep(0.02)  # another connection to the file is mid-statement; it finishes quickly
        return False

    def close(self) -> None:
        """Close the connections."""
        with self._read_lock:
            self._reader.close()
        with self._lock:
            self._db.close()


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
    db.row_factory = _named
    return db


def _named(cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> Row:
    return row_type(tuple(column[0] for column in cursor.description))(values)

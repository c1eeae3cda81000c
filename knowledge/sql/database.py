"""The storage seam under every SQL store: one small interface, two real backends.

The message log, history vectors, journal (change log, jobs with their progress and dead letters,
token usage), per-user settings, persona choices and the memory-store guard are written once, in
SQL both backends speak: `?` placeholders, `INSERT … ON CONFLICT`, `RETURNING`. Beneath them:

- `SQLiteDatabase` (`sqlite.py`): one file in the data directory, owned by one process (the default);
- `PostgresDatabase` (`postgres.py`): a PostgreSQL server shared by any number of bot processes
  (`COMPANION_DATABASE_URL`), its schema made and upgraded by versioned migrations.

A store creates its embedded schema with `create` and adds columns it gained with `add_columns`; on
PostgreSQL both only check that the migrations made them, so the schema has one history per backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from knowledge.records import Scope
from knowledge.sql.rows import Row
from knowledge.sql.sqlite import SQLiteDatabase

SCOPE_BATCH = 500  # scopes per `(persona_id = ? AND user_id = ?) OR ...` condition


class Cursor(Protocol):
    """What a statement returns: its rows and how many rows it changed."""

    @property
    def rowcount(self) -> int: ...

    def fetchall(self) -> list[Row]: ...

    def fetchone(self) -> Row | None: ...


class Transaction(Protocol):
    """Statements run inside one transaction (`sqlite3.Connection` is one)."""

    def execute(self, sql: str, params: Sequence[Any] = ...) -> Cursor: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Cursor: ...


class Database(Protocol):
    """A relational store the knowledge stores share."""

    def create(self, schema: str) -> None:
        """Make sure the tables and indexes of a store's embedded `schema` exist."""
        ...

    def add_columns(self, table: str, columns: Mapping[str, str]) -> None:
        """Make sure `table` has these columns (name -> SQL type and default), added to older stores."""
        ...

    def transaction(self) -> AbstractContextManager[Transaction]:
        """A write transaction; rolled back if the block raises."""
        ...

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Rows of one read statement, each read by column name (`row["sent_at"]`)."""
        ...

    def checkpoint(self) -> bool:
        """Make what deletes freed leave the files this process can reach; True when done."""
        ...

    def close(self) -> None:
        """Release the connection(s)."""
        ...


def opened(where: Database | Path, schema: str = "") -> Database:
    """`where` itself, or an embedded SQLite file at that path; `schema` created in it either way."""
    if isinstance(where, Path):
        return SQLiteDatabase(where, schema)
    where.create(schema)
    return where


def iso(moment: datetime) -> str:
    """A moment as stored: ISO 8601 in UTC (text, so that comparing two compares the moments)."""
    return moment.astimezone(UTC).isoformat()


def scope_conditions(scopes: Iterable[Scope]) -> Iterator[tuple[str, list[str]]]:
    """SQL conditions matching these scopes' rows (by `persona_id` and `user_id`), a batch at a time, each with
    its parameters."""
    wanted = list(dict.fromkeys(scopes))
    for start in range(0, len(wanted), SCOPE_BATCH):
        batch = wanted[start : start + SCOPE_BATCH]
        condition = " OR ".join("(persona_id = ? AND user_id = ?)" for _ in batch)
        yield f"({condition})", [value for scope in batch for value in (scope.persona_id, scope.user_id)]

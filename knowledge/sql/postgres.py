"""Server mode: the SQL stores on PostgreSQL, shared by every bot process (`COMPANION_DATABASE_URL`).

- `PostgresDatabase` is the `Database` seam on a psycopg 3 connection pool. The stores' SQL is
  shared with SQLite (`?` placeholders become psycopg's `%s` here); the schema is made and upgraded
  by the versioned migrations in `migrations/` (yoyo), applied at connect under an advisory lock, so
  processes starting together migrate once.
- `PostgresCluster` is `ClusterLocks` on advisory locks: a process holds a lock on a connection of
  its own while it needs it, and the server releases it when that connection ends, so a process
  killed mid-turn or mid-job never leaves a lock behind. Each process holds one more lock, on its
  worker id, for as long as it runs: that is how the others tell it is alive.
- `PostgresForgetLedger` numbers forgets cluster-wide for the forget fence.

Every failure of the server or the link to it leaves here as the project's own `StorageError`
(`knowledge/errors.py`): `StorageUnavailableError` while the server is stopped, restarting or out of
reach, so the callers hold what they cannot store and try again, never psycopg's exception types.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from knowledge.errors import (
    StorageError,
    StorageUnavailableError,
    async_storage_errors,
    first_line,
    storage_error,
    storage_errors,
)
from knowledge.records import Scope
from knowledge.sql.rows import Row, row_type

if TYPE_CHECKING:  # psycopg comes with the server extra
    from psycopg._cursor_base import BaseCursor
    from psycopg.rows import RowMaker

MIGRATIONS = "migrations"  # package directory of the SQL migrations
QUERY_POOL = 8  # statements are short: a few connections serve a busy process
LOCK_POOL = 64  # a turn holds one while it runs (a conversation's turns never overlap, cluster-wide); configurable
# Waiting for a lock connection is waiting for a turn: past LOCK_POOL turns at once, the next waits its turn.
LOCK_POOL_WAIT = 3600.0
CONNECT_TIMEOUT = 10  # seconds
# A pool that cannot connect tries again with growing pauses for this long, then gives up until asked again:
# kept short, so that a server back after a long outage is found at the next statement, not minutes later.
RECONNECT_TIMEOUT = 5.0
# While the server is away, a statement is refused at once, and once a second one tries for a connection for a
# second at most: the stores are called from the event loop too, which must not stall a pool's wait per statement.
AWAY_PAUSE = 1.0
_MIGRATION_LOCK = "schema:migrations"


class SchemaMismatchError(StorageError):
    """A store expects a table or column the migrations did not make."""

    def __init__(self, detail: str) -> None:
        super().__init__("schema", detail)


def missing_driver() -> str:
    return "server mode needs psycopg: install the server extra (pip install 'companion[server]')"


def lock_key(name: str) -> int:
    """The advisory lock key (a signed 64-bit integer) of a lock name."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


@lru_cache(maxsize=512)
def postgres_sql(sql: str) -> str:
    """The shared SQL in psycopg's dialect: `?` placeholders become `%s` (a literal `%` is doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


def migrate(url: str) -> list[str]:
    """Apply the migrations the database lacks, one process at a time; returns the ids applied."""
    import psycopg
    from yoyo import get_backend, read_migrations

    with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as guard:
        guard.execute("SELECT pg_advisory_lock(%s)", (lock_key(_MIGRATION_LOCK),))
        backend = get_backend(_yoyo_url(url))
        try:
            with resources.as_file(resources.files(__package__) / MIGRATIONS) as directory:
                pending = backend.to_apply(read_migrations(str(directory)))
                backend.apply_migrations(pending)
            return [migration.id for migration in pending]
        finally:
            backend.connection.close()


def pending_migrations(url: str) -> list[str]:
    """The ids of the migrations the database lacks (`migrate` applies them at a bot's start)."""
    from yoyo import get_backend, read_migrations

    backend = get_backend(_yoyo_url(url))
    try:
        with resources.as_file(resources.files(__package__) / MIGRATIONS) as directory:
            return [migration.id for migration in backend.to_apply(read_migrations(str(directory)))]
    finally:
        backend.connection.close()


def named_rows(cursor: BaseCursor[Any, Any]) -> RowMaker[Row]:
    """psycopg's row factory for `Row`: the row class of the cursor's columns."""
    return row_type(tuple(column.name for column in cursor.description or ()))


def _yoyo_url(url: str) -> str:
    """yoyo names the psycopg 3 driver in the URL's scheme."""
    return re.sub(r"^postgres(ql)?://", "postgresql+psycopg://", url)


class _Transaction:
    """`Transaction` on a psycopg connection inside `conn.transaction()`."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._connection.cursor(row_factory=named_rows).execute(postgres_sql(sql), params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        cursor = self._connection.cursor(row_factory=named_rows)
        cursor.executemany(postgres_sql(sql), list(rows))
        return cursor


class PostgresDatabase:
    """The SQL stores' `Database` on a PostgreSQL server, shared by every bot process."""

    def __init__(self, url: str, *, pool_size: int = QUERY_POOL) -> None:
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError as error:
            raise StorageUnavailableError(missing_driver()) from error
        self.url = url
        try:
            migrate(url)
        except psycopg.OperationalError as error:
            raise StorageUnavailableError(f"cannot reach the database ({first_line(error)})") from error
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True},
            open=True,
            name="companion-queries",
            reconnect_timeout=RECONNECT_TIMEOUT,
        )
        with storage_errors():
            self._pool.wait(timeout=CONNECT_TIMEOUT)
        self._closed = False
        self._retry_at = 0.0  # while the server is away: when a statement may try it again

    def create(self, schema: str) -> None:
        """Check that the migrations made every table of a store's embedded schema."""
        wanted = re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", schema)
        if not wanted:
            return
        present = {row[0] for row in self.query(_TABLES, (wanted,))}
        missing = [table for table in wanted if table not in present]
        if missing:
            raise SchemaMismatchError(
                f"tables {', '.join(missing)} are missing: add a migration in knowledge/sql/migrations"
            )

    def add_columns(self, table: str, columns: Mapping[str, str]) -> None:
        """Check that the migrations gave `table` these columns."""
        present = {row[0] for row in self.query(_COLUMNS, (table,))}
        missing = [column for column in columns if column not in present]
        if missing:
            raise SchemaMismatchError(
                f"{table} lacks columns {', '.join(missing)}: add a migration in knowledge/sql/migrations"
            )

    @contextmanager
    def transaction(self) -> Iterator[_Transaction]:
        with self._connection() as connection, connection.transaction():
            yield _Transaction(connection)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self._connection() as connection:
            rows: list[Row] = connection.cursor(row_factory=named_rows).execute(postgres_sql(sql), params).fetchall()
            return rows

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """A pooled connection, or `StorageUnavailableError` at once while the server is away (see `AWAY_PAUSE`)."""
        away = self._retry_at > 0
        if away and time.monotonic() < self._retry_at:
            raise StorageUnavailableError("the database is out of reach")
        try:
            with storage_errors(), self._pool.connection(timeout=AWAY_PAUSE if away else None) as connection:
                yield connection
        except StorageUnavailableError:
            self._retry_at = time.monotonic() + AWAY_PAUSE
            raise
        self._retry_at = 0.0

    def checkpoint(self) -> bool:
        """Nothing of the server's files is ours to reach: its autovacuum reclaims what deletes free."""
        return True

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool.close()


_TABLES = (
    "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ANY(?)"
)
_COLUMNS = "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ?"


class PostgresCluster:
    """`ClusterLocks` on PostgreSQL advisory locks, released by the server when their holder's connection ends."""

    def __init__(self, url: str, *, pool_size: int = LOCK_POOL) -> None:
        from psycopg_pool import AsyncConnectionPool, ConnectionPool

        self._worker_id = f"worker_{uuid.uuid4().hex[:12]}"
        # Held for as long as this process runs: while it is, everyone can tell we are alive.
        self._url = url
        self._life_guard = threading.Lock()
        self._life = self._live()
        kwargs = {"autocommit": True}
        sizes: dict[str, Any] = {
            "min_size": 0,
            "max_size": pool_size,
            "kwargs": kwargs,
            "timeout": LOCK_POOL_WAIT,
            "reconnect_timeout": RECONNECT_TIMEOUT,
        }
        self._size = pool_size
        self._threads = ConnectionPool(url, open=True, name="companion-locks", **sizes)
        self._tasks = AsyncConnectionPool(url, open=False, name="companion-turns", **sizes)
        self._opening = asyncio.Lock()
        self._opened = False

    @property
    def worker_id(self) -> str:
        return self._worker_id

    @contextmanager
    def hold(self, name: str) -> Iterator[None]:
        key = lock_key(name)
        with storage_errors(), self._threads.connection(timeout=self._wait(self._threads)) as connection:
            connection.execute("SELECT pg_advisory_lock(%s)", (key,))
            try:
                yield
            finally:
                _unlock_now(connection, key)

    @asynccontextmanager
    async def acquire(self, name: str) -> AsyncIterator[None]:
        key = lock_key(name)
        pool = await self._pool()
        async with async_storage_errors(), pool.connection(timeout=self._wait(pool)) as connection:
            await connection.execute("SELECT pg_advisory_lock(%s)", (key,))
            try:
                yield
            finally:
                await _unlock(connection, key)

    @asynccontextmanager
    async def try_acquire(self, name: str) -> AsyncIterator[bool]:
        key = lock_key(name)
        pool = await self._pool()
        async with async_storage_errors(), pool.connection(timeout=self._wait(pool)) as connection:
            cursor = await connection.execute("SELECT pg_try_advisory_lock(%s)", (key,))
            [(held,)] = await cursor.fetchall()
            try:
                yield bool(held)
            finally:
                if held:
                    await _unlock(connection, key)

    def alive(self, worker_id: str) -> bool:
        self._revive()  # asked about itself too, as the watch does: its own life lock is held again after a restart
        if worker_id == self._worker_id:
            return True
        key = lock_key(worker_id)
        with storage_errors(), self._threads.connection(timeout=CONNECT_TIMEOUT) as connection:
            [(free,)] = connection.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchall()
            if free:  # nobody holds its life lock: that worker is gone
                connection.execute("SELECT pg_advisory_unlock(%s)", (key,))
        return not free

    def _live(self) -> Any:
        """A connection holding this worker's life lock."""
        import psycopg

        with storage_errors():
            life = psycopg.connect(self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
            life.execute("SELECT pg_advisory_lock(%s)", (lock_key(self._worker_id),))
        return life

    def _revive(self) -> None:
        """A server that restarted let go of our life lock with its connection: take it again, so the other
        processes (which ask `alive` as they look for work left behind) do not take this one's work."""
        with self._life_guard:
            try:
                with storage_errors():
                    self._life.execute("SELECT 1")
                return
            except StorageUnavailableError:
                self._life.close()
            self._life = self._live()

    def _wait(self, pool: Any) -> float:
        """How long to wait for a lock connection: while the pool has room, a connection is a connect away,
        so a server out of reach is told within `CONNECT_TIMEOUT`; a full pool means turns are waiting theirs."""
        stats = pool.get_stats()
        busy = stats.get("pool_size", 0) >= self._size and not stats.get("pool_available", 0)
        return LOCK_POOL_WAIT if busy else CONNECT_TIMEOUT

    async def aclose(self) -> None:
        if self._opened:
            await self._tasks.close()
        self._threads.close()
        self._life.close()

    async def _pool(self) -> Any:
        if not self._opened:
            async with self._opening:
                if not self._opened:
                    await self._tasks.open()
                    self._opened = True
        return self._tasks


async def _unlock(connection: Any, key: int) -> None:
    # A connection broken meanwhile has lost the lock with it; the pool throws that connection away.
    if connection.closed:
        return
    try:
        await connection.execute("SELECT pg_advisory_unlock(%s)", (key,))
    except Exception as error:
        if storage_error(error) is None:
            raise


def _unlock_now(connection: Any, key: int) -> None:
    """`_unlock` from a worker thread."""
    if connection.closed:
        return
    try:
        connection.execute("SELECT pg_advisory_unlock(%s)", (key,))
    except Exception as error:
        if storage_error(error) is None:
            raise


class PostgresForgetLedger:
    """`ForgetLedger` in the shared database: a forget in any process fences the jobs of every process."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    def count(self) -> int:
        [(count,)] = self._db.query("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM forget_numbers")
        return int(count)

    def record(self, scope: Scope) -> int:
        with self._db.transaction() as db:
            [(number,)] = db.execute(
                "INSERT INTO scope_forgets (persona_id, user_id, last_forget) VALUES (?, ?, nextval('forget_numbers'))"
                " ON CONFLICT (persona_id, user_id) DO UPDATE SET last_forget = excluded.last_forget"
                " RETURNING last_forget",
                (scope.persona_id, scope.user_id),
            ).fetchall()
        return int(number)

    def last(self, scope: Scope) -> int:
        rows = self._db.query(
            "SELECT last_forget FROM scope_forgets WHERE persona_id = ? AND user_id = ?",
            (scope.persona_id, scope.user_id),
        )
        return int(rows[0][0]) if rows else 0

"""One error family: the drivers' failures, as real drivers raise them, read into the project's own storage
errors; a failure that is not about storage stays what it was."""

from __future__ import annotations

import errno
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
from psycopg import errors as pg_errors

from knowledge.errors import StorageError, StorageUnavailableError, storage_errors, storage_problem
from knowledge.sql.postgres import PostgresCluster, PostgresDatabase, SchemaMismatchError
from tests.servers import PostgresServer, free_port

T = TypeVar("T")


def test_a_server_that_is_not_there_is_unavailable() -> None:
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(f"postgresql://nobody@127.0.0.1:{free_port()}/none", connect_timeout=2)
    assert storage_problem(refused.value) == "unavailable"
    with pytest.raises(StorageUnavailableError) as mapped, storage_errors():
        raise refused.value
    assert mapped.value.__cause__ is refused.value


def test_a_connection_the_server_ended_is_unavailable(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as victim, psycopg.connect(database_url) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (victim.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError) as ended:
            victim.execute("SELECT 1")
    assert storage_problem(ended.value) == "unavailable"


@pytest.mark.parametrize(
    ("sqlstate", "problem"),
    [("53100", "full"), ("57P01", "unavailable"), ("08006", "unavailable"), ("XX001", "damaged"), ("58030", "io")],
)
def test_postgresql_codes_name_the_problem(sqlstate: str, problem: str) -> None:
    assert storage_problem(pg_errors.lookup(sqlstate)("as the server says it")) == problem


def test_a_missing_table_is_a_schema_problem_and_a_mistake_in_sql_is_not_a_storage_problem(database_url: str) -> None:
    db = PostgresDatabase(database_url, pool_size=1)
    try:
        with pytest.raises(StorageError) as missing:
            db.query("SELECT * FROM no_such_table")
        assert missing.value.problem == "schema"
        with pytest.raises(psycopg.errors.SyntaxError):
            db.query("SELEC 1")
        with pytest.raises(SchemaMismatchError):
            db.create("CREATE TABLE IF NOT EXISTS no_such_table (id TEXT)")
    finally:
        db.close()


def test_sqlite_and_the_file_system_keep_their_kinds(tmp_path: Path) -> None:
    empty = tmp_path / "not-a-database"
    empty.write_bytes(b"this is not SQLite" * 100)
    with pytest.raises(sqlite3.DatabaseError) as damaged:
        sqlite3.connect(empty).execute("SELECT * FROM sqlite_master")
    assert storage_problem(damaged.value) == "damaged"
    assert storage_problem(OSError(errno.ENOSPC, "No space left on device")) == "full"
    assert storage_problem(OSError(errno.EROFS, "Read-only file system")) == "unwritable"
    assert storage_problem(ValueError("not storage")) is None


def eventually(statement: Callable[[], T]) -> T:
    """What `statement` returns once the server answers again (a bounded wait, never a timing assertion)."""
    for _ in range(100):
        try:
            return statement()
        except StorageUnavailableError:
            time.sleep(0.1)
    raise AssertionError("the database never answered again")


async def test_after_a_restart_the_stores_and_turn_locks_work_again_without_reopening() -> None:
    server = PostgresServer().start()
    try:
        url = server.create_database("outage")
        db, cluster = PostgresDatabase(url, pool_size=1), PostgresCluster(url, pool_size=2)
        other = PostgresCluster(url, pool_size=1)
        async with cluster.acquire("turn:a"):
            pass
        server.crash()
        with pytest.raises(StorageUnavailableError):
            db.query("SELECT 1")
        with pytest.raises(StorageUnavailableError):
            async with cluster.acquire("turn:a"):
                pass
        server.restart()
        assert eventually(lambda: db.query("SELECT 1"))[0][0] == 1  # a statement tries again within a second
        async with cluster.acquire("turn:a"):
            pass
        for each in (cluster, other):  # as each process's watch asks every few seconds
            each.alive(each.worker_id)
        assert cluster.alive(other.worker_id) and other.alive(cluster.worker_id)  # each took its life lock again
        await other.aclose()
        await cluster.aclose()
        db.close()
    finally:
        server.stop()

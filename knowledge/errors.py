"""What went wrong with a store, in a few words: unreachable, full, failing, unwritable, damaged, or a schema
the code does not expect.

SQLite, PostgreSQL (psycopg), chromadb and the file system each say it their own way; this is the one place
that reads their errors. Callers above knowledge/ ask `storage_problem` (or catch `StorageError`) and never
name a driver's exception: they need one answer to tell the person at the keyboard what to do (free space,
fix permissions, restore a backup, start the server) and to tell an outage, which passes, from a bug.
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Literal

StorageProblem = Literal["unavailable", "full", "io", "unwritable", "damaged", "schema"]

_UNWRITABLE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
# PostgreSQL's SQLSTATE codes (appendix A of its manual) by what they mean here; a class ("08") stands for
# every code in it that is not listed on its own.
_SQLSTATES: dict[str, StorageProblem] = {
    "08": "unavailable",  # connection exceptions
    "53100": "full",  # disk_full
    "53": "unavailable",  # insufficient resources: out of memory, too many connections
    "57P01": "unavailable",  # admin_shutdown
    "57P02": "unavailable",  # crash_shutdown
    "57P03": "unavailable",  # cannot_connect_now (starting up, shutting down)
    "25006": "unavailable",  # read_only_sql_transaction: a standby, mid-failover
    "58030": "io",  # io_error
    "XX001": "damaged",  # data_corrupted
    "XX002": "damaged",  # index_corrupted
    "42P01": "schema",  # undefined_table
    "42703": "schema",  # undefined_column
}


class StorageError(Exception):
    """A store failed in one of the ways `StorageProblem` names; the driver's own error is its `__cause__`."""

    def __init__(self, problem: StorageProblem, detail: str) -> None:
        super().__init__(detail)
        self.problem: StorageProblem = problem


class StorageUnavailableError(StorageError):
    """The database or memory server cannot be reached now (stopped, restarting, a dropped connection)."""

    def __init__(self, detail: str) -> None:
        super().__init__("unavailable", detail)


def storage_problem(error: BaseException) -> StorageProblem | None:
    """The kind of storage failure `error` is, or None if it is not one."""
    if isinstance(error, StorageError):
        return error.problem
    if isinstance(error, OSError):
        if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return "full"
        return "unwritable" if error.errno in _UNWRITABLE_ERRNOS else None
    # The drivers' errors are told by their module, so that the command line need not import them.
    module = type(error).__module__
    if module.startswith("psycopg"):
        return _postgres_problem(error)
    if module.startswith("httpx"):  # chromadb's HTTP client talking to a Chroma server that is not there
        return "unavailable" if _named(error, "TransportError") else None
    if not isinstance(error, sqlite3.DatabaseError) and not module.startswith("chromadb"):
        return None
    text = str(error).lower()
    if "full" in text or "no space" in text:
        return "full"
    if "readonly" in text or "read-only" in text or "unable to open" in text or "permission" in text:
        return "unwritable"
    if "disk i/o error" in text:  # SQLite's word for a write the disk refused, often for want of space
        return "io"
    if "not a database" in text or "malformed" in text or "corrupt" in text or "code: 26" in text:
        return "damaged"
    if "could not connect" in text or "connection refused" in text:  # chromadb's words for an absent server
        return "unavailable"
    return None


def storage_error(error: BaseException) -> StorageError | None:
    """`error` as the project's own storage error (its cause), or None if it is not a storage failure."""
    if isinstance(error, StorageError):
        return error
    problem = storage_problem(error)
    if problem is None:
        return None
    detail = first_line(error)
    found = StorageUnavailableError(detail) if problem == "unavailable" else StorageError(problem, detail)
    found.__cause__ = error
    return found


@contextmanager
def storage_errors() -> Iterator[None]:
    """Raise a driver's storage failure inside the block as a `StorageError` (anything else as it is)."""
    try:
        yield
    except Exception as error:
        found = storage_error(error)
        if found is None or found is error:
            raise
        raise found from error


@asynccontextmanager
async def async_storage_errors() -> AsyncIterator[None]:
    """`storage_errors` around an `async with` block."""
    with storage_errors():
        yield


def first_line(error: BaseException) -> str:
    """The first line of an error's message (a driver's may run to several), or its type's name."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _postgres_problem(error: BaseException) -> StorageProblem | None:
    code = getattr(error, "sqlstate", None)
    if code:
        return _SQLSTATES.get(code) or _SQLSTATES.get(code[:2])
    # No code: the client's own view of the link (refused, dropped, a pool that found no connection in time).
    return "unavailable" if _named(error, "OperationalError") else None


def _named(error: BaseException, name: str) -> bool:
    return any(kind.__name__ == name for kind in type(error).__mro__)

"""What went wrong with a store on disk, in a few words: full, failing, unwritable or damaged.

SQLite, chromadb and the file system each say it their own way; callers above knowledge/ need one
answer to tell the person at the keyboard what to do (free space, fix permissions, restore a backup).
"""

from __future__ import annotations

import errno
import sqlite3
from typing import Literal

StorageProblem = Literal["full", "io", "unwritable", "damaged"]

_UNWRITABLE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def storage_problem(error: BaseException) -> StorageProblem | None:
    """The kind of storage failure `error` is, or None if it is not one."""
    if isinstance(error, OSError):
        if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return "full"
        return "unwritable" if error.errno in _UNWRITABLE_ERRNOS else None
    # chromadb's errors are told by their module, so that the command line need not import chromadb
    if not isinstance(error, sqlite3.DatabaseError) and not type(error).__module__.startswith("chromadb"):
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
    return None

"""Start-up failures as one line: the file, what is wrong with it, and what to do (`--debug`: the traceback)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core.errors import UserFacingError
from knowledge.errors import storage_problem

DEBUG_HINT = "(companion --debug ... shows the traceback)"
FREE_SPACE = "free some space on that disk and start again"
MAKE_WRITABLE = "make it writable for this user, or set COMPANION_DATA_DIR to a directory you can write to"
RESTORE_MESSAGES = (
    "restore it from a backup, or move it aside to start without past conversations and background jobs "
    "(memories are kept in chroma/)"
)
RESTORE_EMPTIED = (
    "restore it from a backup; or, to start over without the earlier conversations but with the memories, "
    "start once with `companion --accept-empty-memory ...`"
)
RESTORE_MEMORIES = (
    "restore the chroma/ directory from a backup; or move it aside, start with `companion --accept-empty-memory "
    "...` and re-import each scope's `companion memory export` file (or its .bak) with `companion memory import`"
)


PRIVATE_DIRECTORY = 0o700
PRIVATE_FILES = 0o077  # the umask of a companion process: what it creates is its owner's alone


class StartupError(UserFacingError):
    """The companion cannot start; the message names the file and the fix."""


def ensure_writable(directory: Path) -> Path:
    """Create the data directory if needed and prove we can write there, or say clearly why not.

    A new directory is its owner's alone (0700): it holds every user's messages and memories (the files in it
    are too, by the process's umask, `PRIVATE_FILES`)."""
    try:
        directory.mkdir(mode=PRIVATE_DIRECTORY, parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as error:
        raise StartupError(
            f"the data directory {directory} is not writable ({error.strerror}); "
            "set COMPANION_DATA_DIR to a directory you can write to"
        ) from error
    return directory


@contextmanager
def opening(path: Path, *, if_damaged: str) -> Iterator[None]:
    """Turn a storage failure while opening `path` into a `StartupError` saying what to do."""
    try:
        yield
    except Exception as error:
        problem = storage_problem(error)
        if problem is None:
            raise
        what, fix = {
            "full": ("the disk is full", FREE_SPACE),
            "io": ("the disk refused a write (is it full, or failing?)", FREE_SPACE),
            "unwritable": ("it cannot be written", MAKE_WRITABLE),
            "damaged": (f"it is damaged ({error})", if_damaged),
            "unavailable": (f"it cannot be reached ({error})", "start its server or correct its address"),
            "schema": (f"its tables are not the ones this version needs ({error})", "a migration is missing"),
        }[problem]
        raise StartupError(f"{path}: {what}; {fix}") from error

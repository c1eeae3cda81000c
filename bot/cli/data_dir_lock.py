"""One process owns a data directory at a time: an advisory lock on `companion.lock` inside it.

The lock is `flock(2)`: the kernel releases it when its holder dies, even by kill -9, so a stale
lock never needs cleaning up. The file's text only names the holder (PID and command) so that the
process refused can say who holds the directory.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

LOCK_FILE = "companion.lock"


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a data directory, as its lock file says."""

    pid: int | None
    command: str

    def __str__(self) -> str:
        pid = "an unknown PID" if self.pid is None else f"PID {self.pid}"
        return f"`companion {self.command}` ({pid})" if self.command else pid


class DataDirLock:
    """The lock of one data directory; `try_acquire` it, `release` it (or let the process end)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self, command: str) -> bool:
        """Take the lock without waiting; True if this process now holds it. `command` names us to others."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited by child processes
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {command}\n".encode(), 0)
        self._fd = fd
        return True

    def holder(self) -> Holder:
        """Who holds the lock, as far as its file says (read by the process that was refused)."""
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return Holder(None, "")
        pid, _, command = text.partition(" ")
        return Holder(int(pid) if pid.isdigit() else None, command)

    def holder_if_held(self) -> Holder | None:
        """Who holds the lock now, None if nobody does (probed with a shared lock taken and dropped at once)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return self.holder()
        finally:
            os.close(fd)  # closing drops the probe's lock too
        return None

    def release(self) -> None:
        """Give the lock up (closing the file releases it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

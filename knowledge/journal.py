"""The journal: one SQLite file for the records the background keeps beside the memories.

Each part is its own module: the change log of memories (`change_log.py`), the job queue with its
dead letters (`job_queue.py`) and the tokens spent (`token_usage.py`). The journal opens the file
once for all three, and forgets a scope in all of them at once.
"""

from __future__ import annotations

from pathlib import Path

from .change_log import ChangeLog
from .job_queue import JobQueue
from .records import Scope
from .sqlite import SQLiteDatabase
from .token_usage import TokenUsageLog


class Journal:
    """The change log, the job queue and the token usage, in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self._db = SQLiteDatabase(path)
        self.changes = ChangeLog(self._db)
        self.jobs = JobQueue(self._db)
        self.usage = TokenUsageLog(self._db)

    def forget(self, scope: Scope) -> int:
        """Delete every history row, dead letter and job of `scope`; returns how many rows went."""
        params = (scope.persona_id, scope.user_id)
        with self._db.transaction() as db:
            return sum(
                db.execute(f"DELETE FROM {table} WHERE persona_id = ? AND user_id = ?", params).rowcount
                for table in ("memory_history", "dead_letters", "jobs", "job_progress")
            )

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

"""The journal: the records the background keeps beside the memories, in one database.

Each part is its own module: the change log of memories (`change_log.py`), the job queue with its
dead letters (`job_queue.py`), the tokens spent (`token_usage.py`), the check-ins (`checkin_log.py`), the
traces of replies (`reply_traces.py`) and the `/forget <what>` questions awaiting their answer
(`knowledge/forget/requests.py`). The journal opens the
database once for all; forgetting reaches all but token usage (which holds counts, never text).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from knowledge.forget.requests import ForgetRequests
from knowledge.forget.target import ForgetTarget
from knowledge.journal.change_log import ChangeLog
from knowledge.journal.checkin_log import CheckinLog
from knowledge.journal.job_queue import JobQueue
from knowledge.journal.reply_traces import ReplyTraces
from knowledge.journal.token_usage import TokenUsageLog
from knowledge.records import Scope
from knowledge.sql.database import Database, opened


class Journal:
    """The change log, the job queue, the token usage and the check-ins, in one database."""

    def __init__(self, where: Database | Path) -> None:
        """`where`: the database, or the path of an embedded SQLite file."""
        self._db = opened(where)
        self.changes = ChangeLog(self._db)
        self.jobs = JobQueue(self._db)
        self.usage = TokenUsageLog(self._db)
        self.checkins = CheckinLog(self._db)
        self.forget_requests = ForgetRequests(self._db)
        self.traces = ReplyTraces(self._db)

    def forget(self, scope: Scope) -> int:
        """Delete every history row, dead letter, job, check-in, reply trace and open forget question of `scope`;
        returns how many rows went."""
        return (
            self.changes.forget(scope)
            + self.jobs.forget(scope)
            + self.checkins.forget(scope)
            + self.forget_requests.forget(scope)
            + self.traces.forget(scope)
        )

    def erase(self, scope: Scope, memory_ids: Collection[str], target: ForgetTarget) -> int:
        """Erase forgotten text of `scope`: change-log content of these memories or matching `target`, and
        matching dead letters and job payloads; returns how many rows changed."""
        return self.changes.scrub(scope, memory_ids, target) + self.jobs.erase(scope, target)

    def checkpoint(self) -> bool:
        """Truncate the file's write-ahead log, so the pages that held erased rows are gone from it too."""
        return self._db.checkpoint()

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

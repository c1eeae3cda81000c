"""The journal: the records the background keeps beside the memories, in one database.

Each part is its own module: the change log of memories (`change_log.py`), the job queue with its
dead letters (`job_queue.py`), the tokens spent (`token_usage.py`), the check-ins (`checkin_log.py`), the
traces of replies (`reply_traces.py`) and the `/forget <what>` questions awaiting their answer
(`knowledge/forget/requests.py`). The journal opens the
database once for all; forgetting reaches all but token usage (which holds counts, never text).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from pathlib import Path

from knowledge.forget.requests import ForgetRequests
from knowledge.forget.target import ForgetTarget
from knowledge.journal.change_log import ChangeLog
from knowledge.journal.checkin_log import CheckinLog
from knowledge.journal.job_queue import JobQueue
from knowledge.journal.ongoing_threads import OngoingThreads
from knowledge.journal.profiles import Profiles
from knowledge.journal.reply_traces import ReplyTraces
from knowledge.journal.token_usage import TokenUsageLog
from knowledge.records import Scope
from knowledge.sql.database import Database, opened


class Journal:
    """The change log, the job queue, the token usage, the check-ins, the profiles and the threads, in one database."""

    def __init__(self, where: Database | Path) -> None:
        """`where`: the database, or the path of an embedded SQLite file."""
        self._db = opened(where)
        self.changes = ChangeLog(self._db)
        self.jobs = JobQueue(self._db)
        self.usage = TokenUsageLog(self._db)
        self.checkins = CheckinLog(self._db)
        self.forget_requests = ForgetRequests(self._db)
        self.profiles = Profiles(self._db)
        self.threads = OngoingThreads(self._db)
        self.traces = ReplyTraces(self._db)

    def forget(self, scope: Scope) -> int:
        """Delete every history row, dead letter, job, check-in, reply trace, open forget question, the profile
        and the threads of `scope`; returns how many rows went."""
        return (
            self.changes.forget(scope)
            + self.jobs.forget(scope)
            + self.checkins.forget(scope)
            + self.forget_requests.forget(scope)
            + self.profiles.forget(scope)
            + self.threads.forget(scope)
            + self.traces.forget(scope)
        )

    def erase(
        self,
        scope: Scope,
        memory_ids: Collection[str],
        target: ForgetTarget,
        *,
        at: datetime,
        message_ids: Collection[str] = (),
    ) -> int:
        """Erase forgotten text of `scope`: change-log content of these memories or matching `target`, matching
        dead letters and job payloads, the profile if it was written from these memories or carries `target`
        (cleared at `at`, to be written again later), and the threads learned from these messages or carrying
        `target`; returns how many rows changed."""
        return (
            self.changes.scrub(scope, memory_ids, target)
            + self.jobs.erase(scope, target)
            + self.profiles.erase(scope, memory_ids, target, at=at)
            + self.threads.erase(scope, message_ids, target)
        )

    def checkpoint(self) -> bool:
        """Truncate the file's write-ahead log, so the pages that held erased rows are gone from it too."""
        return self._db.checkpoint()

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

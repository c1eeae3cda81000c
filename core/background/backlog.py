"""The background's backlog, watched: one warning when its oldest job has waited too long, one when it caught up.

A slower machine or a slow endpoint degrades by a longer backlog, never by lost work; but memory is then
written late, and the operator should hear it once, not at every look.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from knowledge.journal.job_queue import Backlog

log = logging.getLogger(__name__)


class BacklogAlarm:
    """Says in the log when the oldest waiting job passes `threshold`, and again when the backlog is back under."""

    def __init__(self, threshold: timedelta) -> None:
        self.threshold = threshold
        self._behind_since: datetime | None = None

    @property
    def behind(self) -> bool:
        """Whether the last look found the backlog past the threshold."""
        return self._behind_since is not None

    def check(self, backlog: Backlog, now: datetime) -> bool:
        """Look at `backlog` (each scheduled pass does); returns whether it is behind."""
        age = backlog.age(now)
        if age > self.threshold and self._behind_since is None:
            self._behind_since = now
            log.warning(
                "background memory work is behind: %d jobs wait, the oldest for %s (warning past %s); memory is "
                "written late until it catches up",
                backlog.pending,
                _minutes(age),
                _minutes(self.threshold),
            )
        elif age <= self.threshold and self._behind_since is not None:
            log.warning(
                "background memory work caught up after %s behind; %d jobs wait",
                _minutes(now - self._behind_since),
                backlog.pending,
            )
            self._behind_since = None
        return self.behind

    def report(self, backlog: Backlog, now: datetime) -> dict[str, float | int | bool]:
        """What the operator sees of `backlog` (`companion memory stats`, the console's background page)."""
        age = backlog.age(now)
        return {
            "pending": backlog.pending,
            "oldest_waiting_seconds": round(age.total_seconds(), 1),
            "warning_past_seconds": self.threshold.total_seconds(),
            "behind": age > self.threshold,
        }


def _minutes(span: timedelta) -> str:
    return f"{span.total_seconds() / 60:.1f} min"

"""Our one wrapper around APScheduler: named jobs in UTC, so every platform and the CLI run the same jobs."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

DECAY_JOB = "decay:daily"
IDLE_JOB = "summarize:idle"
PRUNE_JOB = "prune:hourly"
PRUNE_INTERVAL = timedelta(hours=1)


_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _standard_weekdays(cron: str) -> str:
    # APScheduler 3 counts weekdays from Monday=0; crontab counts from Sunday=0 (and 7). Names mean the same in both.
    fields = cron.split()
    if len(fields) == 5:
        fields[4] = re.sub(r"\d+", lambda match: _WEEKDAYS[int(match.group()) % 7], fields[4])
    return " ".join(fields)


def decay_trigger(cron: str) -> CronTrigger:
    """The decay job's trigger from a standard crontab line (default daily at 04:00 UTC)."""
    try:
        return CronTrigger.from_crontab(_standard_weekdays(cron), timezone=UTC)
    except ValueError as error:
        raise ValueError(f"invalid decay cron {cron!r}: {error}") from error


def next_run(trigger: BaseTrigger, now: datetime) -> datetime | None:
    """When `trigger` fires next after `now` (a pure function, for tests and `--help` output)."""
    return trigger.get_next_fire_time(None, now)


class Scheduler:
    """Runs the maintenance jobs inside the bot process."""

    def __init__(self) -> None:
        self._scheduler = AsyncIOScheduler(timezone=UTC)

    def add(self, name: str, trigger: BaseTrigger, job: Callable[[], Awaitable[object]]) -> None:
        """Register `job` under `name`; a second registration of the name replaces the first."""
        # A run that overlaps the previous one is skipped (max_instances=1); a late run is merged.
        self._scheduler.add_job(job, trigger, id=name, name=name, replace_existing=True, max_instances=1, coalesce=True)

    def add_maintenance(
        self,
        *,
        decay: Callable[[], Awaitable[object]],
        summarize_idle: Callable[[], Awaitable[object]],
        prune: Callable[[], Awaitable[object]],
        decay_cron: str,
        idle_check: timedelta,
    ) -> None:
        """The standing jobs: daily decay, summarising conversations that went quiet, pruning finished work."""
        self.add(DECAY_JOB, decay_trigger(decay_cron), decay)
        self.add(IDLE_JOB, IntervalTrigger(seconds=idle_check.total_seconds(), timezone=UTC), summarize_idle)
        self.add(PRUNE_JOB, IntervalTrigger(seconds=PRUNE_INTERVAL.total_seconds(), timezone=UTC), prune)

    def jobs(self) -> dict[str, BaseTrigger]:
        """The registered jobs by name."""
        return {job.id: job.trigger for job in self._scheduler.get_jobs()}

    def start(self) -> None:
        """Start firing jobs (needs a running event loop)."""
        self._scheduler.start()

    def shutdown(self) -> None:
        """Stop firing jobs; a running job is not interrupted."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)

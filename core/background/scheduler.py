"""Our one wrapper around APScheduler: named jobs in UTC, so every platform and the CLI run the same jobs.

Where several processes share one store, each runs this scheduler and each fires every job; a job
then runs only if it claims its time slot first (`claim`: the minute a cron job fires in, the bucket
of an interval job), so a pass runs once across all of them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from knowledge.errors import storage_problem

DECAY_JOB = "decay:daily"
IDLE_JOB = "summarize:idle"
PRUNE_JOB = "prune:hourly"
CHECKINS_JOB = "checkins:plan"
PROFILES_JOB = "profiles:hourly"  # profiles due (facts changed, a day since the last) are rewritten
PROFILES_INTERVAL = timedelta(hours=1)
CONSOLIDATION_JOB = "consolidation:nightly"  # each active scope's facts consolidated
PRUNE_INTERVAL = timedelta(hours=1)
COMPACT_JOB = "compact:vectors"
# How soon a forgotten memory's vector leaves the vector index's files (docs/concepts/forgetting.md#the-vector-index).
COMPACT_INTERVAL = timedelta(minutes=5)
CRON_SLOT = timedelta(minutes=1)  # a cron job fires once a minute at most: its minute is its slot

log = logging.getLogger(__name__)
Job = Callable[[], Awaitable[object]]
Claim = Callable[[str, datetime], bool]  # (job name, slot start) -> whether this process runs it


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
    fires: datetime | None = trigger.get_next_fire_time(None, now)
    return fires


def slot_of(moment: datetime, length: timedelta) -> datetime:
    """The start of the time slot of `length` that `moment` falls in (slots counted from the epoch, in UTC)."""
    seconds = length.total_seconds()
    return datetime.fromtimestamp(moment.timestamp() // seconds * seconds, tz=UTC)


class Scheduler:
    """Runs the maintenance jobs inside the bot process."""

    def __init__(self, *, now: Callable[[], datetime] | None = None, claim: Claim | None = None) -> None:
        """`claim`: asked before each run whether this process runs the job's current slot (None: always)."""
        self._scheduler = AsyncIOScheduler(timezone=UTC)
        self._now = now or (lambda: datetime.now(UTC))
        self._claim = claim

    def add(self, name: str, trigger: BaseTrigger, job: Job, *, slot: timedelta = CRON_SLOT) -> None:
        """Register `job` under `name`, run at most once per `slot`; a second registration replaces the first."""
        # A run that overlaps the previous one is skipped (max_instances=1); a late run is merged.
        self._scheduler.add_job(
            self._once_per_slot(name, job, slot),
            trigger,
            id=name,
            name=name,
            replace_existing=True,
            max_instances=1,
            coalesce=True,
        )

    async def fire(self, name: str) -> None:
        """Run the job `name` now as its trigger would (its slot claimed first)."""
        found = self._scheduler.get_job(name)
        if found is None:
            raise LookupError(f"no scheduled job {name!r}")
        await found.func()

    def _once_per_slot(self, name: str, job: Job, slot: timedelta) -> Job:
        async def run() -> object:
            try:
                if self._claim is not None and not self._claim(name, slot_of(self._now(), slot)):
                    log.info("%s: this slot was run by another process", name)
                    return None
                return await job()
            except Exception as error:
                if storage_problem(error) != "unavailable":
                    raise
                log.warning("%s: skipped, the database is out of reach; it runs again at its next time", name)
                return None

        return run

    def add_maintenance(
        self,
        *,
        decay: Job,
        summarize_idle: Job,
        prune: Job,
        compact: Job,
        decay_cron: str,
        idle_check: timedelta,
    ) -> None:
        """The standing jobs: daily decay, summarising conversations that went quiet, pruning finished work,
        rebuilding the vector index without deleted vectors."""
        self.add(DECAY_JOB, decay_trigger(decay_cron), decay)
        idle = IntervalTrigger(seconds=idle_check.total_seconds(), timezone=UTC)
        self.add(IDLE_JOB, idle, summarize_idle, slot=idle_check)
        self.add(
            PRUNE_JOB, IntervalTrigger(seconds=PRUNE_INTERVAL.total_seconds(), timezone=UTC), prune, slot=PRUNE_INTERVAL
        )
        compacting = IntervalTrigger(seconds=COMPACT_INTERVAL.total_seconds(), timezone=UTC)
        self.add(COMPACT_JOB, compacting, compact, slot=COMPACT_INTERVAL)

    def add_profiles(self, write: Job) -> None:
        """The profile pass, hourly (once per slot across processes): each profile is rewritten at most daily."""
        every = IntervalTrigger(seconds=PROFILES_INTERVAL.total_seconds(), timezone=UTC)
        self.add(PROFILES_JOB, every, write, slot=PROFILES_INTERVAL)

    def add_consolidation(self, plan: Job, *, hour: int) -> None:
        """The nightly consolidation pass, at `hour` UTC (once across processes; each scope's night once)."""
        self.add(CONSOLIDATION_JOB, CronTrigger(hour=hour, minute=0, timezone=UTC), plan)

    def add_checkins(self, plan: Job, *, every: timedelta) -> None:
        """The check-in planning pass, every `every` (once per slot across processes)."""
        self.add(CHECKINS_JOB, IntervalTrigger(seconds=every.total_seconds(), timezone=UTC), plan, slot=every)

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

"""The scheduler wrapper: named jobs, cron parsing, next run as a pure function of now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.background.scheduler import (
    COMPACT_JOB,
    CONSOLIDATION_JOB,
    DECAY_JOB,
    IDLE_JOB,
    PRUNE_JOB,
    Scheduler,
    decay_trigger,
    next_run,
)


async def nothing() -> None:
    return None


def test_maintenance_jobs_are_registered_by_name() -> None:
    scheduler = Scheduler()
    scheduler.add_maintenance(
        decay=nothing,
        summarize_idle=nothing,
        prune=nothing,
        compact=nothing,
        decay_cron="0 4 * * *",
        idle_check=timedelta(minutes=5),
    )
    jobs = scheduler.jobs()
    assert set(jobs) == {DECAY_JOB, IDLE_JOB, PRUNE_JOB, COMPACT_JOB}
    now = datetime(2026, 1, 3, 18, 0, tzinfo=UTC)
    assert next_run(jobs[DECAY_JOB], now) == datetime(2026, 1, 4, 4, 0, tzinfo=UTC)


def test_the_decay_schedule_is_configurable() -> None:
    trigger = decay_trigger("30 2 * * 0")  # Sundays 02:30
    now = datetime(2026, 1, 3, 18, 0, tzinfo=UTC)  # a Saturday
    assert next_run(trigger, now) == datetime(2026, 1, 4, 2, 30, tzinfo=UTC)
    with pytest.raises(ValueError, match="invalid decay cron"):
        decay_trigger("every day")


def test_the_consolidation_runs_nightly_at_its_hour() -> None:
    scheduler = Scheduler()
    scheduler.add_consolidation(nothing, hour=5)
    trigger = scheduler.jobs()[CONSOLIDATION_JOB]
    assert next_run(trigger, datetime(2026, 1, 3, 18, 0, tzinfo=UTC)) == datetime(2026, 1, 4, 5, 0, tzinfo=UTC)
    assert next_run(trigger, datetime(2026, 1, 4, 5, 0, 1, tzinfo=UTC)) == datetime(2026, 1, 5, 5, 0, tzinfo=UTC)

"""The backlog alarm: one warning when the oldest job waits past the threshold, one when it caught up."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from core.background.backlog import BacklogAlarm
from knowledge.journal.job_queue import Backlog
from tests.fakes.clock import FakeClock


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]


def test_it_warns_once_when_behind_and_once_when_caught_up(caplog: pytest.LogCaptureFixture, clock: FakeClock) -> None:
    alarm = BacklogAlarm(timedelta(minutes=10))
    oldest = clock.now()
    clock.advance(minutes=10)
    assert not alarm.check(Backlog(40, oldest), clock.now())  # at the threshold is not past it
    assert warnings(caplog) == []

    clock.advance(minutes=2)
    assert alarm.check(Backlog(55, oldest), clock.now())
    clock.advance(minutes=5)
    assert alarm.check(Backlog(70, oldest), clock.now())  # still behind: no second warning
    (behind,) = warnings(caplog)
    assert "55 jobs wait" in behind and "12.0 min" in behind and "10.0 min" in behind

    clock.advance(minutes=3)
    assert not alarm.check(Backlog(2, clock.now() - timedelta(minutes=1)), clock.now())
    assert not alarm.check(Backlog(0, None), clock.now())
    behind_then_caught_up = warnings(caplog)
    assert len(behind_then_caught_up) == 2 and "caught up after 8.0 min behind" in behind_then_caught_up[1]

    clock.advance(minutes=1)
    assert alarm.check(Backlog(9, clock.now() - timedelta(minutes=11)), clock.now())  # behind again: said again
    assert len(warnings(caplog)) == 3

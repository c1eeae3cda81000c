"""A clock tests move by hand, so "ten days later" takes no time."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta


class FakeClock:
    """Starts at a fixed moment and only moves when told."""

    def __init__(self, start: datetime = datetime(2026, 1, 3, 18, 0, tzinfo=UTC)) -> None:
        self._now = start

    def now(self) -> datetime:
        return self._now

    def advance(self, **delta: float) -> datetime:
        """Move forward by `timedelta(**delta)` and return the new time."""
        self._now += timedelta(**delta)
        return self._now


class FakeTimer:
    """Monotonic seconds for pacing that move only when something waits: `sleep` returns at once, time advanced.

    `waits` records every wait asked for, so a test can tell pacing happened without measuring time.
    """

    def __init__(self) -> None:
        self._now = 1000.0
        self.waits: list[float] = []

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self._now += seconds
        await asyncio.sleep(0)  # still a point where other tasks run, as a real wait is

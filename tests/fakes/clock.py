"""A clock tests move by hand, so "ten days later" takes no time."""

from __future__ import annotations

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

"""A crash at a named point of a background job, for exactly-once tests.

`build_app(crash_point=...)` tells the hook of every point between two writes of a job. `CrashAt`
raises `SimulatedCrash` there: a BaseException, so the job runner neither retries nor dead-letters
the job, and what is left on disk is what a kill -9 at that moment leaves.
"""

from __future__ import annotations


class SimulatedCrash(BaseException):
    """The process "dies" here."""


class CrashAt:
    """Raises at the `nth` time `point` is reached; records every point passed before."""

    def __init__(self, point: str | None = None, nth: int = 1) -> None:
        self.point = point
        self.nth = nth
        self.passed: list[str] = []

    def __call__(self, point: str) -> None:
        self.passed.append(point)
        if point == self.point and self.passed.count(point) == self.nth:
            raise SimulatedCrash(point)

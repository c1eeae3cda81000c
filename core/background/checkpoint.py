"""Checkpoint: what one background job has decided and done so far, kept with the job.

A job's writes go to chromadb and SQLite, which share no transaction, and a process can die between
any two of them. So a job never repeats a decision on a re-run: it saves what it decided (a model's
verdict, the writes it planned) before acting on it, and counts the writes it has applied; a re-run
after a crash reads that back and carries on where the first run stopped. Each write is idempotent
(`core/background/effects.py`), so the one write that may have landed just before the crash lands once.

`reached(point)` marks the moments between two writes. It does nothing in the product; tests hand
the job runner a hook that raises at a named point, which is what a kill at that moment leaves behind.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

CrashPoint = Callable[[str], None]  # told the name of each point between two writes of a job


def no_crash(point: str) -> None:
    """The product's crash-point hook: every point passes."""


class Stage(StrEnum):
    """A step of a job whose decision the job's checkpoint keeps, under the same name as ever."""

    EXPLICIT = "explicit"  # the monitor: what the user's own "remember …" writes
    MODEL = "model"  # the monitor: the model's ops, checked and planned
    VERDICT = "verdict"  # a review: the model's verdict and its writes
    CHECKIN_TEXT = "text"  # a check-in: the message, written before it is sent
    PROFILE = "profile"  # a profile rewrite: the model's text and the memories it was written from
    CONSOLIDATION = "consolidation"  # a night's consolidation: the groups found, and what each became


class Checkpoint:
    """One job's saved progress: what each stage decided and how many of its writes are applied, each saved
    durably the moment it is put."""

    def __init__(
        self,
        saved: dict[str, Any] | None = None,
        save: Callable[[dict[str, Any]], None] | None = None,
        crash_point: CrashPoint = no_crash,
    ) -> None:
        """`saved`: what earlier runs kept; `save`: keeps the whole progress durably (None: kept in memory only,
        for a role run outside a job)."""
        self._values = dict(saved or {})
        self._save = save
        self._crash_point = crash_point

    def get(self, stage: Stage) -> Any | None:
        """What a run of this job decided at `stage`, if it got there."""
        return self._values.get(stage)

    def put(self, stage: Stage, value: Any) -> None:
        """Save what this run decided at `stage` (JSON-serialisable), durably before returning."""
        self._save_value(stage, value)

    def applied(self, stage: Stage) -> int:
        """How many of the writes planned at `stage` a run of this job applied."""
        return int(self._values.get(f"{stage}:applied", 0))

    def count_applied(self, stage: Stage, count: int) -> None:
        """Save that `count` of the writes planned at `stage` are applied, durably before returning."""
        self._save_value(f"{stage}:applied", count)

    def _save_value(self, name: str, value: Any) -> None:
        self._values[name] = value
        if self._save is not None:
            self._save(self._values)

    def reached(self, point: str) -> None:
        """The job stands between two writes at `point` (a crash here must not change the outcome)."""
        self._crash_point(point)

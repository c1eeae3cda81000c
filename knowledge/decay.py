"""The memory rules of DESIGN §3.1 as pure functions of (record, now, policy).

Decay depends only on the time since `last_access` and the importance the memory had then
(`base_importance`), so running the pass twice, or once after ten days of downtime, gives the
same result as running it every day.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

from .records import MemoryRecord, ReviewKind

DAY = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class MemoryPolicy:
    """Every number of the memory lifecycle; each is a setting a persona may override."""

    new_fact_importance: float = 1.0
    verified_fact_importance: float = 1.5
    boost: float = 0.3
    grace_days: int = 7  # no decay until this many whole days have passed since last_access
    fact_factor: float = 0.95  # per day after the grace period
    episode_factor: float = 0.8
    episode_max_age_days: int = 14  # episodes are deleted at this age, whatever their importance
    fact_delete_below: float = 0.3
    never_decay_at: float = 3.0  # core memories and anything this important never decay
    promote_review_at: float = 2.5
    decay_review_below: float = 0.5
    decay_keep_importance: float = 0.5  # what a KEEP on a decay review resets importance to

    def overridden(self, overrides: dict[str, Any]) -> MemoryPolicy:
        """A copy with some values replaced; unknown names are an error, not silently ignored."""
        known = {field.name for field in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown memory rules: {', '.join(sorted(unknown))}")
        values = {name: getattr(self, name) for name in known}
        values.update(overrides)
        return MemoryPolicy(**values)


@dataclass(frozen=True, slots=True)
class DecayOutcome:
    """What the decay pass does to one memory."""

    importance: float
    delete: bool = False
    review: ReviewKind | None = None


def decays(record: MemoryRecord, policy: MemoryPolicy) -> bool:
    """Whether the memory is subject to decay at all."""
    base = record.base_importance if record.base_importance is not None else record.importance
    if record.category in ("system", "core"):
        return False
    return record.category == "episode" or base < policy.never_decay_at


def decay_days(record: MemoryRecord, now: datetime, policy: MemoryPolicy) -> int:
    """Whole days of decay so far: days since last access beyond the grace period."""
    idle_days = math.floor((now - record.last_access) / DAY)
    return max(0, idle_days - policy.grace_days)


def decay_outcome(record: MemoryRecord, now: datetime, policy: MemoryPolicy) -> DecayOutcome:
    """The importance a memory has at `now`, and whether it is deleted or due for review."""
    if not decays(record, policy):
        return DecayOutcome(record.importance)
    base = record.base_importance if record.base_importance is not None else record.importance
    factor = policy.episode_factor if record.category == "episode" else policy.fact_factor
    importance = base * factor ** decay_days(record, now, policy)
    if record.category == "episode":
        return DecayOutcome(importance, delete=now - record.created_at >= timedelta(days=policy.episode_max_age_days))
    if importance < policy.decay_review_below and not record.decay_kept:
        # Not yet reviewed on this way down: the reviewer decides, even below the deletion line.
        return DecayOutcome(importance, review=None if record.review_pending else "decay")
    return DecayOutcome(importance, delete=importance < policy.fact_delete_below and not record.review_pending)


def boosted(record: MemoryRecord, policy: MemoryPolicy) -> float:
    """The importance after a BOOST (a memory that really shaped a reply)."""
    # Rounded: five boosts of 0.3 from 1.0 must reach 2.5 exactly, not 2.4999999999999996.
    return round(record.importance + policy.boost, 9)


def needs_promote_review(record: MemoryRecord, policy: MemoryPolicy) -> bool:
    """A fact that reached the promotion threshold and was not already reviewed for this crossing."""
    return (
        record.category == "fact"
        and record.importance >= policy.promote_review_at
        and not record.promote_reviewed
        and not record.review_pending
    )

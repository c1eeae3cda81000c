"""The memory rules (docs/development/design-rules.md#decay) as pure functions of (record, now, policy).

Importance is a function of time: the importance a memory had at `last_access` (its base), less a
factor for every whole day past the grace period. Nothing has to be written for a memory to fade, so
the store derives the current importance on every read, and the decay pass only acts on memories
whose `next_due` moment has come: running it twice, or once after ten days of downtime, gives the
same result as running it every day.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, Literal

from knowledge.records import CLEAR, KEEP, MemoryChange, MemoryRecord, ReviewKind

DAY = timedelta(days=1)
# The weight the monitor may give a new fact, times `new_fact_importance`: a passing remark at the bottom, a life
# event at the top, which stays below `promote_review_at` (only use makes core) and fades more slowly.
ADD_WEIGHTS = (0.5, 2.0)


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
    chapter_factor: float = 0.99  # per day after the grace period; a chapter is never deleted by decay
    fact_delete_below: float = 0.3
    never_decay_at: float = 3.0  # core memories and anything this important never decay
    promote_review_at: float = 2.5
    decay_review_below: float = 0.5
    decay_keep_importance: float = 0.5  # what a KEEP on a decay review resets importance to
    past_plan_days: int = 7  # a plan whose date has passed reads as past this long, then leaves the prompt
    review_retry_days: int = 3  # a requested review that has not run by then (lost, dead-lettered) is asked again

    def __post_init__(self) -> None:
        # A factor outside (0, 1] would make importance grow or flip sign, and no schedule would be right.
        for name in ("fact_factor", "episode_factor", "chapter_factor"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} must be above 0 and at most 1")

    def overridden(self, overrides: dict[str, Any]) -> MemoryPolicy:
        """A copy with some values replaced; unknown names are an error, not silently ignored."""
        known = {field.name for field in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown memory rules: {', '.join(sorted(unknown))}")
        values = {name: getattr(self, name) for name in known}
        values.update(overrides)
        return MemoryPolicy(**values)


PolicyFor = Callable[[str], MemoryPolicy]  # a persona id -> the rules its memories follow


def default_policy(persona_id: str) -> MemoryPolicy:
    """The rules of docs/development/design-rules.md#decay for every persona."""
    return MemoryPolicy()


@dataclass(frozen=True, slots=True)
class DecayOutcome:
    """What the decay pass does to one memory."""

    importance: float
    delete: bool = False
    review: ReviewKind | None = None


def weighed_importance(weight: float, policy: MemoryPolicy) -> float:
    """A new fact's importance under the monitor's `weight`, held to `ADD_WEIGHTS`."""
    low, high = ADD_WEIGHTS
    return policy.new_fact_importance * min(max(weight, low), high)


def base_of(record: MemoryRecord) -> float:
    """The importance the memory had at its last access: what decay starts from."""
    return record.importance if record.base_importance is None else record.base_importance


def decays(record: MemoryRecord, policy: MemoryPolicy) -> bool:
    """Whether the memory is subject to decay at all."""
    if record.category in ("system", "core"):
        return False
    return record.category in ("episode", "chapter") or base_of(record) < policy.never_decay_at


def decay_days(record: MemoryRecord, now: datetime, policy: MemoryPolicy) -> int:
    """Whole days of decay so far: days since last access beyond the grace period."""
    return max(0, (now - record.last_access) // DAY - policy.grace_days)


def _factor(record: MemoryRecord, policy: MemoryPolicy) -> float:
    if record.category == "chapter":
        return policy.chapter_factor
    return policy.episode_factor if record.category == "episode" else policy.fact_factor


def _decayed(base: float, factor: float, days: int) -> float:
    # The one formula: `current_importance` and `next_due` must agree to the last bit at a threshold.
    return base * factor**days


def current_importance(record: MemoryRecord, now: datetime, policy: MemoryPolicy) -> float:
    """The importance a memory has at `now`."""
    if not decays(record, policy):
        return base_of(record)
    return _decayed(base_of(record), _factor(record, policy), decay_days(record, now, policy))


def decay_outcome(record: MemoryRecord, now: datetime, policy: MemoryPolicy) -> DecayOutcome:
    """The importance a memory has at `now`, and whether it is deleted or due for review."""
    importance = current_importance(record, now, policy)
    if not decays(record, policy) or record.category == "chapter":
        return DecayOutcome(importance)  # a chapter fades in rank only: what removes one is a forget
    if record.category == "episode":
        return DecayOutcome(importance, delete=now - record.created_at >= timedelta(days=policy.episode_max_age_days))
    if record.review_pending:
        # The reviewer decides its fate; asked again only once the request's retry time has come.
        return DecayOutcome(importance, review=record.review_pending if review_retry_due(record, now) else None)
    if importance < policy.decay_review_below and not record.decay_kept:
        # Not yet reviewed on this way down: the reviewer decides, even below the deletion line.
        return DecayOutcome(importance, review="decay")
    return DecayOutcome(importance, delete=importance < policy.fact_delete_below)


def review_retry_due(record: MemoryRecord, now: datetime) -> bool:
    """Whether a requested review has had its time: it should have run by now, so it is asked again."""
    return record.review_pending is not None and record.review_retry_at is not None and now >= record.review_retry_at


def review_retry_at(now: datetime, policy: MemoryPolicy) -> datetime:
    """When a review requested at `now` is asked again if it has not run (the request was lost)."""
    return now + policy.review_retry_days * DAY


def next_due(record: MemoryRecord, policy: MemoryPolicy) -> datetime | None:
    """The first moment `decay_outcome` deletes the memory or asks for its review; None if never.

    Until a stored field changes, which rewrites it, this moment stays the same, so the store keeps
    it with the memory and the decay pass reads only the memories whose moment has come.
    """
    if not decays(record, policy) or record.category == "chapter":
        return None
    if record.category == "episode":
        return record.created_at + timedelta(days=policy.episode_max_age_days)
    if record.review_pending:
        # The reviewer's verdict is written through the store, which schedules the memory again; until
        # then only the retry time matters (None in stores written before retries: the verdict only).
        return record.review_retry_at
    line = policy.fact_delete_below
    if not record.decay_kept:  # a review first; or a deletion, should a persona put that line higher
        line = max(line, policy.decay_review_below)
    days = _days_until_below(base_of(record), line, policy.fact_factor)
    if days is None:
        return None
    if days == 0:
        return record.last_access  # already below: at once
    return record.last_access + (policy.grace_days + days) * DAY


def due_for_review(record: MemoryRecord, policy: MemoryPolicy) -> bool:
    """Whether what the decay pass does at `next_due` is asking for a review (capped per pass), not deleting."""
    if not decays(record, policy) or record.category in ("episode", "chapter"):
        return False
    if record.review_pending:
        return True  # asked again at its retry time
    return not record.decay_kept and policy.decay_review_below >= policy.fact_delete_below


def _days_until_below(base: float, line: float, factor: float) -> int | None:
    """The fewest whole decay days after which `base` is below `line`; None if it never gets there."""
    if base < line:
        return 0
    if line <= 0 or factor == 1:
        return None
    days = max(1, math.ceil(math.log(line / base, factor)))  # the logarithm may be one off either way
    while days > 1 and _decayed(base, factor, days - 1) < line:
        days -= 1
    while _decayed(base, factor, days) >= line:
        days += 1
    return days


def boosted(record: MemoryRecord, policy: MemoryPolicy) -> float:
    """The importance after a BOOST (a memory that really shaped a reply)."""
    # Rounded: five boosts of 0.3 from 1.0 must reach 2.5 exactly, not 2.4999999999999996.
    return round(record.importance + policy.boost, 9)


def needs_promote_review(record: MemoryRecord, boosted_to: float, policy: MemoryPolicy) -> bool:
    """A boost lifts a fact from below the promotion threshold to it or above, and no review is pending.

    Only the crossing counts: a fact kept by a promote review is not reviewed again while it stays
    above the line, but is once it has faded below it and real use lifts it back.
    """
    return (
        record.category == "fact"
        and not record.review_pending
        and record.importance < policy.promote_review_at <= boosted_to
    )


def after_boost(record: MemoryRecord, now: datetime, policy: MemoryPolicy) -> MemoryChange:
    """A BOOST: more importance from now on, one more hit, and a promote review if it crossed the line."""
    importance = boosted(record, policy)
    promote = needs_promote_review(record, importance, policy)
    return MemoryChange(
        importance=importance,
        last_access=now,
        hits=record.hits + 1,
        # back above the decay-review line: a later fall is reviewed again
        decay_kept=False if importance >= policy.decay_review_below else KEEP,
        review_pending="promote" if promote else KEEP,
        review_retry_at=review_retry_at(now, policy) if promote else KEEP,
    )


def after_review(
    record: MemoryRecord, kind: ReviewKind, verdict: Literal["promote", "keep"], now: datetime, policy: MemoryPolicy
) -> MemoryChange:
    """What a review that keeps the memory writes; a deletion writes nothing.

    The rule: docs/development/design-rules.md#reviews.
    """
    if verdict == "promote":
        return MemoryChange(category="core", review_pending=CLEAR)
    if kind == "promote":
        # not reviewed again while it stays above the line: only a boost across it asks again
        return MemoryChange(review_pending=CLEAR)
    return MemoryChange(
        # a boost since the review was queued must not be undone by the reset
        importance=max(record.importance, policy.decay_keep_importance),
        last_access=now,
        decay_kept=True,
        review_pending=CLEAR,
    )

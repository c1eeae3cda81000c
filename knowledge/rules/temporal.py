"""The time rules of memories as pure functions of (record, now, policy), beside `decay.py`.

The rules: docs/development/design-rules.md#time.

A memory may be about a moment (`about`: a plan or an event) and may hold only until a moment
(`until`: a state that ends, or a fact that changed). Times are compared in the user's zone, which
`now` carries: a date without a time of day (local midnight) lasts the whole day.

- A **plan** (a memory learned before the moment it is about) is *upcoming* until that moment has
  passed, then *past* for `past_plan_days`, then *faded*: it leaves the prompt (it stays stored and
  decays like any fact, and a message naming its time still finds it).
- An **event** (a memory about a moment before it was learned) simply carries its date.
- A **lifetime** the monitor gives a new state ends it: `today` at the end of the user's day, `week` at the end
  of their week (Sunday), `ongoing` never (`lifetime_end`).
- A **state** past its `until` leaves the prompt, except a fact that changed (`replaced_by`): its old
  value stays, read as the past ("used to live in Beijing, until Nov 2026").
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Literal

from knowledge.dates.moments import is_all_day
from knowledge.dates.windows import TimeWindow
from knowledge.records import MemoryRecord
from knowledge.rules.chapters import overlaps
from knowledge.rules.decay import MemoryPolicy

PlanStage = Literal["upcoming", "past", "faded"]
# The stamp the summarizer writes at the start of an episode: "[2026-01-03 18:00] …", in UTC.
_EPISODE_STAMP = re.compile(r"^\[(?P<stamp>\d{4}-\d{2}-\d{2} \d{2}:\d{2})\]\s*")
_DAY = timedelta(days=1)
# How long a state lasts, as the monitor may say on an ADD; code sets the end.
LIFETIMES = ("today", "week", "ongoing")


def ends(moment: datetime, now: datetime) -> datetime:
    """When a moment is over: a whole day (local midnight in `now`'s zone) at the next midnight, a time at once."""
    return moment + _DAY if is_all_day(moment.astimezone(now.tzinfo)) else moment


def plan_stage(record: MemoryRecord, now: datetime, policy: MemoryPolicy) -> PlanStage | None:
    """Where a plan stands at `now`; None for a memory that is no plan (no `about`, or about the past)."""
    if record.about is None:
        return None
    over = ends(record.about, now)
    if record.created_at >= over:
        return None  # learned after it happened: an event, not a plan
    if now < over:
        return "upcoming"
    return "past" if now < over + timedelta(days=policy.past_plan_days) else "faded"


def lifetime_end(lifetime: str, now: datetime) -> datetime | None:
    """The `until` of a state that lasts `lifetime` (one of `LIFETIMES`), learned at `now` (in the user's zone):
    the local midnight starting its last day, which `ends` reads as the whole day; None for `ongoing`."""
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    match lifetime:
        case "today":
            return today
        case "week":
            return today + timedelta(days=6 - now.weekday())  # through Sunday
        case "ongoing":
            return None
    raise ValueError(f"unknown lifetime {lifetime!r}: one of {', '.join(LIFETIMES)}")


def has_ended(record: MemoryRecord, now: datetime) -> bool:
    """Whether a state's `until` has passed (a whole day named as `until` ends at its end)."""
    return record.until is not None and now >= ends(record.until, now)


def in_prompt(record: MemoryRecord, now: datetime, policy: MemoryPolicy) -> bool:
    """Whether a memory may be shown in a chat prompt at `now`: not a faded plan, not a state that ended
    (a changed fact's old value stays, as the past). A chapter's `until` is the end of its window, not of
    its truth: it is always shown."""
    if record.category == "chapter":
        return True
    if plan_stage(record, now, policy) == "faded":
        return False
    return not has_ended(record, now) or record.replaced_by is not None


def episode_moment(record: MemoryRecord) -> datetime:
    """When an episode's conversation took place: its `about`, else the stamp its text starts with, else
    when it was stored (episodes stored before `about` existed carry only the stamp)."""
    if record.about is not None:
        return record.about
    match = _EPISODE_STAMP.match(record.content)
    if match:
        return datetime.strptime(match["stamp"], "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
    return record.created_at


def without_stamp(content: str) -> str:
    """An episode's text without the date stamp it starts with."""
    return _EPISODE_STAMP.sub("", content, count=1)


def window_moments(record: MemoryRecord) -> tuple[datetime | None, ...]:
    """The moments by which a memory belongs to a window of time: an episode's, when it took place; a
    fact's, when it was learned or changed, and the moment it is about."""
    if record.category == "episode":
        return (episode_moment(record),)
    return record.created_at, record.changed_at, record.about


def in_window(record: MemoryRecord, window: TimeWindow) -> bool:
    """Whether a memory belongs to a window of time (by one of its `window_moments`; a chapter, by sharing
    any time with it: "in January" finds January's weeks and month, and the year they are in)."""
    if record.category == "chapter":
        return overlaps(record, window.start, window.end)
    return any(moment is not None and moment in window for moment in window_moments(record))
